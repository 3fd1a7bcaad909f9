"""The `kernel` stage's device control flow and calls: `kernel.for`, `kernel.if`, their
`kernel.yield`, calls of the device library (`kernel.call`) and device lambdas (`kernel.lambda`,
`kernel.invoke`). See kernel.py for the overview and the CUDA C++ each op becomes.

`kernel.for`, `kernel.if` and `kernel.lambda` print their entry block arguments in the header and
hide an implicit terminator, as `scf.for` does, so they keep a hand-written syntax; the others
have a declarative `assembly_format`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, IndexType, IntegerAttr, StringAttr, VectorType, i1, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import IsTerminator, RecursiveMemoryEffect, SingleBlockImplicitTerminator, ensure_terminator
from xdsl.utils.exceptions import VerifyException

from emmy.dialects.kernel_device import enclosing_func
from emmy.dialects.kernel_types import FnType, PtrType, is_scalar_type

# ---------------------------------------------------------------------------------------------
# Control flow
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of `kernel.for` (the next loop-carried values) and `kernel.if` (its results).

    ```mlir
    kernel.yield %acc : f32
    ```
    """

    name = "kernel.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())
    assembly_format = "attr-dict ($values^ `:` type($values))?"

    def __init__(self, *values: SSAValue | Operation):
        super().__init__(operands=[list(values)])

    def verify_(self) -> None:
        parent = self.parent_op()
        if not isinstance(parent, (ForOp, IfOp, LambdaOp)):
            raise VerifyException("kernel.yield: must end a kernel.for, kernel.if or kernel.lambda body")


@irdl_op_definition
class ForOp(IRDLOperation):
    """A counted loop over `index` values `lb, lb + step, ... < ub` (step > 0 at run time).

    Loop-carried values start at the `iter_args` operands and take the `kernel.yield` operands
    of each iteration; the results are their final values. `unroll` asks the CUDA compiler to
    unroll: `unroll full` (0) or `unroll N`; absent, it decides.

    ```mlir
    %sum = kernel.for %i = %lb to %ub step %c1 unroll 4 iter_args(%acc = %zero) -> (f32) {
      %v = kernel.load %x[%i] : !kernel.ptr<f32> -> f32
      %a = arith.addf %acc, %v : f32
      kernel.yield %a : f32
    }
    ```
    """

    name = "kernel.for"

    lb = operand_def(IndexType)
    ub = operand_def(IndexType)
    step = operand_def(IndexType)
    iter_args = var_operand_def()
    unroll = opt_prop_def(IntegerAttr)
    res = var_result_def()
    body = region_def("single_block")

    traits = traits_def(SingleBlockImplicitTerminator(YieldOp), RecursiveMemoryEffect())

    def __init__(
        self,
        lb: SSAValue | Operation,
        ub: SSAValue | Operation,
        step: SSAValue | Operation,
        iter_args: Sequence[SSAValue | Operation] = (),
        body: Region | Block | None = None,
        unroll: int | None = None,
    ):
        iter_types = [SSAValue.get(a).type for a in iter_args]
        if body is None:
            body = Region(Block(arg_types=[IndexType(), *iter_types]))
        elif isinstance(body, Block):
            body = Region(body)
        props = {} if unroll is None else {"unroll": IntegerAttr(unroll, i64)}
        super().__init__(
            operands=[lb, ub, step, list(iter_args)],
            result_types=[iter_types],
            regions=[body],
            properties=props,
        )

    @property
    def induction_var(self) -> SSAValue:
        return self.body.block.args[0]

    def verify_(self) -> None:
        args = self.body.block.args
        if not args or not isinstance(args[0].type, IndexType):
            raise VerifyException("kernel.for: the body's first argument must be the index induction variable")
        carried = args[1:]
        if len(carried) != len(self.iter_args) or any(
            b.type != v.type for b, v in zip(carried, self.iter_args)
        ):
            raise VerifyException("kernel.for: body arguments must match the iter_args types")
        if len(self.res) != len(self.iter_args) or any(
            r.type != v.type for r, v in zip(self.res, self.iter_args)
        ):
            raise VerifyException("kernel.for: results must match the iter_args types")
        last = self.body.block.last_op
        if isinstance(last, YieldOp):
            if [v.type for v in last.values] != [v.type for v in self.iter_args]:
                raise VerifyException("kernel.for: kernel.yield must give one value per iter_arg, of its type")
        if self.unroll is not None and self.unroll.value.data < 0:
            raise VerifyException("kernel.for: unroll must be 'full' or a positive count")

    def print(self, printer: Printer) -> None:
        indvar, *carried = self.body.block.args
        printer.print_string(" ")
        printer.print_ssa_value(indvar)
        printer.print_string(" = ")
        printer.print_ssa_value(self.lb)
        printer.print_string(" to ")
        printer.print_ssa_value(self.ub)
        printer.print_string(" step ")
        printer.print_ssa_value(self.step)
        if self.unroll is not None:
            n = self.unroll.value.data
            printer.print_string(" unroll " + ("full" if n == 0 else str(n)))
        if carried:
            printer.print_string(" iter_args(")
            printer.print_list(
                zip(carried, self.iter_args),
                lambda p: (
                    printer.print_ssa_value(p[0]),
                    printer.print_string(" = "),
                    printer.print_ssa_value(p[1]),
                ),
            )
            printer.print_string(") -> (")
            printer.print_list([a.type for a in carried], printer.print_attribute)
            printer.print_string(")")
        printer.print_string(" ")
        printer.print_region(
            self.body,
            print_entry_block_args=False,
            print_empty_block=False,
            print_block_terminators=bool(carried),
        )
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> ForOp:
        indvar = parser.parse_argument(expect_type=False)
        parser.parse_punctuation("=")
        lb = parser.parse_operand(IndexType())
        parser.parse_keyword("to")
        ub = parser.parse_operand(IndexType())
        parser.parse_keyword("step")
        step = parser.parse_operand(IndexType())
        unroll = None
        if parser.parse_optional_keyword("unroll"):
            unroll = 0 if parser.parse_optional_keyword("full") else parser.parse_integer()
        carried_args: list[Parser.UnresolvedArgument] = []
        inits: list[SSAValue] = []
        if parser.parse_optional_keyword("iter_args"):

            def one():
                a = parser.parse_argument(expect_type=False)
                parser.parse_punctuation("=")
                v = parser.parse_unresolved_operand()
                return a, v

            pairs = parser.parse_comma_separated_list(parser.Delimiter.PAREN, one)
            parser.parse_punctuation("->")
            types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
            carried_args = [a for a, _ in pairs]
            if len(types) != len(pairs):
                parser.raise_error("kernel.for: one type per iter_arg expected")
            inits = [parser.resolve_operand(v, t) for (_, v), t in zip(pairs, types)]
            resolved = [a.resolve(t) for a, t in zip(carried_args, types)]
        else:
            resolved = []
        body = parser.parse_region([indvar.resolve(IndexType()), *resolved])
        attrs = parser.parse_optional_attr_dict()
        op = cls(lb, ub, step, inits, body, unroll)
        op.attributes |= attrs
        if not inits:
            for trait in op.get_traits_of_type(SingleBlockImplicitTerminator):
                ensure_terminator(op, trait)
        return op


@irdl_op_definition
class IfOp(IRDLOperation):
    """A branch on an `i1`. With results, both regions end in `kernel.yield` of those types.

    ```mlir
    kernel.if %ok {
      kernel.store %v, %y[%i] : bf16, !kernel.ptr<bf16>
    }
    %r = kernel.if %c -> (f32) {
      kernel.yield %a : f32
    } else {
      kernel.yield %b : f32
    }
    ```
    """

    name = "kernel.if"

    cond = operand_def(i1)
    output = var_result_def()
    then_region = region_def("single_block")
    else_region = region_def()

    traits = traits_def(SingleBlockImplicitTerminator(YieldOp), RecursiveMemoryEffect())

    def __init__(
        self,
        cond: SSAValue | Operation,
        result_types: Sequence[Attribute] = (),
        then_region: Region | None = None,
        else_region: Region | None = None,
    ):
        super().__init__(
            operands=[cond],
            result_types=[list(result_types)],
            regions=[then_region or Region(Block()), else_region or Region()],
        )

    def verify_(self) -> None:
        types = [r.type for r in self.output]
        if types and not self.else_region.blocks:
            raise VerifyException("kernel.if: an if with results needs an else region")
        for region in (self.then_region, self.else_region):
            if not region.blocks:
                continue
            last = region.block.last_op
            if isinstance(last, YieldOp) and [v.type for v in last.values] != types:
                raise VerifyException("kernel.if: kernel.yield must give one value per result, of its type")

    @staticmethod
    def _parse_body(parser: Parser) -> Region:
        region = parser.parse_region()
        if not region.blocks:
            region.add_block(Block())
        last = region.block.last_op
        if last is None or not last.has_trait(IsTerminator):
            region.block.add_op(YieldOp())
        return region

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.cond)
        has_results = bool(self.output)
        if has_results:
            printer.print_string(" -> (")
            printer.print_list([r.type for r in self.output], printer.print_attribute)
            printer.print_string(")")
        printer.print_string(" ")
        printer.print_region(self.then_region, print_entry_block_args=False, print_block_terminators=has_results)
        if self.else_region.blocks:
            printer.print_string(" else ")
            printer.print_region(
                self.else_region, print_entry_block_args=False, print_block_terminators=has_results
            )
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> IfOp:
        cond = parser.parse_operand(i1)
        types: list[Attribute] = []
        if parser.parse_optional_punctuation("->"):
            types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        then_region = cls._parse_body(parser)
        else_region = cls._parse_body(parser) if parser.parse_optional_keyword("else") else Region()
        attrs = parser.parse_optional_attr_dict()
        op = cls(cond, types, then_region, else_region)
        op.attributes |= attrs
        return op


# ---------------------------------------------------------------------------------------------
# Calls: the device library and lambdas
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class CallOp(IRDLOperation):
    """Call a building block of Emmy's device library (`emmy/backend/runtime/*.cuh`).

    `callee` is the C++ name with its template arguments (`emmy::warp_sum`,
    `emmy::mma::warp_tile<64, 32, 64, 72>`); it must start with `emmy::`. Pointers pass as
    pointers, scalars by value; zero or one result (a scalar, a pointer, or a vector of scalars
    as `emmy::Vec`).

    ```mlir
    %s = kernel.call "emmy::warp_sum"(%x) : (f32) -> f32
    %v = kernel.call "emmy::load_cg<4>"(%p, %ok) : (!kernel.ptr<f32>, i1) -> vector<4xf32>
    kernel.call "emmy::cp_async_wait<1>"() : () -> ()
    ```
    """

    name = "kernel.call"

    callee = prop_def(StringAttr)
    args = var_operand_def()
    res = var_result_def()
    assembly_format = "$callee `(` $args `)` attr-dict `:` functional-type($args, $res)"

    def __init__(
        self,
        callee: str,
        args: Sequence[SSAValue | Operation] = (),
        result_types: Sequence[Attribute] = (),
    ):
        super().__init__(
            operands=[list(args)],
            result_types=[list(result_types)],
            properties={"callee": StringAttr(callee)},
        )

    def verify_(self) -> None:
        callee = self.callee.data
        if not callee.startswith("emmy::") or any(c in callee for c in "();{}\n\"'"):
            raise VerifyException(
                f"kernel.call: callee must be a device-library name starting with 'emmy::', got '{callee}'"
            )
        if len(self.res) > 1:
            raise VerifyException("kernel.call: at most one result")
        for r in self.res:
            t = r.type
            vector = isinstance(t, VectorType) and t.get_num_dims() == 1 and is_scalar_type(t.element_type)
            if not (is_scalar_type(t) or isinstance(t, PtrType) or vector):
                raise VerifyException(f"kernel.call: result must be a scalar, a vector of scalars or a pointer, got {t}")
        if enclosing_func(self) is None:
            raise VerifyException("kernel.call: must be inside a kernel.func")


@irdl_op_definition
class LambdaOp(IRDLOperation):
    """A device callable defined in the kernel body (`auto f = [&](int i, ...) -> float {...};`).

    Its body sees every value defined before it (captured by reference) and its own arguments:
    scalars (`index`, integers, floats) and `!kernel.fn` callbacks (`auto&` parameters, called with
    `kernel.invoke`). It returns the operands of its `kernel.yield` (none or one value). Device
    library templates take lambdas through `kernel.call` (e.g. a row producer that computes one
    staged element from the loop body's index arithmetic and scalar code).

    ```mlir
    %row = kernel.lambda (%i: index, %st: !kernel.fn) {
      %v = kernel.load %x[%i] : !kernel.ptr<bf16> -> bf16
      kernel.invoke %st(%i, %v) : (index, bf16) -> ()
    }
    %sq = kernel.lambda (%a: f32) -> f32 {
      %b = arith.mulf %a, %a : f32
      kernel.yield %b : f32
    }
    ```
    """

    name = "kernel.lambda"

    result = result_def(FnType)
    ret_types = prop_def(ArrayAttr)
    body = region_def("single_block")

    traits = traits_def(SingleBlockImplicitTerminator(YieldOp))

    def __init__(
        self,
        arg_types: Sequence[Attribute],
        result_types: Sequence[Attribute] = (),
        body: Region | None = None,
    ):
        if body is None:
            body = Region(Block(arg_types=arg_types))
        super().__init__(
            result_types=[FnType()],
            properties={"ret_types": ArrayAttr(list(result_types))},
            regions=[body],
        )

    @property
    def returns(self) -> tuple[Attribute, ...]:
        return tuple(self.ret_types.data)

    def verify_(self) -> None:
        if len(self.returns) > 1:
            raise VerifyException("kernel.lambda: at most one result")
        for a in self.body.block.args:
            if not (is_scalar_type(a.type) or isinstance(a.type, (FnType, PtrType))):
                raise VerifyException(f"kernel.lambda: argument type {a.type} is not a scalar, pointer or !kernel.fn")
        last = self.body.block.last_op
        if isinstance(last, YieldOp) and tuple(v.type for v in last.values) != self.returns:
            raise VerifyException("kernel.lambda: kernel.yield must give one value per result, of its type")
        if enclosing_func(self) is None:
            raise VerifyException("kernel.lambda: must be inside a kernel.func")

    def print(self, printer: Printer) -> None:
        printer.print_string(" (")
        printer.print_list(self.body.block.args, printer.print_block_argument)
        printer.print_string(")")
        if self.returns:
            printer.print_string(" -> ")
            printer.print_attribute(self.returns[0])
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(
            self.body, print_entry_block_args=False, print_block_terminators=bool(self.returns)
        )

    @classmethod
    def parse(cls, parser: Parser) -> LambdaOp:
        args = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, lambda: parser.parse_argument(expect_type=True)
        )
        returns: list[Attribute] = []
        if parser.parse_optional_punctuation("->"):
            returns = [parser.parse_type()]
        attrs = parser.parse_optional_attr_dict_with_keyword()
        body = parser.parse_region(args)
        op = cls([], returns, body)
        if attrs is not None:
            op.attributes |= attrs.data
        if not returns:
            for trait in op.get_traits_of_type(SingleBlockImplicitTerminator):
                ensure_terminator(op, trait)
        return op


@irdl_op_definition
class InvokeOp(IRDLOperation):
    """Call a `!kernel.fn` value (a lambda or a callback argument of one).

    ```mlir
    kernel.invoke %st(%i, %v) : (index, bf16) -> ()
    %y = kernel.invoke %sq(%x) : (f32) -> f32
    ```
    """

    name = "kernel.invoke"

    fn = operand_def(FnType)
    args = var_operand_def()
    res = var_result_def()
    assembly_format = "$fn `(` $args `)` attr-dict `:` functional-type($args, $res)"

    def __init__(
        self,
        fn: SSAValue | Operation,
        args: Sequence[SSAValue | Operation] = (),
        result_types: Sequence[Attribute] = (),
    ):
        super().__init__(operands=[fn, list(args)], result_types=[list(result_types)])

    def verify_(self) -> None:
        if len(self.res) > 1:
            raise VerifyException("kernel.invoke: at most one result")
        owner = self.fn.owner
        if isinstance(owner, LambdaOp):
            if len(owner.body.block.args) != len(self.args) or any(
                a.type != v.type for a, v in zip(owner.body.block.args, self.args)
            ):
                raise VerifyException("kernel.invoke: arguments do not match the lambda's parameters")
            if tuple(r.type for r in self.res) != owner.returns:
                raise VerifyException("kernel.invoke: results do not match the lambda's")
