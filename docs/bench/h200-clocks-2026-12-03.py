"""Do Emmy's kernels run slower when sustained than in a short burst (clocks under the power
limit)? Each contender's captured layer: a burst of 3 replays after 0.5 s idle, then 1000
replays sustained, with the SM clock and power sampled by nvidia-smi meanwhile."""
import subprocess, sys, time
from pathlib import Path
sys.path.insert(0, "tools")
import torch
import bench
from emmy.measure.layer import build_emmy, reference
from emmy.measure.timing import replayable

model, tokens = sys.argv[1], int(sys.argv[2])
traced, _, _ = bench.layer_case(tokens, model)
cache = Path("/tmp/emmy-home")
builds = bench.emmy_builds(["emmy"], [], {}, "")
fn, _ = build_emmy(traced, "sm_90a", cache, builds["emmy"])
ref = reference(traced)
compiled = torch.compile(ref.module)
with torch.no_grad():
    runs = {"emmy-serial": replayable(lambda: fn(overlap=False)), "emmy": replayable(lambda: fn(overlap=True)),
            "compile": replayable(lambda: compiled(*ref.args))}

def timed(r, n):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        r()
    e.record(); e.synchronize()
    return s.elapsed_time(e) * 1e3 / n

for key, r in runs.items():
    time.sleep(0.5)
    burst = timed(r, 3)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=subprocess.PIPE, text=True)
    time.sleep(0.2)
    sustained = [timed(r, 100) for _ in range(10)]
    smi.terminate(); out = smi.communicate()[0].split("\n")
    samples = [tuple(float(x) for x in l.split(",")) for l in out if l.strip()]
    busy = samples[4:]  # (after the 0.2 s idle)
    clocks = sorted(c for c, _ in busy); power = sorted(p for _, p in busy)
    print(f"{key:12s} burst {burst:8.1f} us  sustained {' '.join(f'{t:.0f}' for t in sustained)} us  "
          f"sm clock min/median {clocks[0]:.0f}/{clocks[len(clocks)//2]:.0f} MHz  power median/max {power[len(power)//2]:.0f}/{power[-1]:.0f} W", flush=True)
