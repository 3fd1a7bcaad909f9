"""A small builder for kernel-stage IR: index arithmetic with constant folding, loops, branches.

    kb = KB.new_func("k", [PtrType(bf16), ...], grid=(g, 1, 1), block=(256, 1, 1), smem=0)
    tid = kb.thread_id("x")
    i = kb.add(kb.mul(kb.block_id("x"), 256), tid)       # ints are constants
    with kb.for_(0, 8, 1, unroll=0) as k: ...              # the body is built inside
    with kb.if_(kb.lt(i, 512)): ...

Index constants are created once per kernel, at the top of its body. `add`, `mul`, ... fold
constants (x + 0, x * 1, c1 * c2), so generated IR stays small and readable.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from xdsl.builder import Builder
from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    f32,
    i1,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint

from emmy.dialects import kernel as K

Value = SSAValue | int


class KB:
    """Builds the body of one `kernel.func`."""

    def __init__(self, func: K.KernelFuncOp):
        self.func = func
        self.block = func.body.block
        self.builder = Builder(InsertPoint.at_end(self.block))
        self._consts: dict[tuple[Attribute, object], SSAValue] = {}
        self._const_anchor: Operation | None = None

    @staticmethod
    def new_func(
        name: str,
        arg_types: Sequence[Attribute],
        grid: Sequence[int],
        block: Sequence[int],
        smem: int = 0,
        min_blocks: int | None = None,
        arg_names: Sequence[str] = (),
        cluster: Sequence[int] | None = None,
    ) -> KB:
        func = K.KernelFuncOp(name, arg_types, grid, block, smem, min_blocks, cluster=cluster)
        for a, n in zip(func.body.block.args, arg_names):
            a.name_hint = n
        return KB(func)

    def finish(self) -> K.KernelFuncOp:
        if not isinstance(self.block.last_op, K.ReturnOp):
            self.block.add_op(K.ReturnOp())
        prune(self.func)
        return self.func

    # -- insertion -------------------------------------------------------------------------------
    def insert(self, op: Operation) -> Operation:
        self.builder.insert(op)
        return op

    def _insert_const(self, op: Operation) -> None:
        if self._const_anchor is None:
            first = self.block.first_op
            if first is None:
                self.block.add_op(op)
            else:
                self.block.insert_op_before(op, first)
        else:
            self.block.insert_op_after(op, self._const_anchor)
        self._const_anchor = op

    @contextmanager
    def at(self, block: Block) -> Iterator[None]:
        saved = self.builder.insertion_point
        self.builder.insertion_point = InsertPoint.at_end(block)
        try:
            yield
        finally:
            self.builder.insertion_point = saved

    # -- constants -------------------------------------------------------------------------------
    def idx(self, v: Value) -> SSAValue:
        if isinstance(v, int):
            return self.const(v, IndexType())
        return v

    def const(self, value: int | float, t: Attribute) -> SSAValue:
        key = (t, value if not isinstance(value, float) else ("f", repr(value)))
        if key in self._consts:
            return self._consts[key]
        if isinstance(t, (IndexType, IntegerType)):
            op = arith.ConstantOp(IntegerAttr(int(value), t))
            if isinstance(t, IndexType):
                op.result.name_hint = f"c{value}" if value >= 0 else f"cm{-value}"
        else:
            op = arith.ConstantOp(FloatAttr(float(value), t))
        self._insert_const(op)
        self._consts[key] = op.result
        return op.result

    def true(self) -> SSAValue:
        return self.const(1, i1)

    @classmethod
    def is_true(cls, v: SSAValue | None) -> bool:
        """Whether `v` is the constant i1 true (which reads back as -1)."""
        c = cls.const_value(v) if v is not None and isinstance(v.owner, arith.ConstantOp) else None
        return c is not None and c != 0

    @staticmethod
    def const_value(v: Value) -> int | None:
        if isinstance(v, int):
            return v
        o = v.owner
        if isinstance(o, arith.ConstantOp) and isinstance(o.value, IntegerAttr):
            return o.value.value.data
        return None

    # -- index arithmetic (folding) ----------------------------------------------------------------
    def add(self, a: Value, b: Value) -> SSAValue:
        ca, cb = self.const_value(a), self.const_value(b)
        if ca is not None and cb is not None:
            return self.idx(ca + cb)
        if ca == 0:
            return self.idx(b)
        if cb == 0:
            return self.idx(a)
        return self.insert(arith.AddiOp(self.idx(a), self.idx(b))).results[0]

    def sub(self, a: Value, b: Value) -> SSAValue:
        ca, cb = self.const_value(a), self.const_value(b)
        if ca is not None and cb is not None:
            return self.idx(ca - cb)
        if cb == 0:
            return self.idx(a)
        return self.insert(arith.SubiOp(self.idx(a), self.idx(b))).results[0]

    def mul(self, a: Value, b: Value) -> SSAValue:
        ca, cb = self.const_value(a), self.const_value(b)
        if ca is not None and cb is not None:
            return self.idx(ca * cb)
        if ca == 0 or cb == 0:
            return self.idx(0)
        if ca == 1:
            return self.idx(b)
        if cb == 1:
            return self.idx(a)
        return self.insert(arith.MuliOp(self.idx(a), self.idx(b))).results[0]

    def div(self, a: Value, b: Value) -> SSAValue:
        ca, cb = self.const_value(a), self.const_value(b)
        if ca is not None and cb is not None:
            return self.idx(ca // cb)
        if cb == 1:
            return self.idx(a)
        return self.insert(arith.DivUIOp(self.idx(a), self.idx(b))).results[0]

    def rem(self, a: Value, b: Value) -> SSAValue:
        ca, cb = self.const_value(a), self.const_value(b)
        if ca is not None and cb is not None:
            return self.idx(ca % cb)
        if cb == 1:
            return self.idx(0)
        return self.insert(arith.RemUIOp(self.idx(a), self.idx(b))).results[0]

    def xor(self, a: Value, b: Value) -> SSAValue:
        return self.insert(arith.XOrIOp(self.idx(a), self.idx(b))).results[0]

    def min(self, a: Value, b: Value) -> SSAValue:
        ca, cb = self.const_value(a), self.const_value(b)
        if ca is not None and cb is not None:
            return self.idx(min(ca, cb))
        return self.insert(arith.MinSIOp(self.idx(a), self.idx(b))).results[0]

    def max(self, a: Value, b: Value) -> SSAValue:
        ca, cb = self.const_value(a), self.const_value(b)
        if ca is not None and cb is not None:
            return self.idx(max(ca, cb))
        return self.insert(arith.MaxSIOp(self.idx(a), self.idx(b))).results[0]

    def cmp(self, pred: str, a: Value, b: Value) -> SSAValue:
        ca, cb = self.const_value(a), self.const_value(b)
        if ca is not None and cb is not None:
            ops = {"slt": ca < cb, "sle": ca <= cb, "sgt": ca > cb, "sge": ca >= cb, "eq": ca == cb, "ne": ca != cb}
            return self.const(int(ops[pred]), i1)
        return self.insert(arith.CmpiOp(self.idx(a), self.idx(b), pred)).results[0]

    def lt(self, a: Value, b: Value) -> SSAValue:
        return self.cmp("slt", a, b)

    def and_(self, a: SSAValue | None, b: SSAValue | None) -> SSAValue | None:
        if a is None:
            return b
        if b is None:
            return a
        for x, y in ((a, b), (b, a)):
            if self.is_true(x):
                return y
        return self.insert(arith.AndIOp(a, b)).results[0]

    def or_(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.insert(arith.OrIOp(a, b)).results[0]

    def select(self, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.insert(arith.SelectOp(c, a, b)).results[0]

    # -- floats ------------------------------------------------------------------------------------
    def fconst(self, value: float, t: Attribute = f32) -> SSAValue:
        return self.const(float(value), t)

    def addf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.insert(arith.AddfOp(a, b)).results[0]

    def mulf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.insert(arith.MulfOp(a, b)).results[0]

    def maxf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.insert(arith.MaximumfOp(a, b)).results[0]

    def to_f32(self, v: SSAValue) -> SSAValue:
        if isinstance(v.type, Float32Type):
            return v
        return self.insert(arith.ExtFOp(v, f32)).results[0]

    def to_type(self, v: SSAValue, t: Attribute) -> SSAValue:
        if v.type == t:
            return v
        if isinstance(t, Float32Type):
            return self.to_f32(v)
        return self.insert(arith.TruncFOp(self.to_f32(v), t)).results[0]

    # -- kernel ops ----------------------------------------------------------------------------------
    def thread_id(self, dim: str = "x") -> SSAValue:
        r = self.insert(K.ThreadIdOp(dim)).results[0]
        r.name_hint = "tid"
        return r

    def block_id(self, dim: str = "x") -> SSAValue:
        r = self.insert(K.BlockIdOp(dim)).results[0]
        r.name_hint = f"bid_{dim}"
        return r

    def shared(self, elt: Attribute, size: int, offset: int, align: int = 16, name: str | None = None) -> SSAValue:
        r = self.insert(K.SharedOp(elt, size, offset, align)).results[0]
        if name:
            r.name_hint = name
        return r

    def local(self, elt: Attribute, size: int, name: str | None = None) -> SSAValue:
        r = self.insert(K.LocalOp(elt, size)).results[0]
        if name:
            r.name_hint = name
        return r

    def barrier(self) -> None:
        self.insert(K.BarrierOp())

    def load(self, ptr: SSAValue, index: Value, result_type: Attribute | None = None, mask: SSAValue | None = None) -> SSAValue:
        return self.insert(K.LoadOp(ptr, self.idx(index), result_type, mask)).results[0]

    def store(self, value: SSAValue, ptr: SSAValue, index: Value, mask: SSAValue | None = None) -> None:
        self.insert(K.StoreOp(value, ptr, self.idx(index), mask))

    def ptr_add(self, ptr: SSAValue, offset: Value) -> SSAValue:
        if self.const_value(offset) == 0:
            return ptr
        return self.insert(K.PtrAddOp(ptr, self.idx(offset))).results[0]

    def call(self, callee: str, args: Sequence[SSAValue] = (), result: Attribute | None = None) -> SSAValue | None:
        op = self.insert(K.CallOp(callee, list(args), [result] if result is not None else []))
        return op.results[0] if result is not None else None

    def extract(self, v: SSAValue, lane: int) -> SSAValue:
        return self.insert(K.ExtractOp(v, lane)).results[0]

    def pack(self, elts: Sequence[SSAValue], vt: Attribute) -> SSAValue:
        return self.insert(K.PackOp(list(elts), vt)).results[0]

    @contextmanager
    def for_(self, lb: Value, ub: Value, step: Value = 1, unroll: int | None = None, name: str = "i") -> Iterator[SSAValue]:
        op = K.ForOp(self.idx(lb), self.idx(ub), self.idx(step), [], None, unroll)
        self.insert(op)
        iv = op.body.block.args[0]
        iv.name_hint = name
        with self.at(op.body.block):
            yield iv
            op.body.block.add_op(K.YieldOp())

    def for_iter(
        self,
        lb: Value,
        ub: Value,
        step: Value,
        inits: Sequence[SSAValue],
        body,  # (iv, carried) -> list of next values
        unroll: int | None = None,
        name: str = "i",
    ) -> list[SSAValue]:
        op = K.ForOp(self.idx(lb), self.idx(ub), self.idx(step), list(inits), None, unroll)
        self.insert(op)
        iv, *carried = op.body.block.args
        iv.name_hint = name
        with self.at(op.body.block):
            nxt = body(iv, list(carried))
            op.body.block.add_op(K.YieldOp(*nxt))
        return list(op.res)

    @contextmanager
    def if_(self, cond: SSAValue) -> Iterator[None]:
        if self.is_true(cond):
            yield
            return
        op = K.IfOp(cond)
        self.insert(op)
        with self.at(op.then_region.block):
            yield
            op.then_region.block.add_op(K.YieldOp())


_PURE_KERNEL = (K.ExtractOp, K.PackOp, K.PtrAddOp, K.ThreadIdOp, K.BlockIdOp, K.SharedOp)


def _removable(op: Operation) -> bool:
    if any(r.uses for r in op.results) or not op.results:
        return False
    if isinstance(op, _PURE_KERNEL):
        return True
    return op.dialect_name() in ("arith", "math") and not op.regions


def prune(func: K.KernelFuncOp) -> None:
    """Erase side-effect-free ops whose results are unused (one reverse sweep per block,
    repeated while something was erased)."""
    changed = True
    while changed:
        changed = False
        for op in reversed(list(func.walk())):
            if _removable(op):
                op.detach()
                op.erase()
                changed = True
