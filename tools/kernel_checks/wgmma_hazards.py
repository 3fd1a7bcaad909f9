"""Find instructions that touch a wgmma's accumulators before the wait that makes them valid, in
the SASS of built kernels (cuobjdump, so on a machine with the CUDA toolkit's disassembler).

    python3 tools/kernel_checks/wgmma_hazards.py CUBIN_OR_DIR [...]      # exit status 1 on a hazard

A warpgroup MMA (`HGMMA`) writes its accumulator registers asynchronously: until a
`WARPGROUP.DEPBAR.LE gsb0, N` (PTX `wgmma.wait_group N`) leaves fewer than N groups newer than
its own, nothing else may read or write them, nor write the registers it takes A from. ptxas is meant to keep every such access after the wait;
CUDA 13.0's ptxas did not in `slices = cols` epilogues (2026-12-07: two scalar bf16 conversions of
neighbouring accumulators fused into one `F2FP.PACK_AB` and scheduled above the wait, so the last
k-step's products were partly missing from the result). This reads each function's instructions
in address order: HGMMAs up to the one marked `gsb0` (the commit) form a group, pending with its
accumulators (and its A registers, for writes) until a `DEPBAR.LE gsb0, N` leaves only the newest
N groups; an unconditional branch or exit forgets them (what follows is reached from elsewhere);
any other instruction that touches a pending accumulator, or writes a pending A register, is
reported with its address. Loops are read once, in order: an access at the top of a loop body
that races the previous iteration's group is not seen.
"""

from __future__ import annotations

import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from emmy.backend.nvcc import sass  # noqa: E402

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)\s*([^;]*);")
_REG = re.compile(r"(?<![A-Z])R(\d+)(?:\.(64|128))?\b")
_ADDRESS = re.compile(r"\[[^\]]*\]")
_HGMMA = re.compile(r"HGMMA\.64x(\d+)x\d+\.(F32|F16)")
# opcodes whose first operand is no register they write (a store's address, a barrier, a branch)
_NO_DEST = ("ST", "STS", "STG", "STL", "RED", "SYNCS", "BAR", "BRA", "EXIT", "WARPSYNC")


@dataclass(frozen=True)
class Hazard:
    function: str
    address: str
    text: str
    registers: tuple[int, ...]

    def __str__(self) -> str:
        regs = ", ".join(f"R{r}" for r in self.registers)
        return f"{self.function} +0x{self.address}: {self.text} (touches {regs}, an accumulator of a wgmma still in flight)"


def _regs(operands: str, width_from: str) -> list[int]:
    """The registers `operands` name: a data operand as wide as the opcode's access (`.128`: four),
    an address (inside brackets, `[R21+0x10]`, `[R68.64]`) only as wide as its own suffix."""
    out = []
    wide = 4 if ".128" in width_from else 2 if ".64" in width_from else 1
    data, addresses = _ADDRESS.sub(" ", operands), " ".join(_ADDRESS.findall(operands))
    for part, default in ((data, wide), (addresses, 1)):
        for m in _REG.finditer(part):
            r = int(m.group(1))
            n = {"64": 2, "128": 4}.get(m.group(2) or "", default)
            out.extend(range(r, r + n))
    return out


def hazards(text: str) -> list[Hazard]:
    """Every access to an in-flight wgmma's registers in `text` (cuobjdump -sass output)."""
    found: list[Hazard] = []
    function = "?"
    groups: list[tuple[set[int], set[int]]] = []  # committed, not yet waited: (accumulators, A registers)
    acc: set[int] = set()  # the group being issued
    a_regs: set[int] = set()
    for line in text.splitlines():
        f = _FUNCTION.match(line)
        if f:
            function, groups, acc, a_regs = f.group(1), [], set(), set()
            continue
        m = _INSTR.search(line)
        if not m:
            continue
        address, pred, opcode, operands = m.group(1), m.group(2), m.group(3), m.group(4)
        if opcode.startswith("HGMMA"):
            h = _HGMMA.match(opcode)
            parts = [p.strip() for p in operands.split(",")]
            dest = _REG.match(parts[0])
            if h and dest:
                count = int(h.group(1)) // (2 if h.group(2) == "F32" else 4)
                acc |= set(range(int(dest.group(1)), int(dest.group(1)) + count))
            a = _REG.match(parts[1]) if len(parts) > 1 else None
            if a:  # A from registers: four of them
                a_regs |= set(range(int(a.group(1)), int(a.group(1)) + 4))
            if "gsb0" in operands:  # the group's last wgmma (wgmma.commit_group)
                groups.append((acc, a_regs))
                acc, a_regs = set(), set()
            continue
        wait = re.search(r"gsb0,\s*0x([0-9a-f]+)", operands) if opcode.startswith("WARPGROUP.DEPBAR") else None
        if wait:  # wgmma.wait_group N: all but the newest N groups are done
            keep = int(wait.group(1), 16)
            groups = groups[-keep:] if keep else []
            continue
        if opcode.startswith("WARPGROUP"):
            continue
        if not pred and (opcode.startswith("BRA") or opcode == "EXIT"):
            groups, acc, a_regs = [], set(), set()
            continue
        pending_acc = acc.union(*(g[0] for g in groups))
        pending_a = a_regs.union(*(g[1] for g in groups))
        touched = set(_regs(operands, opcode))
        written: set[int] = set()
        if not opcode.startswith(_NO_DEST):
            first = operands.split(",")[0]
            written = set(_regs(first, opcode))
        bad = (touched & pending_acc) | (written & pending_a)
        if bad:
            found.append(Hazard(function, address, f"{opcode} {operands.strip()}", tuple(sorted(bad))))
    return found


def main(argv: list[str]) -> int:
    files: list[Path] = []
    for a in argv or ["."]:
        p = Path(a)
        files += sorted(p.rglob("*.cubin")) if p.is_dir() else [p]
    bad = 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # cuobjdump, a process each
        texts = list(pool.map(sass, files))
    for cubin, text in zip(files, texts):
        if text is None:
            raise SystemExit("cuobjdump is not on PATH or beside nvcc (it comes with the CUDA toolkit)")
        if "HGMMA" not in text:
            continue
        found = hazards(text)
        for h in found:
            print(f"{cubin.name}: {h}")
        bad += bool(found)
    print(f"{len(files)} cubins read, {bad} with a wgmma hazard")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
