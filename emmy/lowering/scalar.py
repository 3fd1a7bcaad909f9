"""Emit the scalar code of a loop body (`loop.axis/load/reduce/store`, arith, math) as kernel IR.

A `Scope` binds some loop axes to kernel `index` values and emits loop-body values on demand
(memoized, in dependency order) at the builder's insertion point:

    em = BodyEmitter(kb, tile_op, ptrs)             # ptrs: loop block argument -> kernel pointer
    s = em.scope({"m": row, "n": col}, mask=in_range)
    v = s.value(some_loop_value)[0]                 # a kernel value
    s.store(store_op)                               # emits the kernel.store

Lanes: `em.scope(axes, lane_axis="n", lanes=8)` evaluates every value for n = base + 0..7 (the
bound value of n is the base, a multiple of 8). Values that do not depend on the lane axis are
emitted once; a load that is contiguous along it becomes one vector load (when its offset is
provably a multiple of the lane count) and a store one vector store.

`overrides` replace loop values (reduce results computed elsewhere) by kernel values: a list of
one value (all lanes) or one per lane. A `loop.reduce` met without an override is emitted as
serial `kernel.for` loops over its axes (the generic fallback).

Child scopes (`scope.child(...)`) are for nested kernel regions: they reuse the parent's values
that do not depend on the axes they rebind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    IntegerAttr,
    TensorType,
    VectorType,
)
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from emmy.analysis.classify import Domains
from emmy.analysis.operands import LaneForms
from emmy.lowering.kb import KB
from emmy.schedule.reduction import row_major_strides
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K
from emmy.dialects.loop import AxisOp, LoadOp, ReduceOp, StoreOp


def elt_bytes(t: Attribute) -> int:
    return K.element_bytes(t)


class BodyEmitter:
    """Shared state for emitting one loop body into one kernel."""

    def __init__(
        self,
        kb: KB,
        owner: Operation,
        ptrs: Mapping[SSAValue, SSAValue],
        out_ptrs: Sequence[SSAValue] = (),
        dom: Domains | None = None,
    ):
        self.kb = kb
        self.owner = owner
        self.ptrs = dict(ptrs)
        self.out_ptrs = list(out_ptrs)
        self.dom = dom or Domains(owner)
        self.extents: dict[str, int] = owner.properties["axes"].as_dict()  # type: ignore[union-attr]
        self._affine_cache: dict = {}
        self._lanes = LaneForms(self.dom)

    def scope(
        self,
        axes: Mapping[str, SSAValue | int],
        *,
        lane_axis: str | None = None,
        lanes: int = 1,
        mask: SSAValue | None = None,
        overrides: Mapping[SSAValue, Sequence[SSAValue]] | None = None,
        load_hooks: Mapping[LoadOp, object] | None = None,
        guards: frozenset[str] | None = None,
    ) -> Scope:
        """`guards`: the axes whose out-of-range values `mask` is for (None: any); a load whose
        address depends on none of them is in range whatever the mask says, and is not masked."""
        s = Scope(self, None, axes, lane_axis, lanes, mask, overrides or {})
        s.guards = guards
        if load_hooks:
            s.load_hooks = dict(load_hooks)
        return s

    # -- access analysis (emmy.analysis.operands.LaneForms, shared with the plan's facts) ------------
    def access(self, tensor_type: TensorType, indices: Sequence[SSAValue], lane_axis: str | None, lanes: int) -> tuple[bool, bool]:
        """(contiguous along lane_axis with unit stride, base offset provably a multiple of lanes),
        for a load or store whose lane axis takes base + 0 .. base + lanes-1, base a multiple of lanes."""
        if lane_axis is None or lanes == 1:
            return False, False
        return self._lanes.access(tensor_type, indices, lane_axis, lanes)

    def lane_form(self, v: SSAValue, lane_axis: str, lanes: int) -> tuple[int | None, int]:
        """(a, m): v(base + j) = v(base) + a * j for j < lanes (a None: not so), and m divides
        v(base) (0: v(base) is 0)."""
        return self._lanes.form(v, lane_axis, lanes)


class Scope:
    def __init__(
        self,
        em: BodyEmitter,
        parent: Scope | None,
        axes: Mapping[str, SSAValue | int],
        lane_axis: str | None,
        lanes: int,
        mask: SSAValue | None,
        overrides: Mapping[SSAValue, Sequence[SSAValue]],
    ):
        self.em = em
        self.kb = em.kb
        self.parent = parent
        self.axes = {a: em.kb.idx(v) for a, v in axes.items()}
        self.rebound = frozenset(axes)
        self.lane_axis = lane_axis if lanes > 1 else None
        self.lanes = lanes if lane_axis is not None else 1
        self.mask = mask
        self.guards: frozenset[str] | None = parent.guards if parent is not None else None  # (BodyEmitter.scope)
        self.memo: dict[SSAValue, list[SSAValue]] = {v: list(x) for v, x in overrides.items()}
        self._lane0: Scope | None = None
        # loop.load -> callable(scope) giving the loaded values (one per lane), e.g. from a
        # shared-memory copy; inherited by child scopes
        self.load_hooks: dict = dict(parent.load_hooks) if parent is not None else {}

    def lane0(self) -> Scope:
        """This scope evaluated at lane 0 only (for addresses of vector accesses)."""
        if self.lane_axis is None:
            return self
        if self._lane0 is None:
            s = Scope(self.em, self, dict(self.axes), None, 1, self.mask, {})
            s.rebound = frozenset((self.lane_axis,))
            self._lane0 = s
        return self._lane0

    def child(
        self,
        axes: Mapping[str, SSAValue | int],
        *,
        mask: SSAValue | None = None,
        overrides: Mapping[SSAValue, Sequence[SSAValue]] | None = None,
    ) -> Scope:
        merged = dict(self.axes)
        merged.update({a: self.kb.idx(v) for a, v in axes.items()})
        s = Scope(self.em, self, merged, self.lane_axis, self.lanes, self.kb.and_(self.mask, mask), overrides or {})
        s.rebound = frozenset(axes)
        if mask is not None:
            s.guards = None  # (what the child's own mask is for is not known)
        return s

    # -- lookup --------------------------------------------------------------------------------------
    def _lookup(self, v: SSAValue) -> list[SSAValue] | None:
        if v in self.memo:
            return self.memo[v]
        if self.parent is not None and not (self.em.dom(v) & self.rebound):
            r = self.parent._lookup(v)
            if r is not None:
                return r
        return None

    def lane_dep(self, v: SSAValue) -> bool:
        return self.lane_axis is not None and self.lane_axis in self.em.dom(v)

    def value(self, v: SSAValue) -> list[SSAValue]:
        """The kernel values of a loop value, one per lane (the same value repeated when the
        value does not depend on the lane axis)."""
        r = self._lookup(v)
        if r is not None:
            return r if len(r) == self.lanes else r * self.lanes
        r = self._emit(v)
        if len(r) == 1 and self.lanes > 1:
            r = r * self.lanes
        self.memo[v] = r
        return r

    def one(self, v: SSAValue) -> SSAValue:
        """The value of a loop value that does not depend on the lane axis."""
        return self.value(v)[0]

    # -- emission ------------------------------------------------------------------------------------
    def _n(self, v: SSAValue) -> int:
        return self.lanes if self.lane_dep(v) else 1

    def _emit(self, v: SSAValue) -> list[SSAValue]:
        kb = self.kb
        op = v.owner
        if isinstance(v, BlockArgument):
            raise EmmyError(f"codegen: a whole tensor ({v}) is used as a scalar")
        if isinstance(op, AxisOp):
            a = op.axis_name
            if a not in self.axes:
                raise EmmyError(f"codegen: axis '{a}' is not bound here")
            base = self.axes[a]
            if a == self.lane_axis:
                return [kb.add(base, j) for j in range(self.lanes)]
            return [base]
        if isinstance(op, LoadOp):
            return self._load(op)
        if isinstance(op, ReduceOp):
            return self._reduce_serial(op)
        if isinstance(op, arith.ConstantOp):
            t = op.result.type
            val = op.value
            if isinstance(val, IntegerAttr):
                return [kb.const(val.value.data, t)]
            return [kb.const(float(val.value.data), t)]  # type: ignore[union-attr]
        if op.dialect_name() in ("arith", "math") and not op.regions:
            n = self._n(v)
            operands = [self.value(o) for o in op.operands]
            out: list[SSAValue] = []
            for j in range(n):
                new = op.clone_without_regions()
                for i, vals in enumerate(operands):
                    new.operands[i] = vals[j] if len(vals) > 1 else vals[0]
                kb.insert(new)
                if op.results[0].name_hint:
                    new.results[0].name_hint = op.results[0].name_hint
                out.append(new.results[v.index])  # type: ignore[union-attr]
            return out
        raise EmmyError(f"codegen: cannot emit '{op.name}' from a loop body")

    def _offset(self, tensor_type: TensorType, index_vals: Sequence[list[SSAValue]], lane: int) -> SSAValue:
        kb = self.kb
        strides = row_major_strides(tensor_type.get_shape())
        off: SSAValue | int = 0
        for vals, st in zip(index_vals, strides):
            iv = vals[lane] if len(vals) > 1 else vals[0]
            off = kb.add(off, kb.mul(iv, st))
        return kb.idx(off)

    def _load(self, op: LoadOp) -> list[SSAValue]:
        kb = self.kb
        hook = self.load_hooks.get(op)
        if hook is not None:
            return hook(self)
        t = op.tensor.type
        assert isinstance(t, TensorType)
        ptr = self.em.ptrs.get(op.tensor)
        if ptr is None:
            raise EmmyError(f"codegen: no pointer for the loaded tensor {op.tensor}")
        elt = t.element_type
        n = self._n(op.result)
        mask = self.mask if self.guards is None or self.em.dom.of_op(op) & self.guards else None
        if n == 1:
            idx = [self.value(i)[:1] for i in op.indices]
            return [kb.load(ptr, self._offset(t, idx, 0), elt, mask)]
        contiguous, aligned = self.em.access(t, op.indices, self.lane_axis, self.lanes)
        if contiguous and aligned and self.lanes * elt_bytes(elt) <= 16 and self.lanes in K.VECTOR_WIDTHS:
            l0 = self.lane0()
            off = self._offset(t, [l0.value(i) for i in op.indices], 0)
            vec = kb.load(ptr, off, VectorType(elt, [self.lanes]), mask)
            return [kb.extract(vec, j) for j in range(self.lanes)]
        if contiguous and aligned and self.lanes * elt_bytes(elt) > 16:
            per = 16 // elt_bytes(elt)
            if per in K.VECTOR_WIDTHS and self.lanes % per == 0:
                l0 = self.lane0()
                base = self._offset(t, [l0.value(i) for i in op.indices], 0)
                out = []
                for c in range(self.lanes // per):
                    vec = kb.load(ptr, kb.add(base, c * per), VectorType(elt, [per]), mask)
                    out += [kb.extract(vec, j) for j in range(per)]
                return out
        idx = [self.value(i) for i in op.indices]
        return [kb.load(ptr, self._offset(t, idx, j), elt, mask) for j in range(n)]

    def _reduce_serial(self, op: ReduceOp) -> list[SSAValue]:
        """A loop.reduce as nested kernel.for loops over its axes (one thread does it all)."""
        kb = self.kb
        t = op.result.type
        init = kb.fconst(0.0 if op.kind_name == "sum" else float("-inf"), t)
        axes = list(op.axis_names)
        n = self._n(op.result)
        results = []
        for lane in range(n):
            results.append(self._reduce_loops(op, axes, init, lane))
        return results

    def _reduce_loops(self, op: ReduceOp, axes: list[str], init: SSAValue, lane: int) -> SSAValue:
        kb = self.kb
        ext = self.em.extents

        def body_at(outer_bound, iv, carried, depth):
            s_bound = dict(outer_bound)
            s_bound[axes[depth]] = iv
            if depth + 1 < len(axes):
                return kb.for_iter(0, ext[axes[depth + 1]], 1, carried, lambda iv2, c2: body_at(s_bound, iv2, c2, depth + 1))
            s = self.child(s_bound)
            if s.lane_axis in s_bound:
                s.lane_axis, s.lanes = None, 1
            vals = s.value(op.yielded)
            y = vals[lane] if len(vals) > 1 else vals[0]
            return [_combine(kb, op.kind_name, carried[0], y)]

        (res,) = kb.for_iter(0, ext[axes[0]], 1, [init], lambda iv, c: body_at({}, iv, c, 0), name=axes[0])
        return res

    # -- stores --------------------------------------------------------------------------------------------
    def store(self, op: StoreOp, mask: SSAValue | None = None) -> None:
        kb = self.kb
        out = self.em.owner.results[op.output_index]
        t = out.type
        assert isinstance(t, TensorType)
        ptr = self.em.out_ptrs[op.output_index]
        vals = self.value(op.value)
        m = kb.and_(self.mask, mask)
        elt = t.element_type
        lane_dep = self.lane_axis is not None and any(self.lane_dep(i) for i in op.indices)
        if not lane_dep:
            idx = [self.value(i)[:1] for i in op.indices]
            if self.lanes > 1 and self.lane_axis is not None:
                # the stored element does not move with the lanes: lane 0 writes it
                pass
            kb.store(_cast(kb, vals[0], elt), ptr, self._offset(t, idx, 0), m)
            return
        contiguous, aligned = self.em.access(t, op.indices, self.lane_axis, self.lanes)
        if contiguous and aligned and self.lanes * elt_bytes(elt) <= 16 and self.lanes in K.VECTOR_WIDTHS:
            vec = kb.pack([_cast(kb, v, elt) for v in vals], VectorType(elt, [self.lanes]))
            l0 = self.lane0()
            kb.store(vec, ptr, self._offset(t, [l0.value(i) for i in op.indices], 0), m)
            return
        if contiguous and aligned:
            per = 16 // elt_bytes(elt)
            if per in K.VECTOR_WIDTHS and self.lanes % per == 0:
                l0 = self.lane0()
                base = self._offset(t, [l0.value(i) for i in op.indices], 0)
                for c in range(self.lanes // per):
                    vec = kb.pack([_cast(kb, v, elt) for v in vals[c * per:(c + 1) * per]], VectorType(elt, [per]))
                    kb.store(vec, ptr, kb.add(base, c * per), m)
                return
        idx = [self.value(i) for i in op.indices]
        for j in range(self.lanes):
            kb.store(_cast(kb, vals[j], elt), ptr, self._offset(t, idx, j), m)


def _combine(kb: KB, kind: str, acc: SSAValue, y: SSAValue) -> SSAValue:
    y = kb.to_type(y, acc.type)
    if kind == "sum":
        return kb.addf(acc, y)
    return kb.maxf(acc, y)


def _cast(kb: KB, v: SSAValue, t: Attribute) -> SSAValue:
    if v.type == t:
        return v
    raise EmmyError(f"codegen: stored value of type {v.type} into a tensor of {t}")


def yielded(reduce: ReduceOp) -> SSAValue:
    return reduce.yielded


__all__ = ["BodyEmitter", "Scope", "row_major_strides"]
