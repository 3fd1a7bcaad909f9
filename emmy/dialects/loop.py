"""The `loop` stage: one fused loop = one future kernel.

A `loop.fused` op says "these operations run together, over these named axes". Its body is
scalar code: `loop.axis` gives the current index along an axis, `loop.load` reads one element
of an input tensor, `arith`/`math` ops compute, `loop.reduce` reduces a scalar over some axes,
and `loop.store` writes one element of a result.

    %out = loop.fused @rms_norm_qkv_proj axes [m = 512, n = 4096, k = 1024]
        ins(%x, %w : tensor<512x1024xbf16>, tensor<4096x1024xbf16>) -> tensor<512x4096xbf16> {
    ^bb0(%xa: tensor<512x1024xbf16>, %wa: tensor<4096x1024xbf16>):
      %m = loop.axis "m" : index
      %n = loop.axis "n" : index
      %acc = loop.reduce sum ["k"] : f32 {
        %k = loop.axis "k" : index
        %a = loop.load %xa[%m, %k] : tensor<512x1024xbf16> -> bf16
        %b = loop.load %wa[%n, %k] : tensor<4096x1024xbf16> -> bf16
        %af = arith.extf %a : bf16 to f32
        %bf = arith.extf %b : bf16 to f32
        %p = arith.mulf %af, %bf : f32
        loop.yield %p : f32
      }
      %o = arith.truncf %acc : f32 to bf16
      loop.store %o, 0 [%m, %n] : bf16
      loop.yield
    }

Meaning: a scalar value's **domain** is the set of axes it depends on (through `loop.axis`,
minus the axes a `loop.reduce` reduced). Every op is evaluated over its domain; a `loop.reduce`
evaluates its region over the enclosing domain plus its own axes, then reduces (`sum` starts at
0, `max` at -inf). The **parallel axes** of a loop are those a store depends on; the others are
reduction axes. `emmy/analysis/body.py` implements this meaning.

Axes owners: the ops `loop.axis`, `loop.load`, `loop.reduce` and `loop.store` look for the
nearest enclosing op that has an `axes` property holding an `AxesAttr` (`loop.fused`, and later
stages that keep the loop body, such as `tile.kernel`); its single block's arguments are the
tensors a body may load from, and its results are what stores write.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    IndexType,
    IntAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    BlockArgument,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SSAValue,
)
from xdsl.irdl import (
    IRDLOperation,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.pattern_rewriter import RewritePattern
from xdsl.printer import Printer
from xdsl.traits import (
    HasCanonicalizationPatternsTrait,
    IsolatedFromAbove,
    IsTerminator,
    MemoryWriteEffect,
    Pure,
    RecursiveMemoryEffect,
)
from xdsl.utils.exceptions import VerifyException

_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
REDUCE_KINDS = ("sum", "max")

# --------------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------------


@irdl_attr_definition
class AxesAttr(ParametrizedAttribute):
    """Ordered named axes with their extents: `#loop.axes<m = 512, n = 4096, k = 1024>`.

    Names are identifiers, unique; extents are positive. `loop.fused` prints its axes in the
    short form `axes [m = 512, n = 4096, k = 1024]`.
    """

    name = "loop.axes"
    names: ArrayAttr[StringAttr]
    extents: ArrayAttr[IntAttr]

    @staticmethod
    def get(axes: Sequence[tuple[str, int]]) -> AxesAttr:
        """`AxesAttr.get([("m", 512), ("n", 4096)])`."""
        return AxesAttr(
            ArrayAttr([StringAttr(n) for n, _ in axes]), ArrayAttr([IntAttr(e) for _, e in axes])
        )

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(n.data for n in self.names.data)

    @property
    def axis_extents(self) -> tuple[int, ...]:
        return tuple(e.data for e in self.extents.data)

    def items(self) -> list[tuple[str, int]]:
        return list(zip(self.axis_names, self.axis_extents))

    def as_dict(self) -> dict[str, int]:
        return dict(self.items())

    def extent(self, axis: str) -> int:
        return self.as_dict()[axis]

    def verify(self) -> None:
        names = self.axis_names
        if len(names) != len(self.extents.data):
            raise VerifyException("loop.axes: one extent per axis name is required")
        for n in names:
            if not _AXIS_NAME.match(n):
                raise VerifyException(f"loop.axes: axis name '{n}' is not an identifier")
        if len(set(names)) != len(names):
            raise VerifyException(f"loop.axes: axis names must be unique, got {list(names)}")
        for n, e in self.items():
            if e < 1:
                raise VerifyException(f"loop.axes: axis '{n}' has extent {e}, must be >= 1")

    # `#loop.axes<m = 512, n = 4096>`
    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        items = parser.parse_comma_separated_list(
            parser.Delimiter.ANGLE, lambda: _parse_axis_item(parser)
        )
        a = AxesAttr.get(items)
        return (a.names, a.extents)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            print_axis_items(printer, self.items())


def print_axis_items(printer: Printer, items: Sequence[tuple[str, int]]) -> None:
    printer.print_list(items, lambda it: printer.print_string(f"{it[0]} = {it[1]}"))


def parse_axis_items(parser: AttrParser) -> list[tuple[str, int]]:
    """`[m = 512, k = 1024]`."""
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: _parse_axis_item(parser))


def print_ins_results_body(printer: Printer, op: Operation) -> None:
    """The tail shared by `loop.fused` and `tile.kernel`:
    `ins(%a, %b : T, U) -> R attributes {...} { body }` (several results as `(R, S)`)."""
    printer.print_string("ins(")
    printer.print_list(op.operands, printer.print_operand)
    if op.operands:
        printer.print_string(" : ")
        printer.print_list([v.type for v in op.operands], printer.print_attribute)
    printer.print_string(") -> ")
    types = [r.type for r in op.results]
    if len(types) == 1:
        printer.print_attribute(types[0])
    else:
        printer.print_string("(")
        printer.print_list(types, printer.print_attribute)
        printer.print_string(")")
    printer.print_op_attributes(op.attributes, print_keyword=True)
    printer.print_string(" ")
    printer.print_region(op.regions[0])


def parse_ins_results_body(parser: Parser):
    """Parse what `print_ins_results_body` prints: (inputs, result types, attributes, region)."""
    parser.parse_keyword("ins")
    parser.parse_punctuation("(")
    pos = parser.pos
    operands = []
    types: list[Attribute] = []
    if parser.parse_optional_punctuation(")") is None:
        operands = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation(")")
    if len(operands) != len(types):
        parser.raise_error(f"{len(operands)} inputs but {len(types)} input types")
    inputs = parser.resolve_operands(operands, types, pos)
    parser.parse_punctuation("->")
    if parser.parse_optional_punctuation("(") is not None:
        result_types: list[Attribute] = []
        if parser.parse_optional_punctuation(")") is None:
            result_types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
            parser.parse_punctuation(")")
    else:
        result_types = [parser.parse_type()]
    attrs = parser.parse_optional_attr_dict_with_keyword()
    body = parser.parse_region()
    return inputs, result_types, (dict(attrs.data) if attrs is not None else {}), body


# --------------------------------------------------------------------------------------------
# Helpers shared by the verifiers and by passes
# --------------------------------------------------------------------------------------------


def axes_owner(op: Operation) -> Operation | None:
    """The nearest enclosing op that owns named axes (`loop.fused`, `tile.kernel`, ...)."""
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent.properties.get("axes"), AxesAttr):
            return parent
        parent = parent.parent_op()
    return None


def owner_axes(owner: Operation) -> AxesAttr:
    axes = owner.properties["axes"]
    assert isinstance(axes, AxesAttr)
    return axes


def enclosing_reduces(op: Operation) -> Iterator[ReduceOp]:
    """The `loop.reduce` ops around `op`, innermost first (stops at the axes owner)."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent.properties.get("axes"), AxesAttr):
        if isinstance(parent, ReduceOp):
            yield parent
        parent = parent.parent_op()


def _err(op: Operation, message: str) -> VerifyException:
    return VerifyException(f"{op.name}: {message}")


def _owner_or_error(op: Operation) -> Operation:
    owner = axes_owner(op)
    if owner is None:
        raise _err(op, "must be inside a loop.fused body (or another op that owns named axes)")
    return owner


def _print_index_list(printer: Printer, indices: Sequence[SSAValue]) -> None:
    printer.print_string("[")
    printer.print_list(indices, printer.print_operand)
    printer.print_string("]")


def _parse_index_list(parser: Parser) -> list[SSAValue]:
    unresolved = parser.parse_comma_separated_list(
        parser.Delimiter.SQUARE, parser.parse_unresolved_operand
    )
    return [parser.resolve_operand(u, IndexType()) for u in unresolved]


# --------------------------------------------------------------------------------------------
# Canonicalization traits (the patterns live in emmy/dialects/loop_canonicalization.py)
# --------------------------------------------------------------------------------------------


class ReduceOpHasCanonicalizationPatterns(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        from emmy.dialects.loop_canonicalization import reduce_patterns

        return reduce_patterns()


class FusedOpHasCanonicalizationPatterns(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        from emmy.dialects.loop_canonicalization import fused_patterns

        return fused_patterns()


# --------------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class AxisOp(IRDLOperation):
    """The current index along a named axis of the enclosing `loop.fused`.

        %m = loop.axis "m" : index
    """

    name = "loop.axis"
    axis = prop_def(StringAttr)
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "$axis attr-dict `:` type($result)"

    def __init__(self, axis: str):
        super().__init__(properties={"axis": StringAttr(axis)}, result_types=[IndexType()])

    @property
    def axis_name(self) -> str:
        return self.axis.data

    def verify_(self) -> None:
        owner = _owner_or_error(self)
        names = owner_axes(owner).axis_names
        if self.axis_name not in names:
            raise _err(
                self,
                f"axis '{self.axis_name}' is not an axis of the enclosing {owner.name} "
                f"(axes: {', '.join(names) or 'none'})",
            )


@irdl_op_definition
class LoadOp(IRDLOperation):
    """One element of an input tensor (a block argument of the enclosing `loop.fused`).

        %a = loop.load %xa[%m, %k] : tensor<512x1024xbf16> -> bf16

    Indices are `index` values built from `loop.axis` and `arith` index ops; one per dimension.
    """

    name = "loop.load"
    tensor = operand_def(TensorType)
    indices = var_operand_def(IndexType)
    result = result_def()
    traits = traits_def(Pure())

    def __init__(self, tensor: SSAValue, indices: Sequence[SSAValue]):
        assert isinstance(tensor.type, TensorType)
        super().__init__(
            operands=[tensor, list(indices)], result_types=[tensor.type.element_type]
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.tensor)
        _print_index_list(printer, self.indices)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.tensor.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> LoadOp:
        tensor = parser.parse_unresolved_operand()
        indices = _parse_index_list(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ttype = parser.parse_type()
        parser.parse_punctuation("->")
        rtype = parser.parse_type()
        op = cls.create(
            operands=[parser.resolve_operand(tensor, ttype), *indices],
            result_types=[rtype],
            attributes=attrs,
        )
        return op

    def verify_(self) -> None:
        owner = _owner_or_error(self)
        t = self.tensor
        if not (isinstance(t, BlockArgument) and t.block.parent_op() is owner):
            raise _err(
                self, f"the tensor must be a block argument of the enclosing {owner.name}"
            )
        ttype = t.type
        assert isinstance(ttype, TensorType)
        rank = len(ttype.get_shape())
        if len(self.indices) != rank:
            raise _err(
                self, f"{len(self.indices)} indices for a tensor of rank {rank} ({ttype})"
            )
        if self.result.type != ttype.element_type:
            raise _err(
                self,
                f"result type {self.result.type} must be the element type {ttype.element_type}",
            )


@irdl_op_definition
class StoreOp(IRDLOperation):
    """Write result number N of the enclosing `loop.fused` at the given indices.

        loop.store %o, 0 [%m, %n] : bf16

    Stores sit directly in the loop body (not inside a `loop.reduce`). Every element of every
    result is written exactly once over the iteration space of the axes the store depends on.
    """

    name = "loop.store"
    value = operand_def()
    indices = var_operand_def(IndexType)
    output = prop_def(IntegerAttr[i64])
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, value: SSAValue, output: int, indices: Sequence[SSAValue]):
        super().__init__(
            operands=[value, list(indices)], properties={"output": IntegerAttr(output, i64)}
        )

    @property
    def output_index(self) -> int:
        return self.output.value.data

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.value)
        printer.print_string(f", {self.output_index} ")
        _print_index_list(printer, self.indices)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.value.type)

    @classmethod
    def parse(cls, parser: Parser) -> StoreOp:
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        number = parser.parse_integer(allow_boolean=False, allow_negative=False)
        indices = _parse_index_list(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        vtype = parser.parse_type()
        op = cls.create(
            operands=[parser.resolve_operand(value, vtype), *indices],
            properties={"output": IntegerAttr(number, i64)},
            attributes=attrs,
        )
        return op

    def verify_(self) -> None:
        owner = _owner_or_error(self)
        if self.parent_op() is not owner:
            raise _err(self, f"must be directly in the {owner.name} body, not inside a loop.reduce")
        n = self.output_index
        if not 0 <= n < len(owner.results):
            raise _err(
                self, f"result number {n} out of range ({owner.name} has {len(owner.results)})"
            )
        rtype = owner.results[n].type
        assert isinstance(rtype, TensorType)
        rank = len(rtype.get_shape())
        if len(self.indices) != rank:
            raise _err(self, f"{len(self.indices)} indices for result {n} of rank {rank}")
        if self.value.type != rtype.element_type:
            raise _err(
                self,
                f"stored value has type {self.value.type}, result {n} holds {rtype.element_type}",
            )


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator: of a `loop.fused` body (no operands) and of a `loop.reduce` region (the one
    scalar to reduce).

        loop.yield
        loop.yield %p : f32
    """

    name = "loop.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), Pure())

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[list(values)])

    def print(self, printer: Printer) -> None:
        if self.values:
            printer.print_string(" ")
            printer.print_list(self.values, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        if self.values:
            printer.print_string(" : ")
            printer.print_list([v.type for v in self.values], printer.print_attribute)

    @classmethod
    def parse(cls, parser: Parser) -> YieldOp:
        pos = parser.pos
        unresolved = []
        first = parser.parse_optional_unresolved_operand()
        if first is not None:
            unresolved.append(first)
            while parser.parse_optional_punctuation(",") is not None:
                unresolved.append(parser.parse_unresolved_operand())
        attrs = parser.parse_optional_attr_dict()
        types = []
        if unresolved:
            parser.parse_punctuation(":")
            types = [parser.parse_type()]
            while parser.parse_optional_punctuation(",") is not None:
                types.append(parser.parse_type())
        values = parser.resolve_operands(unresolved, types, pos)
        return cls.create(operands=values, attributes=attrs)

    def verify_(self) -> None:
        parent = self.parent_op()
        if isinstance(parent, ReduceOp):
            if len(self.values) != 1:
                raise _err(self, f"a loop.reduce region yields one value, got {len(self.values)}")
        elif self.values:
            raise _err(self, f"the {parent.name if parent else 'enclosing'} body yields nothing")


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """Reduce the scalar its region yields over the named axes (`sum` from 0, `max` from -inf).

        %ss = loop.reduce sum ["k"] : f32 {
          %k = loop.axis "k" : index
          %a = loop.load %xa[%m, %k] : tensor<512x1024xbf16> -> bf16
          %af = arith.extf %a : bf16 to f32
          %sq = arith.mulf %af, %af : f32
          loop.yield %sq : f32
        }

    The result no longer depends on the reduced axes. Reductions may nest, over other axes.
    """

    name = "loop.reduce"
    kind = prop_def(StringAttr)
    axes = prop_def(ArrayAttr[StringAttr])
    result = result_def()
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect(), ReduceOpHasCanonicalizationPatterns())

    def __init__(self, kind: str, axes: Sequence[str], result_type: Attribute, body: Region):
        super().__init__(
            properties={
                "kind": StringAttr(kind),
                "axes": ArrayAttr([StringAttr(a) for a in axes]),
            },
            result_types=[result_type],
            regions=[body],
        )

    @property
    def kind_name(self) -> str:
        return self.kind.data

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.data for a in self.axes.data)

    @property
    def block(self) -> Block:
        return self.body.block

    @property
    def yielded(self) -> SSAValue:
        term = self.body.block.last_op
        assert isinstance(term, YieldOp)
        return term.values[0]

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.kind_name} [")
        printer.print_list(self.axis_names, printer.print_string_literal)
        printer.print_string("]")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)

    @classmethod
    def parse(cls, parser: Parser) -> ReduceOp:
        kind = parser.parse_identifier(context_msg=" (reduction kind: sum or max)")
        axes = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: parser.parse_str_literal(" (axis name)")
        )
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        rtype = parser.parse_type()
        body = parser.parse_region()
        op = cls(kind, axes, rtype, body)
        op.attributes |= attrs
        return op

    def verify_(self) -> None:
        if self.kind_name not in REDUCE_KINDS:
            raise _err(self, f"kind must be sum or max, got '{self.kind_name}'")
        owner = _owner_or_error(self)
        names = owner_axes(owner).axis_names
        axes = self.axis_names
        if not axes:
            raise _err(self, "needs at least one axis")
        if len(set(axes)) != len(axes):
            raise _err(self, f"axes must be distinct, got {list(axes)}")
        for a in axes:
            if a not in names:
                raise _err(
                    self,
                    f"axis '{a}' is not an axis of the enclosing {owner.name} "
                    f"(axes: {', '.join(names) or 'none'})",
                )
        for outer in enclosing_reduces(self):
            twice = set(axes) & set(outer.axis_names)
            if twice:
                raise _err(
                    self, f"axis '{sorted(twice)[0]}' is already reduced by an enclosing loop.reduce"
                )
        block = self.body.block
        if block.args:
            raise _err(self, "the region takes no block arguments")
        term = block.last_op
        if not isinstance(term, YieldOp) or len(term.values) != 1:
            raise _err(self, "the region must end with a loop.yield of one value")
        if term.values[0].type != self.result.type:
            raise _err(
                self,
                f"the region yields {term.values[0].type}, the result type is {self.result.type}",
            )


@irdl_op_definition
class FusedOp(IRDLOperation):
    """One fused loop over named axes (a future kernel).

        %out = loop.fused @rms_norm_qkv_proj axes [m = 512, n = 4096, k = 1024]
            ins(%x, %nw, %w : tensor<512x1024xbf16>, tensor<1024xbf16>, tensor<4096x1024xbf16>)
            -> tensor<512x4096xbf16> {
        ^bb0(%xa: tensor<512x1024xbf16>, %nwa: tensor<1024xbf16>, %wa: tensor<4096x1024xbf16>):
          ... loop.axis / loop.load / arith / math / loop.reduce ...
          loop.store %o, 0 [%m, %n] : bf16
          loop.yield
        }

    `sym_name` names the kernel; `axes` holds the ordered names and extents. The single-block
    region is isolated from above; its block arguments mirror `inputs` one to one. Discardable
    attributes: `emmy.origin` (the model-level op it came from), `emmy.fused_from` (array of the
    loop names merged into it) and `emmy.fusion` (`"fused"` when producers holding reductions
    were merged in, so a `split` alternative exists).
    """

    name = "loop.fused"
    sym_name = prop_def(StringAttr)
    axes = prop_def(AxesAttr)
    inputs = var_operand_def(base(TensorType))
    outputs = var_result_def(base(TensorType))
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), Pure(), FusedOpHasCanonicalizationPatterns())

    def __init__(
        self,
        sym_name: str,
        axes: AxesAttr | Sequence[tuple[str, int]],
        inputs: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        body: Region,
        attributes: dict[str, Attribute] | None = None,
    ):
        if not isinstance(axes, AxesAttr):
            axes = AxesAttr.get(list(axes))
        super().__init__(
            operands=[list(inputs)],
            result_types=[list(result_types)],
            properties={"sym_name": StringAttr(sym_name), "axes": axes},
            regions=[body],
            attributes=attributes or {},
        )

    @property
    def name_str(self) -> str:
        return self.sym_name.data

    @property
    def axis_names(self) -> tuple[str, ...]:
        return self.axes.axis_names

    @property
    def extents(self) -> dict[str, int]:
        return self.axes.as_dict()

    @property
    def block(self) -> Block:
        return self.body.block

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string(" axes [")
        print_axis_items(printer, self.axes.items())
        printer.print_string("] ")
        print_ins_results_body(printer, self)

    @classmethod
    def parse(cls, parser: Parser) -> FusedOp:
        sym = parser.parse_symbol_name()
        parser.parse_keyword("axes")
        items = parse_axis_items(parser)
        inputs, result_types, attrs, body = parse_ins_results_body(parser)
        op = cls(sym.data, items, inputs, result_types, body)
        op.attributes |= attrs
        return op

    def verify_(self) -> None:
        block = self.body.block
        if len(block.args) != len(self.inputs):
            raise _err(
                self,
                f"the body has {len(block.args)} block arguments for {len(self.inputs)} inputs",
            )
        for i, (arg, v) in enumerate(zip(block.args, self.inputs)):
            if arg.type != v.type:
                raise _err(self, f"block argument {i} has type {arg.type}, input {i} is {v.type}")
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise _err(self, "the body must end with loop.yield")
        stored = {op.output_index for op in block.ops if isinstance(op, StoreOp)}
        for i in range(len(self.results)):
            if i not in stored:
                raise _err(self, f"result {i} is never stored")


def _parse_axis_item(parser: AttrParser) -> tuple[str, int]:
    name = parser.parse_identifier(context_msg=" (axis name)")
    parser.parse_punctuation("=")
    return name, parser.parse_integer(allow_boolean=False, allow_negative=False)


Loop = Dialect(
    "loop",
    [FusedOp, AxisOp, LoadOp, ReduceOp, StoreOp, YieldOp],
    [AxesAttr],
)
