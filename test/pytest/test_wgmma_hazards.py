"""tools/kernel_checks/wgmma_hazards.py: accesses to a wgmma's registers before its wait, read
from SASS (the fixtures: the o projection's k loop and epilogue as CUDA 13.0's ptxas built them,
slices = rows and slices = cols, disassembled on an H100 on 2026-12-07)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "kernel_checks"))

from wgmma_hazards import hazards  # noqa: E402

DATA = Path(__file__).parent / "data" / "sass"


def test_rows_epilogue_waits_before_reading():
    assert hazards((DATA / "o_proj_rows_h100.sass").read_text()) == []


def test_cols_epilogue_conversions_above_the_wait_are_found():
    found = hazards((DATA / "o_proj_cols_h100.sass").read_text())
    assert len(found) == 32  # one packed conversion per pair of the 64 accumulators
    first = found[0]
    assert (first.function, first.address, first.registers) == ("o_proj_residual", "44b0", (78, 79))
    assert "F2FP.BF16.F32.PACK_AB R14, R79, R78" in str(first)


def _sass(*lines: str) -> str:
    body = "\n".join(f"        /*{0x100 + 16 * i:04x}*/   {line} ;   /* 0x0 */" for i, line in enumerate(lines))
    return "\t\tFunction : k\n" + body


def test_only_the_full_wait_clears_and_a_registers_are_guarded_against_writes():
    text = _sass(
        "HGMMA.64x16x16.F32.BF16 R24, R88, gdesc[UR4], R24, gsb0",
        "WARPGROUP.DEPBAR.LE gsb0, 0x1",
        "FADD R2, R30, R3",  # reads an accumulator: the group may still be in flight
        "FADD R40, R88, R3",  # reads an A register: allowed
        "MOV R89, R3",  # overwrites an A register
        "WARPGROUP.DEPBAR.LE gsb0, 0x0",
        "FADD R2, R30, R3",
    )
    found = hazards(text)
    assert [(h.address, h.registers) for h in found] == [("0120", (30,)), ("0140", (89,))]


def test_an_unconditional_branch_forgets_the_pending_group():
    text = _sass("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], R24, gsb0", "BRA 0x100", "STS.128 [R1], R24")
    assert hazards(text) == []
    text = _sass("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], R24, gsb0", "@P0 BRA 0x100", "STS.128 [R1], R22")
    assert [h.registers for h in hazards(text)] == [(24, 25)]  # R22..R25 stored


def test_a_partial_wait_retires_the_older_groups_only():
    text = _sass(
        "HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], R24, gsb0",  # S = Q K^T
        "HGMMA.64x8x16.F32.BF16 R40, R24, gdesc[UR6], R40, gsb0",  # O += P V, P in R24..R27
        "WARPGROUP.DEPBAR.LE gsb0, 0x1",
        "FMUL R2, R25, R3",  # the older group (S) is done: a read of it is fine
        "FADD R4, R41, R3",  # the newer (O) is not
        "MOV R24, R3",  # nor may its A registers be overwritten
    )
    found = hazards(text)
    assert [(h.address, h.registers) for h in found] == [("0140", (41,)), ("0150", (24,))]


def test_an_address_register_is_as_wide_as_its_own_suffix_not_the_access():
    """A 16-byte copy or load writes or reads four data registers, but its address is one register
    (`[R21]`) or a written pair (`[R68.64]`): R21 next to an accumulator at R24 is no hazard
    (lines of rms_norm_qkv_proj's SASS on an H100, 2026-12-07, that an earlier reading flagged)."""
    text = _sass(
        "HGMMA.64x16x16.F32.BF16 R24, gdesc[UR4], R24, gsb0",
        "LDS.128 R20, [R21]",
        "LDGSTS.E.BYPASS.128 [R23+0x6000], desc[UR60][R68.64]",
        "LDS.128 R20, [R22]",  # writes R20..R23 only
        "STS.128 [R1], R22",  # reads R22..R25: two accumulators
        "LDG.E.64 R2, desc[UR4][R24.64]",  # an address in accumulators: read
    )
    assert [(h.address, h.registers) for h in hazards(text)] == [("0140", (24, 25)), ("0150", (24, 25))]
