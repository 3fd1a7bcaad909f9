"""How large the legal schedule spaces of a compiled layer's kernels are, and how long each takes
to build (the figures docs/05-inside-a-tuning-run.md and emmy/schedule/space.py quote).

    python tools/legal_space_size.py --model Qwen/Qwen3-Embedding-0.6B --tokens 512 --target sm_90a

Prints, per kernel of the layer (the tile stage after decide-forks), its kind, the number of legal
points, how many of them have slices = cols (counted from the space's prefixes: `workers`, then
`slices`, lead the order), and the seconds of CPU the space took to build.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from emmy.analysis.classify import classify  # noqa: E402
from emmy.dialects.tile import KernelOp  # noqa: E402
from emmy.driver import CompileOptions, compile_model  # noqa: E402
from emmy.schedule.space import legal_points  # noqa: E402
from emmy.targets import get_target  # noqa: E402
from emmy.tuning.knobs import knob_space_for  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="Qwen/Qwen3-Embedding-0.6B")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--kind", default="contraction", help="kernels of this kind only ('' for all)")
    args = ap.parse_args(argv)
    target = get_target(args.target)
    opts = CompileOptions(model=args.model, layer=0, tokens=args.tokens, target=args.target, stop_after="tile")
    module = compile_model(opts).module
    total = 0
    for op in module.walk():
        if not isinstance(op, KernelOp):
            continue
        info = classify(op)
        if args.kind and info.kind != args.kind:
            continue
        t0 = time.process_time()
        points = legal_points(info, knob_space_for(info, target), target)
        cpu = time.process_time() - t0
        cols = 0
        if points.order[:2] == ("workers", "slices"):
            for w in points.options({}):
                if "cols" in points.options({"workers": w}):
                    cols += points.count({"workers": w, "slices": "cols"})
        total += len(points)
        print(f"{info.name:32s} {len(points):>12,} points  {cols:>10,} with slices=cols  {cpu:.2f} s CPU")
    print(f"{'total':32s} {total:>12,} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
