"""emmy-opt's usage lines name real passes and options (each pipeline in its docstring parses)."""

from __future__ import annotations

import re

from emmy.cli import opt
from emmy.ir_io import mlir_pipeline_to_spec, parse_pipeline


def test_every_pipeline_in_the_usage_parses():
    specs = re.findall(r"-p '([^']*)'", opt.__doc__)
    specs += [mlir_pipeline_to_spec(m) for m in re.findall(r"--pass-pipeline='([^']*)'", opt.__doc__)]
    assert len(specs) == 2
    for spec in specs:
        assert parse_pipeline(spec), spec
