"""The kernel dialect's contract: one Dialect object re-exporting the ops of its modules, each op
documented with example IR, and the overview's example printed back as written."""

from __future__ import annotations

import re

from emmy.context import make_context
from emmy.dialects import kernel as K
from emmy.ir_io import parse_module, print_module


def test_every_op_and_type_is_registered_and_reexported():
    ops = {op.name: op for op in K.Kernel.operations}
    assert len(ops) == 20
    for name in K.__all__:
        assert hasattr(K, name), name
    for op in ops.values():
        assert getattr(K, op.__name__) is op  # K.SomeOp, as every user spells it
        assert op.__doc__ and "```mlir" in op.__doc__ and op.name in op.__doc__, op.name
    assert {a.name for a in K.Kernel.attributes} == {"kernel.ptr", "kernel.tensor_map", "kernel.fn", "kernel.dim"}


def test_the_overview_example_prints_back_as_written():
    (example,) = re.findall(r"```mlir\n(.*?)```", K.__doc__, re.S)
    module = parse_module(make_context(), example, "kernel.py")
    printed = print_module(module)
    body = "\n".join(line[2:] for line in printed.splitlines()[1:-1])  # inside builtin.module { }
    assert body.strip() == example.strip()
