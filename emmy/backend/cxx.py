"""Write kernel-stage IR (`kernel.func` bodies: kernel, arith and math ops) as CUDA C++.

Used by `convert-kernel-to-cuda`. One statement per op, one C++ variable per SSA value (named
after its name hint), so the text maps back to the IR line by line. `index` is `int`.

    emit_kernel(func: KernelFuncOp, c_name: str) -> str   # an `extern "C" __global__` definition
"""

from __future__ import annotations

import math
import re

from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    VectorType,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from emmy import dtypes
from emmy.diagnostics import EmmyError
from emmy.dialects import kernel as K

_IDENT = re.compile(r"[^A-Za-z0-9_]")


def c_scalar_type(t: Attribute) -> str:
    return dtypes.c_type(dtypes.element_dtype(t))


def c_type(t: Attribute) -> str:
    if isinstance(t, VectorType):
        return f"emmy::Vec<{c_scalar_type(t.element_type)}, {t.get_shape()[0]}>"
    if isinstance(t, K.PtrType):
        return c_scalar_type(t.element_type) + "*"
    return c_scalar_type(t)


def c_float(value: float, t: Attribute) -> str:
    if math.isnan(value):
        lit = "NAN"
    elif math.isinf(value):
        lit = "INFINITY" if value > 0 else "-INFINITY"
    elif isinstance(t, Float64Type):
        lit = repr(float(value))
    else:
        lit = f"{value:.9g}"
        if "e" not in lit and "." not in lit and "n" not in lit:
            lit += ".0"
        lit += "f"
    if isinstance(t, BFloat16Type):
        return f"__float2bfloat16_rn({lit})"
    if isinstance(t, Float16Type):
        return f"__float2half_rn({lit})"
    return lit


def _is_lowp(t: Attribute) -> bool:
    return isinstance(t, (BFloat16Type, Float16Type))


def _to_f32(expr: str, t: Attribute) -> str:
    if isinstance(t, BFloat16Type):
        return f"__bfloat162float({expr})"
    if isinstance(t, Float16Type):
        return f"__half2float({expr})"
    return expr


def _rounded_f32(op: K.PackOp) -> list[SSAValue] | None:
    """The f32 values of a bf16 vector whose every element is one of them rounded
    (arith.truncf), when there is an even number of them; None otherwise."""
    t = op.result.type
    if not isinstance(t, VectorType) or not isinstance(t.element_type, BFloat16Type) or len(op.elements) % 2:
        return None
    out = []
    for e in op.elements:
        owner = e.owner
        if not isinstance(owner, arith.TruncFOp) or not isinstance(owner.input.type, Float32Type):
            return None
        out.append(owner.input)
    return out


def _from_f32(expr: str, t: Attribute) -> str:
    if isinstance(t, BFloat16Type):
        return f"__float2bfloat16_rn({expr})"
    if isinstance(t, Float16Type):
        return f"__float2half_rn({expr})"
    return expr


_FBIN = {
    arith.AddfOp: "{a} + {b}",
    arith.SubfOp: "{a} - {b}",
    arith.MulfOp: "{a} * {b}",
    arith.DivfOp: "{a} / {b}",
    arith.MaximumfOp: "fmaxf({a}, {b})",
    arith.MinimumfOp: "fminf({a}, {b})",
    arith.MaxnumfOp: "fmaxf({a}, {b})",
    arith.MinnumfOp: "fminf({a}, {b})",
}

_IBIN = {
    arith.AddiOp: "{a} + {b}",
    arith.SubiOp: "{a} - {b}",
    arith.MuliOp: "{a} * {b}",
    arith.DivSIOp: "{a} / {b}",
    arith.RemSIOp: "{a} % {b}",
    arith.DivUIOp: "({t})((unsigned)({a}) / (unsigned)({b}))",
    arith.RemUIOp: "({t})((unsigned)({a}) % (unsigned)({b}))",
    arith.AndIOp: "{a} & {b}",
    arith.OrIOp: "{a} | {b}",
    arith.XOrIOp: "{a} ^ {b}",
    arith.ShLIOp: "{a} << {b}",
    arith.ShRSIOp: "{a} >> {b}",
    arith.ShRUIOp: "({t})((unsigned)({a}) >> {b})",
    arith.MaxSIOp: "({a} > {b} ? {a} : {b})",
    arith.MinSIOp: "({a} < {b} ? {a} : {b})",
    arith.MaxUIOp: "((unsigned)({a}) > (unsigned)({b}) ? {a} : {b})",
    arith.MinUIOp: "((unsigned)({a}) < (unsigned)({b}) ? {a} : {b})",
    arith.FloorDivSIOp: "({a} / {b} - (({a} % {b} != 0) && (({a} < 0) != ({b} < 0))))",
    arith.CeilDivSIOp: "({a} / {b} + (({a} % {b} != 0) && (({a} < 0) == ({b} < 0))))",
    arith.CeilDivUIOp: "({t})(((unsigned)({a}) + (unsigned)({b}) - 1u) / (unsigned)({b}))",
}

_CMPI = {
    "eq": ("==", False), "ne": ("!=", False), "slt": ("<", False), "sle": ("<=", False),
    "sgt": (">", False), "sge": (">=", False), "ult": ("<", True), "ule": ("<=", True),
    "ugt": (">", True), "uge": (">=", True),
}

_CMPF = {
    "oeq": "{a} == {b}", "ogt": "{a} > {b}", "oge": "{a} >= {b}", "olt": "{a} < {b}",
    "ole": "{a} <= {b}", "one": "({a} != {b} && {a} == {a} && {b} == {b})",
    "ord": "({a} == {a} && {b} == {b})", "ueq": "!({a} != {b})", "ugt": "!({a} <= {b})",
    "uge": "!({a} < {b})", "ult": "!({a} >= {b})", "ule": "!({a} > {b})", "une": "{a} != {b}",
    "uno": "({a} != {a} || {b} != {b})", "false": "false", "true": "true",
}

# math ops on f32 (f64 drops the trailing f)
_MATH1 = {
    mathd.ExpOp: "expf", mathd.Exp2Op: "exp2f", mathd.LogOp: "logf", mathd.Log2Op: "log2f",
    mathd.RsqrtOp: "rsqrtf", mathd.SqrtOp: "sqrtf", mathd.TanhOp: "tanhf", mathd.ErfOp: "erff",
    mathd.AbsFOp: "fabsf", mathd.SinOp: "sinf", mathd.CosOp: "cosf", mathd.FloorOp: "floorf",
    mathd.CeilOp: "ceilf", mathd.Log1pOp: "log1pf", mathd.ExpM1Op: "expm1f", mathd.TanOp: "tanf",
    mathd.AtanOp: "atanf", mathd.RoundOp: "roundf", mathd.TruncOp: "truncf",
}
_MATH2 = {mathd.PowFOp: "powf", mathd.Atan2Op: "atan2f", mathd.CopySignOp: "copysignf"}

# With `fastmath<afn>` (approximate functions allowed; convert-tensor-to-loop sets it where the
# result is rounded to bf16/f16), f32 math uses CUDA's fast intrinsics: `__expf` (ex2.approx,
# a few ulps) and `__fdividef` (2 ulps; 0 when the divisor's magnitude exceeds 2^126).
_APPROX1 = {mathd.ExpOp: "__expf"}
_APPROX_DIV = "__fdividef({a}, {b})"


def _approx(op: Operation) -> bool:
    flags = getattr(op, "fastmath", None)  # arith's float ops and math's ops alike
    return isinstance(flags, arith.FastMathFlagsAttr) and arith.FastMathFlag.APPROX_FUNC in flags.data


# device-library calls that only read through some pointer arguments (by position)
_READ_ONLY_ARGS = {"emmy::cp_async16": (1,)}


class _Names:
    def __init__(self) -> None:
        self.names: dict[SSAValue, str] = {}
        self.count = 0

    def new(self, v: SSAValue, hint: str | None = None) -> str:
        base = _IDENT.sub("_", v.name_hint or hint or "v").strip("_") or "v"
        if base[0].isdigit():
            base = "v" + base
        name = f"{base}_{self.count}"
        self.count += 1
        self.names[v] = name
        return name

    def __getitem__(self, v: SSAValue) -> str:
        try:
            return self.names[v]
        except KeyError:
            raise EmmyError(f"convert-kernel-to-cuda: value used before it is defined ({v})") from None


class KernelEmitter:
    """Turns one `kernel.func` into CUDA C++ text."""

    def __init__(self, func: K.KernelFuncOp, c_name: str):
        self.func = func
        self.c_name = c_name
        self.names = _Names()
        self.lines: list[str] = []
        self.indent = 1
        self.stored_args = self._stored_args()

    # -- helpers --------------------------------------------------------------------------------
    def _stored_args(self) -> set[SSAValue]:
        """Kernel arguments written through (directly, via ptr_add, or passed to a call)."""
        written: set[SSAValue] = set()
        for op in self.func.walk():
            if isinstance(op, K.StoreOp):
                written.add(self._root(op.ptr))
            elif isinstance(op, (K.CallOp, K.InvokeOp, K.LambdaOp)):
                read_only = _READ_ONLY_ARGS.get(op.callee.data, ()) if isinstance(op, K.CallOp) else ()
                for i, a in enumerate(op.operands):
                    if isinstance(a.type, K.PtrType) and i not in read_only:
                        written.add(self._root(a))
        return written

    @staticmethod
    def _root(v: SSAValue) -> SSAValue:
        while isinstance(v.owner, K.PtrAddOp):
            v = v.owner.ptr
        return v

    def w(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def define(self, v: SSAValue, expr: str, hint: str | None = None) -> None:
        name = self.names.new(v, hint)
        self.w(f"const {c_type(v.type)} {name} = {expr};")

    # -- entry ------------------------------------------------------------------------------------
    def emit(self) -> str:
        f = self.func
        params = []
        for a in f.args:
            name = self.names.new(a, "arg")
            t = a.type
            if isinstance(t, K.PtrType):
                const = "" if a in self.stored_args else "const "
                params.append(f"{const}{c_scalar_type(t.element_type)}* __restrict__ {name}")
            elif isinstance(t, K.TensorMapType):  # passed by value, read in place (prefetch, copies)
                params.append(f"const __grid_constant__ CUtensorMap {name}")
            else:
                params.append(f"const {c_type(t)} {name}")
        threads = f.threads
        bounds = f"__launch_bounds__({threads}" + (
            f", {f.min_blocks.value.data})" if f.min_blocks is not None else ")"
        )
        shared = [op for op in f.walk() if isinstance(op, K.SharedOp)]
        if f.cluster_dims is not None:
            bounds += " __cluster_dims__({}, {}, {})".format(*f.cluster_dims)
        head = [f'extern "C" __global__ void {bounds} {self.c_name}({", ".join(params)}) {{']
        if shared:
            max_align = max(op.align.value.data for op in shared)
            head.append("  extern __shared__ __align__(16) unsigned char emmy_smem_raw[];")
            if max_align > 16:
                head.append(f"  unsigned char* const emmy_smem = emmy::align_smem<{max_align}>(emmy_smem_raw);")
            else:
                head.append("  unsigned char* const emmy_smem = emmy_smem_raw;")
        self.block(f.body.block)
        return "\n".join(head + self.lines + ["}"]) + "\n"

    def block(self, block: Block) -> None:
        for op in block.ops:
            self.op(op)

    # -- ops ----------------------------------------------------------------------------------------
    def op(self, op: Operation) -> None:  # noqa: C901 (one dispatch table)
        n = self.names
        if isinstance(op, (K.ReturnOp,)):
            return
        if isinstance(op, K.YieldOp):
            raise AssertionError("yield handled by its parent")
        if isinstance(op, (K.ThreadIdOp, K.BlockIdOp)):
            builtin = "threadIdx" if isinstance(op, K.ThreadIdOp) else "blockIdx"
            self.define(op.result, f"(int){builtin}.{op.dim.data}", "tid" if builtin == "threadIdx" else "bid")
        elif isinstance(op, K.SharedOp):
            t = c_scalar_type(op.result.type.element_type)
            name = n.new(op.result, "smem")
            self.w(f"{t}* const {name} = reinterpret_cast<{t}*>(emmy_smem + {op.offset.value.data});")
        elif isinstance(op, K.LocalOp):
            t = c_scalar_type(op.result.type.element_type)
            name = n.new(op.result, "regs")
            self.w(f"{t} {name}[{op.size.value.data}];")
        elif isinstance(op, K.BarrierOp):
            self.w("__syncthreads();")
        elif isinstance(op, K.PtrAddOp):
            ptr = n[op.ptr]
            t = op.ptr.type
            const = "const " if (t.space.data == "global" and self._root(op.ptr) not in self.stored_args) else ""
            name = n.new(op.result, "p")
            self.w(f"{const}{c_scalar_type(t.element_type)}* const {name} = {ptr} + {n[op.offset]};")
        elif isinstance(op, K.LoadOp):
            self._load(op)
        elif isinstance(op, K.StoreOp):
            self._store(op)
        elif isinstance(op, K.ExtractOp):
            self.define(op.result, f"{n[op.vector]}.v[{op.lane.value.data}]")
        elif isinstance(op, K.PackOp):
            rounded = _rounded_f32(op)
            if rounded is not None:  # f32 values rounded to bf16: packed conversions, two at a time
                self.define(op.result, f"emmy::bf16_pairs({', '.join(n[x] for x in rounded)})")
            else:
                elts = ", ".join(n[e] for e in op.elements)
                self.define(op.result, f"{c_type(op.result.type)}{{{{{elts}}}}}")
        elif isinstance(op, K.CallOp):
            self._call(op, op.callee.data)
        elif isinstance(op, K.InvokeOp):
            self._call(op, n[op.fn])
        elif isinstance(op, K.LambdaOp):
            self._lambda(op)
        elif isinstance(op, K.ForOp):
            self._for(op)
        elif isinstance(op, K.IfOp):
            self._if(op)
        elif op.dialect_name() == "arith":
            self._arith(op)
        elif op.dialect_name() == "math":
            self._math(op)
        else:
            raise EmmyError(f"convert-kernel-to-cuda: cannot write '{op.name}' as CUDA C++")

    def _load(self, op: K.LoadOp) -> None:
        n = self.names
        ptr, idx = n[op.ptr], n[op.index]
        t = op.result.type
        if isinstance(t, VectorType):
            ct = c_type(t)
            expr = f"*reinterpret_cast<const {ct}*>({ptr} + {idx})"
            zero = f"emmy::zero<{ct}>()"
        else:
            expr = f"{ptr}[{idx}]"
            zero = c_float(0.0, t) if not isinstance(t, (IndexType, IntegerType)) else f"({c_type(t)})0"
        if op.mask is not None and self._whole_buffer(op.ptr):  # no branch: emmy::load_or
            expr = f"emmy::load_or<{c_type(t)}>({ptr}, {idx}, {n[op.mask]}, {zero})"
        elif op.mask is not None:
            expr = f"({n[op.mask]} ? {expr} : {zero})"
        self.define(op.result, expr, "ld")

    def _whole_buffer(self, ptr: SSAValue) -> bool:
        """Whether `ptr` is the start of a whole buffer (a kernel argument or a shared-memory
        allocation), so that its element 0 is always there to read in place of a masked one."""
        return ptr in self.func.args or isinstance(ptr.owner, K.SharedOp)

    def _store(self, op: K.StoreOp) -> None:
        n = self.names
        ptr, idx, val = n[op.ptr], n[op.index], n[op.value]
        t = op.value.type
        if isinstance(t, VectorType):
            stmt = f"*reinterpret_cast<{c_type(t)}*>({ptr} + {idx}) = {val};"
        else:
            stmt = f"{ptr}[{idx}] = {val};"
        if op.mask is not None and op.ptr in self.func.args:  # global memory: emmy::store_if
            stmt = f"emmy::store_if<{c_type(t)}>({ptr}, {idx}, {n[op.mask]}, {val});"
        elif op.mask is not None:
            stmt = f"if ({n[op.mask]}) {stmt}"
        self.w(stmt)

    def _pragma(self, unroll: IntegerAttr | None) -> None:
        if unroll is None:
            return
        u = unroll.value.data
        self.w("#pragma unroll" if u == 0 else f"#pragma unroll {u}")

    def _for(self, op: K.ForOp) -> None:
        n = self.names
        iv, *carried = op.body.block.args
        cvars = []
        for arg, init in zip(carried, op.iter_args):
            name = n.new(arg, "acc")
            cvars.append(name)
            self.w(f"{c_type(arg.type)} {name} = {n[init]};")
        lb, ub, step = n[op.lb], n[op.ub], n[op.step]
        ivn = n.new(iv, "i")
        self._pragma(op.unroll)
        self.w(f"for (int {ivn} = {lb}; {ivn} < {ub}; {ivn} += {step}) {{")
        self.indent += 1
        body_ops = list(op.body.block.ops)
        for inner in body_ops[:-1] if isinstance(body_ops[-1], K.YieldOp) else body_ops:
            self.op(inner)
        last = body_ops[-1] if body_ops else None
        if isinstance(last, K.YieldOp) and cvars:
            vals = [n[v] for v in last.values]
            if len(cvars) == 1:
                self.w(f"{cvars[0]} = {vals[0]};")
            else:
                tmps = []
                for i, (v, arg) in enumerate(zip(vals, carried)):
                    tmps.append(f"emmy_next_{i}")
                self.w("{ " + " ".join(f"const {c_type(a.type)} {tn} = {v};" for tn, v, a in zip(tmps, vals, carried))
                       + " " + " ".join(f"{c} = {tn};" for c, tn in zip(cvars, tmps)) + " }")
        self.indent -= 1
        self.w("}")
        for res, name in zip(op.res, cvars):
            n.names[res] = name

    def _if(self, op: K.IfOp) -> None:
        n = self.names
        rvars = []
        for r in op.output:
            name = n.new(r, "sel")
            rvars.append(name)
            self.w(f"{c_type(r.type)} {name};")
        self.w(f"if ({n[op.cond]}) {{")
        self._branch(op.then_region.block, rvars)
        if op.else_region.blocks and (list(op.else_region.block.ops)[:-1] or rvars):
            self.w("} else {")
            self._branch(op.else_region.block, rvars)
        self.w("}")

    def _branch(self, block: Block, rvars: list[str]) -> None:
        self.indent += 1
        ops = list(block.ops)
        for inner in ops:
            if isinstance(inner, K.YieldOp):
                for name, v in zip(rvars, inner.values):
                    self.w(f"{name} = {self.names[v]};")
            else:
                self.op(inner)
        self.indent -= 1

    def _call(self, op, callee: str) -> None:
        """A call of a device function (kernel.call) or of a lambda (kernel.invoke)."""
        call = f"{callee}({', '.join(self.names[a] for a in op.args)})"
        if op.res:
            self.define(op.res[0], call, "r")
        else:
            self.w(call + ";")

    def _lambda(self, op: K.LambdaOp) -> None:
        n = self.names
        name = n.new(op.result, "fn")
        params = []
        for a in op.body.block.args:
            pname = n.new(a, "a")
            if isinstance(a.type, K.FnType):
                params.append(f"auto& {pname}")
            else:
                params.append(f"const {c_type(a.type)} {pname}")
        ret = f" -> {c_type(op.returns[0])}" if op.returns else ""
        self.w(f"auto {name} = [&]({', '.join(params)}){ret} {{")
        self.indent += 1
        for inner in op.body.block.ops:
            if isinstance(inner, K.YieldOp):
                if inner.values:
                    self.w(f"return {n[inner.values[0]]};")
            else:
                self.op(inner)
        self.indent -= 1
        self.w("};")

    def _arith(self, op: Operation) -> None:  # noqa: C901
        n = self.names
        if isinstance(op, arith.ConstantOp):
            v = op.value
            t = op.result.type
            if isinstance(v, FloatAttr):
                self.define(op.result, c_float(v.value.data, t), "c")
            elif isinstance(v, IntegerAttr):
                val = v.value.data
                if isinstance(t, IntegerType) and t.width.data == 1:
                    expr = "true" if val else "false"
                elif isinstance(t, IntegerType) and t.width.data == 64:
                    expr = f"{val}LL"
                else:
                    expr = str(val)
                self.define(op.result, expr, "c")
            else:
                raise EmmyError(f"convert-kernel-to-cuda: unsupported constant {v}")
            return
        t = op.results[0].type if op.results else None
        ty = type(op)
        if ty in _FBIN:
            a, b = op.operands
            form = _FBIN[ty]
            if ty is arith.DivfOp and not isinstance(t, Float64Type) and _approx(op):
                form = _APPROX_DIV
            if _is_lowp(t):
                expr = form.format(a=_to_f32(n[a], t), b=_to_f32(n[b], t))
                self.define(op.results[0], _from_f32(expr, t))
            elif isinstance(t, Float64Type) and ty in (arith.MaximumfOp, arith.MinimumfOp, arith.MaxnumfOp, arith.MinnumfOp):
                self.define(op.results[0], _FBIN[ty].replace("f(", "(").format(a=n[a], b=n[b]))
            else:
                self.define(op.results[0], form.format(a=n[a], b=n[b]))
        elif ty in _IBIN:
            a, b = op.operands
            self.define(op.results[0], _IBIN[ty].format(a=n[a], b=n[b], t=c_type(t)))
        elif isinstance(op, arith.NegfOp):
            x = op.operands[0]
            self.define(op.results[0], _from_f32(f"-{_to_f32(n[x], t)}", t))
        elif isinstance(op, arith.CmpiOp):
            pred = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
            sym, unsigned = _CMPI[pred]
            a, b = n[op.lhs], n[op.rhs]
            if unsigned:
                a, b = f"(unsigned)({a})", f"(unsigned)({b})"
            self.define(op.results[0], f"{a} {sym} {b}", "p")
        elif isinstance(op, arith.CmpfOp):
            pred = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
            lt = op.lhs.type
            a, b = _to_f32(n[op.lhs], lt), _to_f32(n[op.rhs], lt)
            self.define(op.results[0], _CMPF[pred].format(a=a, b=b), "p")
        elif isinstance(op, arith.SelectOp):
            self.define(op.results[0], f"{n[op.cond]} ? {n[op.lhs]} : {n[op.rhs]}")
        elif isinstance(op, arith.ExtFOp):
            x = op.input
            if isinstance(t, Float64Type):
                self.define(op.results[0], f"(double){_to_f32(n[x], x.type)}")
            else:
                self.define(op.results[0], _to_f32(n[x], x.type))
        elif isinstance(op, arith.TruncFOp):
            x = op.input
            src = n[x] if not isinstance(x.type, Float64Type) else f"(float){n[x]}"
            if isinstance(x.type, Float64Type) and isinstance(t, Float32Type):
                self.define(op.results[0], src)
            else:
                self.define(op.results[0], _from_f32(src, t))
        elif isinstance(op, (arith.IndexCastOp, arith.ExtSIOp, arith.TruncIOp)):
            self.define(op.results[0], f"({c_type(t)}){n[op.operands[0]]}")
        elif isinstance(op, arith.ExtUIOp):
            self.define(op.results[0], f"({c_type(t)})(unsigned){n[op.operands[0]]}")
        elif isinstance(op, (arith.SIToFPOp, arith.UIToFPOp)):
            self.define(op.results[0], _from_f32(f"(float){n[op.operands[0]]}", t) if _is_lowp(t) else f"({c_type(t)}){n[op.operands[0]]}")
        elif isinstance(op, (arith.FPToSIOp, arith.FPToUIOp)):
            x = op.operands[0]
            self.define(op.results[0], f"({c_type(t)}){_to_f32(n[x], x.type)}")
        else:
            raise EmmyError(f"convert-kernel-to-cuda: cannot write '{op.name}' as CUDA C++")

    def _math(self, op: Operation) -> None:
        n = self.names
        t = op.results[0].type
        ty = type(op)
        if ty in _MATH1 or ty in _MATH2:
            fn = _MATH1.get(ty) or _MATH2[ty]
            if isinstance(t, Float64Type):
                fn = fn[:-1]
            elif ty in _APPROX1 and _approx(op):
                fn = _APPROX1[ty]
            args = ", ".join(_to_f32(n[a], a.type) for a in op.operands)
            self.define(op.results[0], _from_f32(f"{fn}({args})", t))
        elif isinstance(op, mathd.FmaOp):
            a, b, c = (_to_f32(n[x], x.type) for x in op.operands)
            fn = "fma" if isinstance(t, Float64Type) else "fmaf"
            self.define(op.results[0], _from_f32(f"{fn}({a}, {b}, {c})", t))
        else:
            raise EmmyError(f"convert-kernel-to-cuda: cannot write '{op.name}' as CUDA C++")


def emit_kernel(func: K.KernelFuncOp, c_name: str | None = None) -> str:
    """The `extern "C" __global__` definition of one kernel.func."""
    return KernelEmitter(func, c_name or func.sym_name.data).emit()
