"""Schedule snapshot: digests of the decisions and of the generated CUDA of model layers at several
token counts and targets, to check that restructuring the schedule changes no answer and no byte of
the kernels (issue 23, item 4).

Each case compiles one layer (or the running example) to the cuda stage and records
  - `decisions`: sha256 of every knob's `kernel.knob = value (tier) reason`, in IR order;
  - `cuda`: sha256 of the CUDA source (`emmy.backend.plan.cuda_source`).
The committed fixture is test/pytest/data/schedule_snapshot.json; test_schedule_snapshot.py
compares the CI cases (`CI_CASES`) against it. By hand:

    .venv/bin/python test/pytest/schedule_snapshot.py            # compare every case
    .venv/bin/python test/pytest/schedule_snapshot.py --write    # record every case
    .venv/bin/python test/pytest/schedule_snapshot.py --ci       # only the CI cases
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FIXTURE = HERE / "data" / "schedule_snapshot.json"
RUNNING_EXAMPLE = str(ROOT / "tools" / "running_example.py") + ":make"

MODELS = ("qwen3", "example", "llama-3.2-1b", "mistral-7b", "qwen2-0.5b")
TOKENS = (1, 32, 64, 128, 512, 3000, 4096)
TARGETS = ("sm_80", "sm_90", "sm_90a")


@dataclass(frozen=True)
class Case:
    model: str
    tokens: int
    target: str

    @property
    def name(self) -> str:
        return f"{self.model}@{self.tokens}/{self.target}"


ALL_CASES = tuple(Case(m, t, g) for m in MODELS for t in TOKENS for g in TARGETS)
# Few traces (each costs more than a compile), every target on each: tens of seconds in all.
CI_CASES = tuple(
    [Case("qwen3", t, g) for t in (1, 512, 3000) for g in TARGETS]
    + [Case("example", 32, g) for g in TARGETS]
    + [Case("llama-3.2-1b", 32, g) for g in ("sm_80", "sm_90a")]
)


def model_spec(model: str, workdir: Path) -> str:
    if model == "qwen3":
        return "Qwen/Qwen3-Embedding-0.6B"
    if model == "example":
        return RUNNING_EXAMPLE
    sys.path.insert(0, str(HERE))
    from tiny_models import write_real_sized_model

    return write_real_sized_model(workdir / model, model)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def decisions_text(module) -> str:
    from emmy.passes.decide_forks import decisions

    return "\n".join(f"{d.kernel}.{d.knob} = {d.value} ({d.tier}) {d.reason}" for d in decisions(module))


def run_cases(cases, workdir: Path, keep_text: bool = False) -> dict[str, dict[str, str]]:
    """Case name -> {"decisions": digest, "cuda": digest} (plus the texts when `keep_text`)."""
    from emmy.backend.plan import cuda_source
    from emmy.driver import CompileOptions, compile_traced, trace

    out: dict[str, dict[str, str]] = {}
    traces: dict[tuple[str, int], object] = {}
    for case in cases:
        key = (case.model, case.tokens)
        options = CompileOptions(model=model_spec(case.model, workdir), layer=0, tokens=case.tokens,
                                 target=case.target)
        if key not in traces:
            traces = {key: trace(options)}  # one trace alive at a time
        seen: dict[str, str] = {}

        def hook(name: str, module, seen=seen) -> None:
            if name == "decide-forks":
                seen["decisions"] = decisions_text(module)

        result = compile_traced(traces[key], options, hook)
        source = cuda_source(result.module)
        entry = {"decisions": digest(seen["decisions"]), "cuda": digest(source)}
        if keep_text:
            entry["decisions_text"], entry["cuda_text"] = seen["decisions"], source
        out[case.name] = entry
    return out


def load_fixture() -> dict[str, dict[str, str]]:
    return json.loads(FIXTURE.read_text())


def main(argv: list[str]) -> int:
    cases = CI_CASES if "--ci" in argv else ALL_CASES
    with tempfile.TemporaryDirectory() as tmp:
        got = run_cases(cases, Path(tmp))
    if "--write" in argv:
        old = load_fixture() if FIXTURE.exists() else {}
        old.update(got)
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(dict(sorted(old.items())), indent=1) + "\n")
        print(f"wrote {len(got)} cases to {FIXTURE}")
        return 0
    want = load_fixture()
    bad = [(n, want.get(n), e) for n, e in got.items() if want.get(n) != e]
    for name, w, g in bad:
        print(f"{name}: recorded {w}, now {g}")
    print(f"{len(got) - len(bad)}/{len(got)} cases match")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
