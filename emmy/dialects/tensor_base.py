"""The `tensor` dialect's helpers and shared syntax: shapes and dtypes, the type constraints and
the op base class. emmy.dialects.tensor re-exports them.
"""

from __future__ import annotations

from collections.abc import Sequence

from typing import ClassVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    TensorType,
    i64,
)
from xdsl.ir import Attribute
from xdsl.irdl import (
    IRDLOperation,
    base,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------------------------
# Constraints and helpers
# --------------------------------------------------------------------------------------------

AnyTensor = base(TensorType)

ORIGIN = "emmy.origin"  # the discardable attribute naming an op's model-level origin (see above)


def _shape(t: Attribute) -> tuple[int, ...]:
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    """`array<i64: ...>` from Python ints."""
    return DenseArrayBase.from_list(i64, list(values))


def _ints(attr: DenseArrayBase) -> tuple[int, ...]:
    return tuple(int(v) for v in attr.get_values())


class TensorOp(IRDLOperation):
    """Base of every tensor-stage op: the shared custom syntax.

    `tensor.<op> %a, %b <extra> {props, attrs} : <types>`; subclasses may add a leading piece
    (`_print_extra` / `_parse_extra`, used by `tensor.splat` for its value).
    """

    traits = traits_def(Pure())

    # Print the single shared type when all operand and result types are equal.
    SAME_TYPE_SYNTAX: ClassVar[bool] = False

    # ---------------------------------------------------------------- printing
    def _print_extra(self, printer: Printer) -> set[str]:
        """Print a leading piece after the operands; return property names it covered."""
        return set()

    def print(self, printer: Printer) -> None:
        if self.operands:
            printer.print_string(" ")
            printer.print_list(self.operands, printer.print_operand)
        covered = self._print_extra(printer)
        op_def = self.get_irdl_definition()
        merged: dict[str, Attribute] = {}
        for name in op_def.properties:
            if name in self.properties and name not in covered:
                merged[name] = self.properties[name]
        merged |= self.attributes
        printer.print_op_attributes(merged)
        printer.print_string(" : ")
        in_types = [o.type for o in self.operands]
        out_types = [r.type for r in self.results]
        types = in_types + out_types
        if self.SAME_TYPE_SYNTAX and types and all(t == types[0] for t in types):
            printer.print_attribute(types[0])
        elif len(in_types) == 1 and len(out_types) == 1:
            printer.print_attribute(in_types[0])
            printer.print_string(" -> ")
            printer.print_attribute(out_types[0])
        elif not in_types and len(out_types) == 1:
            printer.print_attribute(out_types[0])
        else:
            printer.print_function_type(in_types, out_types)

    # ---------------------------------------------------------------- parsing
    @classmethod
    def _parse_extra(cls, parser: Parser) -> dict[str, Attribute]:
        return {}

    @classmethod
    def parse(cls, parser: Parser):
        pos = parser.pos
        operands = []
        first = parser.parse_optional_unresolved_operand()
        if first is not None:
            operands.append(first)
            while parser.parse_optional_punctuation(",") is not None:
                operands.append(parser.parse_unresolved_operand())
        props = cls._parse_extra(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        if parser.parse_optional_punctuation("(") is not None:
            in_types: list[Attribute] = []
            if parser.parse_optional_punctuation(")") is None:
                in_types.append(parser.parse_type())
                while parser.parse_optional_punctuation(",") is not None:
                    in_types.append(parser.parse_type())
                parser.parse_punctuation(")")
            parser.parse_punctuation("->")
            out_types: list[Attribute] = [parser.parse_type()]
        else:
            first_type = parser.parse_type()
            if parser.parse_optional_punctuation("->") is not None:
                in_types = [first_type]
                out_types = [parser.parse_type()]
            elif not operands:
                in_types, out_types = [], [first_type]
            else:
                in_types = [first_type] * len(operands)
                out_types = [first_type]
        values = parser.resolve_operands(operands, in_types, pos)
        prop_names = cls.get_irdl_definition().properties
        for name in list(attrs):
            if name in prop_names:
                props[name] = attrs.pop(name)
        return cls.create(
            operands=values, result_types=out_types, properties=props, attributes=attrs
        )

    # ---------------------------------------------------------------- verification
    def _error(self, message: str) -> VerifyException:
        return VerifyException(f"{self.name}: {message}")
