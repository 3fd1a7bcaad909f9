"""Kernel start/end in one profiled replay of the captured layer (CUPTI timestamps), gaps between
them, for several Emmy contenders (deploy, tuned): where the replay spends the time its kernels
do not. argv: MODEL TOKENS STORE CONTENDER[,CONTENDER...]"""
import sys
from pathlib import Path
sys.path.insert(0, "tools")
import torch
import bench
from emmy.measure.layer import build_emmy
from emmy.measure.timing import replayable, time_fn
from torch.profiler import ProfilerActivity, profile

model, tokens, store, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
traced, _, _ = bench.layer_case(tokens, model)
cache = Path("/tmp/emmy-home")
builds = bench.emmy_builds(names, [], {}, store)
for name in names:
    fn, _ = build_emmy(traced, "sm_90a", cache, builds[name])
    for overlap in (False, True):
        rep = replayable(lambda: fn(overlap=overlap))
        t = time_fn(rep, graph=False)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                rep()
            torch.cuda.synchronize()
        evs = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
        print(f"{name} overlap={overlap} replay {t*1e6:.1f} us; events of the last replay:")
        n = len(evs) // 3
        last = evs[-n:]
        prev = None
        for e in last:
            gap = "" if prev is None else f"gap {e.time_range.start - prev:7.2f}"
            print(f"  {e.time_range.start - last[0].time_range.start:9.2f} +{e.time_range.elapsed_us():8.2f} {gap}  {e.name[:60]}")
            prev = e.time_range.end
        print(f"  span {last[-1].time_range.end - last[0].time_range.start:.1f} us")
