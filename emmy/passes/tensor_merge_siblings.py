"""`tensor-merge-siblings`: sibling linears that share their input become one matmul.

Input invariant: a tensor-stage module (after `convert-torch-to-tensor`).

Output IR: every group of two or more `tensor.matmul {transpose_rhs}` ops in one block that share
their left operand, whose right operands are distinct 2-D function arguments (weights) with one
element type, and whose results have one element type, is replaced by a `tensor.concat` of the
weights along axis 0, one matmul over it, and one `tensor.slice` per original result (columns
`[offset, offset + N_i)`). The new ops' `emmy.origin` joins the originals' labels:
`linear_q_proj`, `linear_k_proj`, `linear_v_proj` -> `linear_qkv_proj`; `linear_gate_proj`,
`linear_up_proj` -> `linear_gate_up_proj`.

Invariants: the numbers are unchanged (each output column is the same dot product); the group
keeps the block order of its first member; everything else is untouched.

Before / after:

    %q = tensor.matmul %h, %wq {transpose_rhs, emmy.origin = "linear_q_proj"} : (tensor<32x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<32x2048xbf16>
    %k = tensor.matmul %h, %wk {transpose_rhs, emmy.origin = "linear_k_proj"} : (tensor<32x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<32x1024xbf16>

    %w = tensor.concat %wq, %wk {axis = 0 : i64, emmy.origin = "linear_qk_proj"} : (...) -> tensor<3072x1024xbf16>
    %qk = tensor.matmul %h, %w {transpose_rhs, emmy.origin = "linear_qk_proj"} : (...) -> tensor<32x3072xbf16>
    %q = tensor.slice %qk {starts = array<i64: 0, 0>, sizes = array<i64: 32, 2048>, strides = array<i64: 1, 1>, emmy.origin = "linear_qk_proj"} : ...
    %k = tensor.slice %qk {starts = array<i64: 0, 2048>, sizes = array<i64: 32, 1024>, ...} : ...
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from emmy.dialects import tensor as T
from emmy.dialects.tensor import ORIGIN


def _origin(op: Operation) -> str | None:
    attr = op.attributes.get(ORIGIN)
    return attr.data if isinstance(attr, StringAttr) else None


def merged_label(labels: Sequence[str | None]) -> str:
    """Join sibling labels: q_proj, k_proj, v_proj -> qkv_proj; gate_proj, up_proj -> gate_up_proj
    (each with the shared `linear_` prefix kept)."""
    if any(lbl is None for lbl in labels):
        return "linear_merged"
    names = [lbl.removeprefix("linear_") for lbl in labels if lbl is not None]
    parts = [n.split("_") for n in names]
    suffix: list[str] = []
    while all(len(p) > len(suffix) + 1 for p in parts) and len({p[-1 - len(suffix)] for p in parts}) == 1:
        suffix.insert(0, parts[0][-1 - len(suffix)])
    heads = ["_".join(p[: len(p) - len(suffix)]) for p in parts]
    joiner = "" if all(len(h) == 1 for h in heads) else "_"
    label = joiner.join(heads) + "".join("_" + s for s in suffix)
    return "linear_" + re.sub(r"[^A-Za-z0-9_]", "_", label)


def _is_weight_matmul(op: Operation) -> bool:
    return (
        isinstance(op, T.MatmulOp)
        and op.is_transposed
        and isinstance(op.rhs, BlockArgument)
        and len(op.rhs.type.get_shape()) == 2
    )


def _lhs_source(m: T.MatmulOp) -> tuple[SSAValue, Attribute]:
    """What the left operand reads, looking through one reshape (each lowered linear reshapes
    its input on its own), and the left operand's type."""
    lhs = m.lhs
    source = lhs.owner.input if isinstance(lhs.owner, T.ReshapeOp) else lhs
    return source, lhs.type


def _siblings(op: T.MatmulOp) -> list[T.MatmulOp]:
    """Weight matmuls in op's block reading the same left operand (directly or through an
    identical reshape), distinct weights, one weight and one result element type; block order."""
    source, lhs_type = _lhs_source(op)
    block = op.parent_block()
    candidates: list[Operation] = []
    for use in source.uses:
        user = use.operation
        if isinstance(user, T.ReshapeOp) and user.result.type == lhs_type:
            candidates.extend(u.operation for u in user.result.uses if u.index == 0)
        elif use.index == 0:
            candidates.append(user)
    group: list[T.MatmulOp] = []
    weights: set[SSAValue] = set()
    for m in candidates:
        if (
            _is_weight_matmul(m)
            and m.parent_block() is block
            and _lhs_source(m) == (source, lhs_type)
            and m.rhs not in weights
            and m.rhs.type.element_type == op.rhs.type.element_type
            and m.result.type.element_type == op.result.type.element_type
        ):
            group.append(m)
            weights.add(m.rhs)
    group.sort(key=block.get_operation_index)
    return group


class MergeSiblingMatmuls(RewritePattern):
    """Merge the matmuls sharing this one's left operand (applied at the first of the group)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: T.MatmulOp, rewriter: PatternRewriter):
        if not _is_weight_matmul(op):
            return
        group = _siblings(op)
        if len(group) < 2 or group[0] is not op:
            return
        label = StringAttr(merged_label([_origin(m) for m in group]))
        concat = T.ConcatOp([m.rhs for m in group], 0, attributes={ORIGIN: label})
        merged = T.MatmulOp(
            op.lhs, concat.result, op.result.type.element_type, True, attributes={ORIGIN: label}
        )
        rewriter.insert([concat, merged], InsertPoint.before(op))
        concat.result.name_hint = "w_" + label.data.removeprefix("linear_")
        merged.result.name_hint = label.data.removeprefix("linear_")
        lead = list(op.result.type.get_shape()[:-1])
        pieces, offset = [], 0
        for m in group:
            n = m.result.type.get_shape()[-1]
            pieces.append(
                T.SliceOp(
                    merged.result, [0] * len(lead) + [offset], [*lead, n], attributes={ORIGIN: label}
                )
            )
            offset += n
        rewriter.insert(pieces, InsertPoint.after(merged))
        for m, piece in zip(group, pieces):
            lhs_owner = m.lhs.owner
            rewriter.replace(m, [], [piece.result])
            if isinstance(lhs_owner, T.ReshapeOp) and lhs_owner.result.first_use is None:
                rewriter.erase(lhs_owner)
        if isinstance(shared := merged.lhs.owner, T.ReshapeOp) and shared.result.has_one_use():
            shared.attributes[ORIGIN] = label


@dataclass(frozen=True)
class TensorMergeSiblingsPass(ModulePass):
    """Merge sibling matmuls over function-argument weights (see the module docstring)."""

    name = "tensor-merge-siblings"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        PatternRewriteWalker(MergeSiblingMatmuls(), apply_recursively=False).rewrite_module(op)
