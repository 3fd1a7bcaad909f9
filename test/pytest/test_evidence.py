"""The deploy evidence hierarchy in decide-forks: golden and nearest tiers, skipped evidence
reported, tiers turned off, the prior's bound, and the same evidence giving the same CUDA.

Golden entries here are test data in temporary folders (made-up times); the tiers' behaviour
does not depend on the times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy.diagnostics import EmmyError
from emmy.evidence import TIERS, parse_tiers
from emmy.evidence.gather import distance
from emmy.golden.check import model_tasks

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "tools" / "running_example.py") + ":make"
TARGET = "sm_90a"


def compile_example(tokens: int, golden: str = "", evidence: str = "", stop_after: str = "tile"):
    from emmy.driver import CompileOptions, compile_model

    return compile_model(CompileOptions(model=EXAMPLE, layer=None, tokens=tokens, target=TARGET, golden=golden,
                                        evidence=evidence, stop_after=stop_after)).module


def kernels(module):
    from emmy.dialects.tile import KernelOp

    return {op.kernel_name: op for op in module.walk() if isinstance(op, KernelOp)}


def tiers(op) -> dict[str, str]:
    return {name: k.tier_name for name, k in op.knob_dict().items()}


def values(op) -> dict:
    return {name: k.value for name, k in op.knob_dict().items()}


def report(op) -> dict:
    return json.loads(op.attributes["emmy.evidence"].data)


@pytest.fixture(scope="module")
def task16():
    """The running example's contraction at 16 tokens: its task and a legal neighbour of its default."""
    from emmy.search.study import conditional_space

    tasks = model_tasks(ROOT)(EXAMPLE, None, 16, TARGET)
    task = next(t for t in tasks.values() if len(t.space) > 4)
    neighbour = conditional_space(task).neighbours(dict(task.default), 1)[0]
    return task, neighbour


def golden_file(folder: Path, entries: list[dict]) -> str:
    path = folder / TARGET / "example.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 1, "target": TARGET, "entries": entries}))
    return str(folder)


def entry(task, values, tokens=16, **changes) -> dict:
    e = {"key": task.key.id, "structure": task.key.structure, "shape": task.key.shape, "version": task.key.version,
         "model": EXAMPLE, "layer": None, "tokens": tokens, "kernel": task.kernel, "description": task.description,
         "values": dict(values), "time_s": 1.0e-5, "spread": 0.01, "card": "test data"}
    e.update(changes)
    return e


def test_parse_tiers():
    assert parse_tiers("") == TIERS
    assert parse_tiers("prior, pinned") == ("pinned", "prior")
    with pytest.raises(EmmyError, match="unknown evidence tier 'gold'"):
        parse_tiers("gold,rule")
    with pytest.raises(EmmyError, match="keep 'rule' or 'prior' on"):
        parse_tiers("pinned,golden")


def test_distance_is_symmetric_in_log2():
    assert distance({"m": 512}, {"m": 1024}) == distance({"m": 2048}, {"m": 4096}) == 1.0
    assert distance({"m": 16, "n": 8}, {"m": 16, "n": 8}) == 0.0


def test_golden_answers_exactly_its_key(tmp_path, task16):
    task, neighbour = task16
    folder = golden_file(tmp_path, [entry(task, neighbour)])
    op = kernels(compile_example(16, golden=folder))[task.kernel]
    assert values(op) == neighbour
    assert set(tiers(op).values()) == {"golden"}
    rep = report(op)
    assert rep["key"] == task.key.id
    assert rep["sources"]["golden"]["file"].endswith("example.json") and rep["sources"]["golden"]["entry"] == 0
    assert rep["misses"]["local"] == "no store"
    # turned off, the same folder answers nothing
    op = kernels(compile_example(16, golden=folder, evidence="pinned,rule"))[task.kernel]
    assert set(tiers(op).values()) == {"rule"} and report(op)["misses"]["golden"] == "turned off"


def test_same_evidence_same_cuda(tmp_path, task16):
    from emmy.backend.plan import cuda_source

    task, neighbour = task16
    folder = golden_file(tmp_path, [entry(task, neighbour)])
    a = cuda_source(compile_example(16, golden=folder, stop_after="cuda"))
    b = cuda_source(compile_example(16, golden=folder, stop_after="cuda"))
    plain = cuda_source(compile_example(16, stop_after="cuda"))
    assert a == b and a != plain


def test_nearest_borrows_another_shape(tmp_path, task16):
    task, neighbour = task16
    folder = golden_file(tmp_path, [entry(task, neighbour)])
    ops = kernels(compile_example(32, golden=folder))
    op = ops[task.kernel]
    rep = report(op)
    assert rep["key"] != task.key.id  # another shape: another key, the same structure
    if set(tiers(op).values()) == {"nearest"}:
        assert values(op) == neighbour
        assert rep["sources"]["nearest"]["shape"] == task.key.shape and rep["sources"]["nearest"]["distance"] == 1.0
    else:  # not legal at 32 tokens: skipped and said so
        assert any(s["tier"] == "nearest" and "illegal" in s["why"] for s in rep["skipped"])


def test_illegal_and_stale_evidence_is_skipped_and_reported(tmp_path, task16):
    task, neighbour = task16
    knob = next(k for k, v in task.space.items() if len(v) > 1)
    bad = {**neighbour, knob: "not a value"}
    stale = entry(task, neighbour, version=task.key.version - 1,
                  key=task.key.id.rsplit(":", 1)[0] + f":v{task.key.version - 1}")
    folder = golden_file(tmp_path, [entry(task, bad), stale])
    op = kernels(compile_example(16, golden=folder))[task.kernel]
    assert set(tiers(op).values()) == {"rule"}
    skipped = report(op)["skipped"]
    assert any(s["tier"] == "golden" and "illegal" in s["why"] and s["source"]["entry"] == 0 for s in skipped)
    assert any("stale: recorded under space version" in s["why"] for s in skipped)


def test_prior_alone_completes_and_is_bounded(task16):
    """With the prior as the only completer, every knob is answered, legally; where the prior
    keeps the rules' answer the answers are the rules' own."""
    from emmy.tuning.legality import check

    task, _ = task16
    op = kernels(compile_example(16, evidence="pinned,prior"))[task.kernel]
    assert all(k.value is not None for k in op.knob_dict().values())
    assert check(task.info(), values(op), task.target_object()) == []
    rep = report(op)
    assert rep["sources"]["prior"]["picked"] in ("prior", "anchor")
    if rep["sources"]["prior"]["picked"] == "anchor":
        assert values(op) == dict(task.default)


def test_cli_evidence_errors():
    from cli_helpers import assert_user_error, emmy

    assert_user_error(emmy("compile", "tools/running_example.py:make", "--evidence", "gold"),
                      "--evidence 'gold': unknown evidence tier 'gold'", "valid tiers: pinned")
    assert_user_error(emmy("compile", "tools/running_example.py:make", env={"EMMY_EVIDENCE": "pinned"}, cwd=ROOT),
                      "EMMY_EVIDENCE 'pinned': keep 'rule' or 'prior' on")


def test_a_broken_golden_file_is_named(tmp_path):
    from cli_helpers import assert_user_error, emmy

    bad = tmp_path / TARGET / "broken.json"
    bad.parent.mkdir()
    bad.write_text("{")
    assert_user_error(emmy("compile", "tools/running_example.py:make", "--target", TARGET,
                           env={"EMMY_GOLDEN": str(tmp_path)}, cwd=ROOT), f"{bad}:1:2: not JSON")


def test_a_cost_measurer_golden_entry_is_skipped(tmp_path, task16):
    task, neighbour = task16
    folder = golden_file(tmp_path, [entry(task, neighbour, card="cost model (no GPU)")])
    op = kernels(compile_example(16, golden=folder))[task.kernel]
    assert set(tiers(op).values()) == {"rule"}
    assert any(s["tier"] == "golden" and "not a measurement" in s["why"] for s in report(op)["skipped"])


def _fitted_prior(folder: Path) -> None:
    """A fitted prior for TARGET in `folder` (the default coefficients, a small spread): enough
    for the nearest tier's vet, which compares predictions only."""
    from emmy.prior.store import Prior, prior_path, write_prior

    write_prior(prior_path(folder, TARGET), Prior(TARGET, residuals={"contraction": {"spread": 0.05, "keys": 2, "trials": 9}}))


def test_the_prior_vets_a_borrowed_answer(tmp_path, task16):
    """A nearest candidate the fitted prior predicts slower here than the rules' answer is
    skipped, with both predicted times; one it does not is borrowed."""
    from emmy.evidence.prior import NearestVet
    from emmy.prior.features import Kernel
    from emmy.prior.model import score
    from emmy.prior.store import load_prior, prior_path
    from emmy.search.study import conditional_space
    from emmy.tuning.legality import check

    task, _ = task16
    there = model_tasks(ROOT)(EXAMPLE, None, 32, TARGET)[task.kernel]
    _fitted_prior(tmp_path)
    prior = load_prior(prior_path(tmp_path, TARGET), TARGET)
    kernel, info16 = Kernel(there.info(), there.target_object()), task.info()
    rules_s = score(kernel, dict(there.default), prior, penalized=False)
    slow = fast = None
    for n in conditional_space(there).neighbours(dict(there.default), 40):
        if check(info16, n, task.target_object()):
            continue  # the entry must be legal where it was measured
        t = score(kernel, n, prior, penalized=False)
        if t is not None and t > 1.5 * rules_s and slow is None:
            slow = n
        if t is not None and t <= rules_s and fast is None:
            fast = n
    assert slow is not None
    golden_file(tmp_path, [entry(task, slow)])
    op = kernels(compile_example(32, golden=str(tmp_path)))[task.kernel]
    assert "nearest" not in set(tiers(op).values())
    why = [s["why"] for s in report(op)["skipped"] if s["tier"] == "nearest"]
    assert why and why[0].startswith("the prior's physical model predicts the rules' answer faster on this shape (")
    # the vet itself: the rules' own answer is never vetted out
    vet = NearestVet(prior)
    from emmy.tuning.deciders import Problem

    problem = Problem(there.kernel, there.info(), there.target_object(), there.space, {})
    assert vet(problem, {}, dict(there.default)) == ""
    assert vet(problem, {}, slow) != ""
    if fast is not None:
        assert vet(problem, {}, fast) == ""
    # without a fitted prior (or with the prior turned off) nothing is vetted
    (tmp_path / TARGET / "prior.json").unlink()
    op = kernels(compile_example(32, golden=str(tmp_path)))[task.kernel]
    assert not any("prior predicts" in s["why"] for s in report(op)["skipped"])


def test_a_record_of_this_kernel_under_another_structure_is_reported_stale(tmp_path, task16):
    """A golden entry (or record) of the same kernel name and shape whose structure is another
    (its body or knob set changed since: a no-op knob taken out changes the structure) cannot
    match the key any more; it is reported, never used, and never silently dropped."""
    task, neighbour = task16
    old = entry(task, neighbour, structure="0" * 64, key="0" * 12 + task.key.id[12:])
    folder = golden_file(tmp_path, [old])
    op = kernels(compile_example(16, golden=folder))[task.kernel]
    assert set(tiers(op).values()) == {"rule"}
    (skipped,) = [s for s in report(op)["skipped"] if s["tier"] == "golden"]
    assert skipped["source"]["entry"] == 0
    assert skipped["why"].startswith(f"stale: recorded for '{task.kernel}' at this shape under another structure "
                                     f"(000000000000, this Emmy's is {task.key.structure[:12]})")
    # another kernel's entry of another structure is not this kernel's concern
    other = entry(task, neighbour, structure="0" * 64, key="0" * 12 + task.key.id[12:], kernel="another_kernel")
    op = kernels(compile_example(16, golden=golden_file(tmp_path, [other])))[task.kernel]
    assert "emmy.evidence" not in op.attributes  # the rules answered, with nothing to report
