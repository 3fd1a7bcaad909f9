"""The `tile` stage: how one fused loop computes on a GPU.

A `tile.kernel` is a `loop.fused` whose body is kept unchanged (the same `loop.axis`, `loop.load`,
`loop.reduce`, `loop.store`, `arith` and `math` ops, so every analysis of the loop stage still
applies) plus what the loop did not say: its `kind` (elementwise, reduction, contraction or
attention, see `emmy/analysis/classify.py`) and its schedule, a dictionary of knobs. A knob is one
schedule choice with a finite domain (docs/03-forks-and-knobs.md): `convert-loop-to-tile` writes the knobs
undecided, `decide-forks` decides every one of them and records where the answer came from.

    %out = tile.kernel @rmsnorm_qkv kind "contraction" axes [m = 512, n = 4096, k = 1024] knobs {
        block_m = #tile.knob<"block_m", [16, 32, 64, 128, 256] = 128, "rule", "M=512 N=4096: 128 tiles of 128x128, ...">,
        split_k = #tile.knob<"split_k", [1, 2, 3, 4, 8, 16]>
      } ins(%x, %nw, %w : tensor<512x1024xbf16>, tensor<1024xbf16>, tensor<4096x1024xbf16>)
        -> tensor<512x4096xbf16> {
    ^bb0(%xa: tensor<512x1024xbf16>, %nwa: tensor<1024xbf16>, %wa: tensor<4096x1024xbf16>):
      ... the loop body ...
      loop.yield
    }

The printer puts one knob per line (decided knobs carry long reasons); the parser takes any
layout. The generic form holds the same data as properties (`sym_name`, `kind`, `axes` as a
`#loop.axes<...>`, `knobs` as a dictionary).

Knob values never change the numbers a kernel computes, only how it computes them. The knob
names per kind and their meanings are in `emmy/tuning/knobs.py`.

Reading a decided schedule (the kernel stage does this):

    kernel.knob_value("block_m")   # -> 128 (int) or "wgmma" (str); EmmyError if undecided
    kernel.knob_values()           # -> {"block_m": 128, ...} (decided knobs only)
    kernel.knob("block_m").tier    # -> "rule"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntAttr,
    NoneAttr,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, Dialect, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove, Pure
from xdsl.utils.exceptions import VerifyException

from emmy.dialects.loop import (
    AxesAttr,
    YieldOp,
    parse_axis_items,
    parse_ins_results_body,
    print_axis_items,
    print_ins_results_body,
)
from emmy.diagnostics import EmmyError

KINDS: tuple[str, ...] = ("elementwise", "reduction", "contraction", "attention")
TIERS: tuple[str, ...] = ("pinned", "local", "golden", "nearest", "prior", "rule")

KnobValue = int | str

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _to_attr(value: KnobValue) -> IntAttr | StringAttr:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"a knob value is an int or a str, got {value!r}")
    return IntAttr(value) if isinstance(value, int) else StringAttr(value)


def _from_attr(attr: Attribute) -> KnobValue:
    if isinstance(attr, IntAttr):
        return attr.data
    if isinstance(attr, StringAttr):
        return attr.data
    raise VerifyException(f"a knob value is an integer or a string, got {attr}")


def _parse_value(parser: AttrParser) -> IntAttr | StringAttr:
    if (i := parser.parse_optional_integer(allow_boolean=False)) is not None:
        return IntAttr(i)
    return StringAttr(parser.parse_str_literal(" (a knob value is an integer or a string)"))


def _print_value(printer: Printer, attr: Attribute) -> None:
    if isinstance(attr, IntAttr):
        printer.print_string(str(attr.data))
    else:
        assert isinstance(attr, StringAttr)
        printer.print_string_literal(attr.data)


# --------------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------------


@irdl_attr_definition
class KnobAttr(ParametrizedAttribute):
    """One schedule knob: a name, a finite domain and, once decided, the chosen value with its
    evidence tier and a reason.

        #tile.knob<"block_m", [16, 32, 64, 128]>                              // undecided
        #tile.knob<"block_m", [16, 32, 64, 128] = 64, "rule", "M=512 ...">    // decided
        #tile.knob<"workers", ["thread", "mma_sync", "wgmma"] = "wgmma", "pinned", "pin '*.workers=wgmma'">

    The domain holds integers or strings (not both). Tiers, strongest first: `pinned` (the user
    fixed it), `local` (the user's tuning store), `golden` (a reviewed configuration), `nearest`
    (a record for a neighbouring shape), `prior` (the cost model), `rule` (the default rules).
    """

    name = "tile.knob"

    knob_name: StringAttr
    domain: ArrayAttr[IntAttr | StringAttr]
    choice: IntAttr | StringAttr | NoneAttr
    tier: StringAttr
    reason: StringAttr

    def __init__(
        self,
        knob_name: str | StringAttr,
        domain: Sequence[KnobValue] | ArrayAttr,
        value: KnobValue | Attribute | None = None,
        tier: str | StringAttr = "",
        reason: str | StringAttr = "",
    ):
        if not isinstance(knob_name, StringAttr):
            knob_name = StringAttr(knob_name)
        if not isinstance(domain, ArrayAttr):
            domain = ArrayAttr([_to_attr(v) for v in domain])
        if value is None:
            value = NoneAttr()
        elif not isinstance(value, Attribute):
            value = _to_attr(value)
        if not isinstance(tier, StringAttr):
            tier = StringAttr(tier)
        if not isinstance(reason, StringAttr):
            reason = StringAttr(reason)
        super().__init__(knob_name, domain, value, tier, reason)

    # Python view ------------------------------------------------------------------------------

    @property
    def key(self) -> str:
        """The knob's name (`block_m`)."""
        return self.knob_name.data

    @property
    def values(self) -> tuple[KnobValue, ...]:
        """The domain as Python values."""
        return tuple(_from_attr(a) for a in self.domain.data)

    @property
    def is_decided(self) -> bool:
        return not isinstance(self.choice, NoneAttr)

    @property
    def value(self) -> KnobValue | None:
        """The chosen value, None while undecided."""
        return None if isinstance(self.choice, NoneAttr) else _from_attr(self.choice)

    @property
    def tier_name(self) -> str:
        return self.tier.data

    @property
    def reason_text(self) -> str:
        return self.reason.data

    def decided(self, value: KnobValue, tier: str, reason: str) -> KnobAttr:
        """This knob with `value` chosen (same name and domain)."""
        return KnobAttr(self.knob_name, self.domain, value, tier, reason)

    # Verification and syntax ------------------------------------------------------------------

    def verify(self) -> None:
        name = self.knob_name.data
        entries = self.domain.data
        if not entries:
            raise VerifyException(f"knob '{name}': the domain is empty")
        for e in entries:
            if not isinstance(e, IntAttr | StringAttr):
                raise VerifyException(
                    f"knob '{name}': domain entries are integers or strings, got {e}"
                )
        if len({type(e) for e in entries}) > 1:
            raise VerifyException(f"knob '{name}': the domain mixes integers and strings")
        if len(set(entries)) != len(entries):
            raise VerifyException(f"knob '{name}': the domain repeats a value")
        if isinstance(self.choice, NoneAttr):
            if self.tier.data or self.reason.data:
                raise VerifyException(f"knob '{name}': a tier or reason without a chosen value")
            return
        if self.choice not in entries:
            raise VerifyException(
                f"knob '{name}': the chosen value {_show(self.choice)} is not in the domain "
                f"[{', '.join(_show(e) for e in entries)}]"
            )
        if self.tier.data not in TIERS:
            raise VerifyException(
                f"knob '{name}': unknown evidence tier '{self.tier.data}'; "
                f"tiers: {', '.join(TIERS)}"
            )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            knob_name = StringAttr(parser.parse_str_literal(" (the knob's name)"))
            parser.parse_punctuation(",")
            domain = ArrayAttr(
                parser.parse_comma_separated_list(
                    parser.Delimiter.SQUARE, lambda: _parse_value(parser)
                )
            )
            choice: Attribute = NoneAttr()
            tier = reason = StringAttr("")
            if parser.parse_optional_punctuation("=") is not None:
                choice = _parse_value(parser)
                parser.parse_punctuation(",")
                tier = StringAttr(parser.parse_str_literal(" (the evidence tier)"))
                parser.parse_punctuation(",")
                reason = StringAttr(parser.parse_str_literal(" (the reason)"))
        return [knob_name, domain, choice, tier, reason]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.knob_name.data)
            printer.print_string(", [")
            printer.print_list(self.domain.data, lambda a: _print_value(printer, a))
            printer.print_string("]")
            if not isinstance(self.choice, NoneAttr):
                printer.print_string(" = ")
                _print_value(printer, self.choice)
                printer.print_string(", ")
                printer.print_string_literal(self.tier.data)
                printer.print_string(", ")
                printer.print_string_literal(self.reason.data)


def _show(attr: Attribute) -> str:
    if isinstance(attr, IntAttr):
        return str(attr.data)
    if isinstance(attr, StringAttr):
        return f'"{attr.data}"'
    return str(attr)


# --------------------------------------------------------------------------------------------
# Ops
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class KernelOp(IRDLOperation):
    """One GPU kernel: a fused loop's body, its kind and its schedule knobs.

        %y = tile.kernel @silu_mul kind "elementwise" axes [m = 7, n = 3072] knobs {
            threads = #tile.knob<"threads", [64, 128, 256, 512, 1024]>,
            vector = #tile.knob<"vector", [1, 2, 4, 8]>,
            items = #tile.knob<"items", [1, 2, 4, 8]>
          } ins(%g : tensor<7x6144xbf16>) -> tensor<7x3072xbf16> {
        ^bb0(%ga: tensor<7x6144xbf16>):
          %m = loop.axis "m" : index
          ...
          loop.store %r, 0 [%m, %n] : bf16
          loop.yield
        }

    - `sym_name`: the kernel's name (from the loop), `kind`: elementwise | reduction |
      contraction | attention, `axes`: ordered axis names and extents (as on `loop.fused`),
      `knobs`: knob name -> `#tile.knob` (the key equals the knob's own name).
    - The region is isolated from above; its block arguments mirror `inputs` one to one; the body
      follows the loop stage's rules (docs/ir.md) and ends with `loop.yield`.
    - Results are the tensors the body's `loop.store N [...]` ops write.
    - Discardable attributes of the loop (`emmy.fused_from`, `emmy.fusion`) are kept.
    """

    name = "tile.kernel"

    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    sym_name = prop_def(StringAttr)
    kind = prop_def(StringAttr)
    axes = prop_def(AxesAttr)
    knobs = prop_def(DictionaryAttr)
    body = region_def("single_block")

    traits = traits_def(IsolatedFromAbove(), Pure())

    def __init__(
        self,
        sym_name: str,
        kind: str,
        axes: Mapping[str, int] | Sequence[tuple[str, int]],
        knobs: Mapping[str, KnobAttr] | Sequence[KnobAttr],
        inputs: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        body: Region,
        attributes: Mapping[str, Attribute] | None = None,
    ):
        if not isinstance(axes, AxesAttr):
            axes = AxesAttr.get(list(axes.items()) if isinstance(axes, Mapping) else list(axes))
        if not isinstance(knobs, Mapping):
            knobs = {k.key: k for k in knobs}
        super().__init__(
            operands=[list(inputs)],
            result_types=[list(result_types)],
            properties={
                "sym_name": StringAttr(sym_name),
                "kind": StringAttr(kind),
                "axes": axes,
                "knobs": DictionaryAttr(dict(knobs)),
            },
            regions=[body],
            attributes=dict(attributes or {}),
        )

    # Python view ------------------------------------------------------------------------------

    @property
    def kernel_name(self) -> str:
        return self.sym_name.data

    @property
    def name_str(self) -> str:
        """The kernel's name (as `loop.fused.name_str`)."""
        return self.sym_name.data

    @property
    def kind_name(self) -> str:
        return self.kind.data

    @property
    def axis_names(self) -> tuple[str, ...]:
        return self.axes.axis_names

    @property
    def extents(self) -> dict[str, int]:
        """Axis name -> extent, in order (as `loop.fused.extents`)."""
        return self.axes.as_dict()

    @property
    def block(self) -> Block:
        return self.body.block

    def knob_dict(self) -> dict[str, KnobAttr]:
        return dict(self.knobs.data)  # type: ignore[arg-type]

    def knob(self, name: str) -> KnobAttr:
        """The knob `name`; EmmyError listing the knobs when there is none."""
        k = self.knobs.data.get(name)
        if not isinstance(k, KnobAttr):
            raise EmmyError(
                f"tile.kernel @{self.kernel_name}: no knob '{name}'; knobs: "
                f"{', '.join(self.knobs.data) or 'none'}"
            )
        return k

    def knob_value(self, name: str) -> KnobValue:
        """The decided value of knob `name`; EmmyError if it is undecided."""
        k = self.knob(name)
        if k.value is None:
            raise EmmyError(
                f"tile.kernel @{self.kernel_name}: knob '{name}' is undecided (run decide-forks)"
            )
        return k.value

    def knob_values(self) -> dict[str, KnobValue]:
        """Knob name -> decided value, for the decided knobs."""
        return {
            n: k.value
            for n, k in self.knobs.data.items()
            if isinstance(k, KnobAttr) and k.value is not None
        }

    @property
    def is_decided(self) -> bool:
        return all(isinstance(k, KnobAttr) and k.is_decided for k in self.knobs.data.values())

    def with_knobs(self, knobs: Mapping[str, KnobAttr]) -> None:
        """Replace the knob dictionary (keys are the knobs' names)."""
        self.knobs = DictionaryAttr(dict(knobs))

    # Verification -----------------------------------------------------------------------------

    def verify_(self) -> None:
        where = f"tile.kernel @{self.sym_name.data}"
        if self.kind.data not in KINDS:
            raise VerifyException(
                f"{where}: unknown kind '{self.kind.data}'; kinds: {', '.join(KINDS)}"
            )
        for key, k in self.knobs.data.items():
            if not isinstance(k, KnobAttr):
                raise VerifyException(f"{where}: knob '{key}' must be a #tile.knob, got {k}")
            if k.key != key:
                raise VerifyException(
                    f"{where}: the knob under key '{key}' is named '{k.key}'"
                )
        block = self.body.block
        arg_types = [a.type for a in block.args]
        in_types = [v.type for v in self.inputs]
        if arg_types != in_types:
            raise VerifyException(
                f"{where}: the block arguments ({', '.join(map(str, arg_types))}) must mirror "
                f"the inputs ({', '.join(map(str, in_types))})"
            )
        last = block.last_op
        if not isinstance(last, YieldOp) or last.operands:
            raise VerifyException(f"{where}: the body must end with 'loop.yield' (no operands)")

    # Syntax -----------------------------------------------------------------------------------

    def print(self, printer: Printer) -> None:
        printer.print_string(" @")
        printer.print_identifier_or_string_literal(self.sym_name.data)
        printer.print_string(" kind ")
        printer.print_string_literal(self.kind.data)
        printer.print_string(" axes [")
        print_axis_items(printer, self.axes.items())
        printer.print_string("] knobs {")
        knobs = list(self.knobs.data.items())
        if knobs:  # one knob per line: decided knobs carry long reasons
            with printer.indented(2):
                for i, (key, knob) in enumerate(knobs):
                    printer.print_string("\n")
                    printer.print_identifier_or_string_literal(key)
                    printer.print_string(" = ")
                    printer.print_attribute(knob)
                    if i + 1 < len(knobs):
                        printer.print_string(",")
            with printer.indented(1):
                printer.print_string("\n")
        printer.print_string("} ")
        print_ins_results_body(printer, self)

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        sym_name = parser.parse_symbol_name().data
        parser.parse_keyword("kind")
        kind = parser.parse_str_literal(" (the kernel kind)")
        parser.parse_keyword("axes")
        axes = parse_axis_items(parser)
        parser.parse_keyword("knobs")
        knobs = parser.parse_attribute()
        if not isinstance(knobs, DictionaryAttr):
            parser.raise_error("expected a dictionary of #tile.knob after 'knobs'")
        inputs, result_types, attrs, body = parse_ins_results_body(parser)
        op = cls.create(
            operands=inputs,
            result_types=result_types,
            properties={
                "sym_name": StringAttr(sym_name),
                "kind": StringAttr(kind),
                "axes": AxesAttr.get(axes),
                "knobs": knobs,
            },
            regions=[body],
            attributes=attrs,
        )
        return op


Tile = Dialect("tile", [KernelOp], [KnobAttr])
