"""Summarize Nsight Compute's per-instruction warp stall samples (the source page as CSV):

    ncu --set full --import-source no -k 'regex:^o_proj_residual' -c 1 -o /tmp/r python3 ...
    ncu -i /tmp/r.ncu-rep --page source --csv --print-source sass > source.csv
    python3 docs/bench/ncu-stalls.py source.csv 0,2 25     # results 0 and 2, the top 25 instructions
    python3 docs/bench/ncu-stalls.py source.csv 0 10 "DEPBAR.LE gsb0, 0x0"   # and the share from
                                          # the last such instruction on (a wgmma kernel's epilogue)

For each profiled result (in launch order): its stall samples by reason, then the instructions
with the most samples, each with its execution count and main stall reasons (long_sb: waiting for
a global load; barrier: a named barrier or a wgmma wait; mio: shared memory or the tensor cores'
operand path). Made for the o projection's epilogue (2026-12-07, page running-and-benchmarking).
"""
import collections
import csv
import sys


def results(path: str) -> list[dict]:
    kern, cur = [], None
    for r in csv.reader(open(path)):
        if r and r[0] == "Kernel Name":
            cur = {"name": r[1], "rows": []}
            kern.append(cur)
        elif r and r[0] == "Address":
            cur["hdr"] = r
        elif cur is not None and r:
            cur["rows"].append(r)
    return kern


def _count(cell: str) -> int:
    """A sample count of the CSV (empty or "-" where ncu has none)."""
    return int(cell) if cell.isdigit() else 0


def main(path: str, which: str, top: int, tail_from: str | None = None) -> None:
    kern = results(path)
    for idx in map(int, which.split(",")):
        k = kern[idx]
        h = k["hdr"]
        ix = {n: i for i, n in enumerate(h)}
        samples = ix["Warp Stall Sampling (All Samples)"]
        stalls = [c for c in h if c.startswith("stall_") and "Not Issued" not in c]
        tot = collections.Counter()
        for r in k["rows"]:
            for c in stalls:
                tot[c] += _count(r[ix[c]])
        n = sum(_count(r[samples]) for r in k["rows"])
        print(f"== result {idx}: {k['name']}, {len(k['rows'])} instructions, {n} samples")
        print("   " + ", ".join(f"{c[6:]}={v}" for c, v in tot.most_common(10)))
        marks = [i for i, r in enumerate(k["rows"]) if tail_from and tail_from in r[1]]
        if marks:
            tail = k["rows"][marks[-1]:]
            t = sum(_count(r[samples]) for r in tail)
            lsb = sum(_count(r[ix["stall_long_sb"]]) for r in tail)
            print(f"   from the last '{tail_from}' on: {t} samples ({100 * t / max(n, 1):.0f}%), {lsb} of them long_sb")
        for r in sorted(k["rows"], key=lambda r: -_count(r[samples]))[:top]:
            s = {c[6:]: _count(r[ix[c]]) for c in stalls if _count(r[ix[c]])}
            main4 = dict(sorted(s.items(), key=lambda x: -x[1])[:4])
            print(f"   {r[samples]:>6} {r[1].strip()[:70]:70} exec={r[ix['Instructions Executed']]} {main4}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "0", int(sys.argv[3]) if len(sys.argv) > 3 else 25,
         sys.argv[4] if len(sys.argv) > 4 else None)
