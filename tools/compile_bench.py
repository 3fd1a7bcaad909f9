"""Compile-time benchmark: run `emmy compile` several times after a warm-up, report the wall time
(median, min, max) and the median time of each pass (from `--time-passes`).

    python tools/compile_bench.py                                  # one Qwen3 layer, 5 runs
    python tools/compile_bench.py --runs 7 -- Qwen/Qwen3-Embedding-0.6B --tokens 512
    python tools/compile_bench.py --json /tmp/bench.json -- tools/running_example.py:make --tokens 64
    python tools/compile_bench.py --emmy "python -m emmy.cli.main" --runs 3

The arguments after `--` are those of `emmy compile` (default: `Qwen/Qwen3-Embedding-0.6B --layer 0`).
Each run is a fresh process, so the wall time includes Python's start and the imports, as a user
sees it; the CPU time (user + system) of that process is reported too: on a busy machine it is
closer than the wall time to what an idle machine shows. The machine's load average (before the first and after the last run) is printed with the
figures: on a shared machine, measure with it quiet and compare medians. Nothing is asserted: this
tool reports, it does not judge.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_ARGS = ["Qwen/Qwen3-Embedding-0.6B", "--layer", "0"]
_TIMING = re.compile(r"^\s*([0-9.]+) ms  (.+)$")


def default_emmy() -> list[str]:
    """The `emmy` script beside this Python (the project's venv), else `python -m emmy.cli.main`."""
    script = Path(sys.executable).with_name("emmy")
    return [str(script)] if script.exists() else [sys.executable, "-m", "emmy.cli.main"]


def parse_timings(stderr: str) -> dict[str, float]:
    """The `--time-passes` lines of `emmy compile`'s stderr, as {pass name: seconds} (with the
    total under "total"). A pass that runs several times (a whole model's parts) is summed."""
    out: dict[str, float] = {}
    for line in stderr.splitlines():
        m = _TIMING.match(line)
        if m:
            name = m.group(2).strip()
            out[name] = out.get(name, 0.0) + float(m.group(1)) / 1000
    return out


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(emmy: list[str], args: list[str]) -> tuple[float, float, dict[str, float]]:
    """One compile in a fresh process: (wall seconds, CPU seconds, per-pass seconds)."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run([*emmy, "compile", *args, "--time-passes"], capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines() or ["(no output)"]
        raise SystemExit(
            f"compile_bench: `{shlex.join([*emmy, 'compile', *args])}` failed (exit {proc.returncode}):\n"
            + "\n".join("  " + line for line in msg[:8])
        )
    return wall, cpu, parse_timings(proc.stderr)


def summarize(
    walls: list[float], cpus: list[float], passes: list[dict[str, float]], load: tuple[float, float]
) -> dict:
    names: list[str] = []
    for p in passes:
        names += [n for n in p if n not in names]
    return {
        "runs": len(walls),
        "wall_s": {"median": statistics.median(walls), "min": min(walls), "max": max(walls), "all": walls},
        # user + system CPU of the compile process: what the wall time would be on an idle machine
        # (the compile runs on one core), less sensitive than the wall to other work on the cores
        "cpu_s": {"median": statistics.median(cpus), "min": min(cpus), "max": max(cpus), "all": cpus},
        "passes_s": {n: statistics.median(p.get(n, 0.0) for p in passes) for n in names},
        "load_average_1min": {"before": load[0], "after": load[1]},
    }


def format_table(summary: dict, title: str) -> str:
    w, c = summary["wall_s"], summary["cpu_s"]
    lines = [
        title,
        f"wall over {summary['runs']} runs: median {w['median']:.3f} s, min {w['min']:.3f} s, max {w['max']:.3f} s",
        f"CPU (user + sys): median {c['median']:.3f} s, min {c['min']:.3f} s, max {c['max']:.3f} s",
        f"load average (1 min): {summary['load_average_1min']['before']:.2f} before, "
        f"{summary['load_average_1min']['after']:.2f} after",
        "median per pass (--time-passes):",
    ]
    lines += [f"  {t * 1000:8.1f} ms  {n}" for n, t in summary["passes_s"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="compile_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    ap.add_argument("--emmy", default=None, help="the command that is `emmy` (default: the venv's script)")
    ap.add_argument("--json", default=None, help="also write the figures to this file as JSON")
    ap.add_argument("compile_args", nargs="*", help="arguments of `emmy compile` (after --)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        ap.error("--runs must be at least 1 and --warmup at least 0")
    emmy = shlex.split(args.emmy) if args.emmy else default_emmy()
    compile_args = args.compile_args or DEFAULT_ARGS
    for _ in range(args.warmup):
        run_once(emmy, compile_args)
    before = os.getloadavg()[0]
    walls, cpus, passes = [], [], []
    for _ in range(args.runs):
        wall, cpu, per_pass = run_once(emmy, compile_args)
        walls.append(wall)
        cpus.append(cpu)
        passes.append(per_pass)
    summary = summarize(walls, cpus, passes, (before, os.getloadavg()[0]))
    summary["command"] = [*emmy, "compile", *compile_args, "--time-passes"]
    print(format_table(summary, "emmy compile " + shlex.join(compile_args)))
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set, so every run compiles Emmy's sources to bytecode "
              "again (about 0.3 s of each wall time); a user's runs reuse the cached bytecode")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
