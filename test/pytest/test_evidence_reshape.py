"""The nearest tier reshapes a borrowed tile that leaves this shape's last wave part empty
(emmy.evidence.reshape): the golden 128 x 256 tiles of the o and down projections at 4096
tokens become 256 x 96 at 3000 (one whole wave on 132 SMs), and --explain says so; a tile
narrowed to half its columns gets twice the k step (emmy.prior.waves.deeper_step)."""

from __future__ import annotations

import json

import pytest

from emmy.evidence.reshape import RESHAPE_MARGIN, Reshape, describe
from emmy.prior.features import Kernel
from emmy.prior.model import score
from emmy.prior.store import load_prior, prior_path
from emmy.prior.waves import SLACK, deeper_step, step_work, terms
from emmy.tuning.deciders import Answer, Problem
from emmy.tuning.legality import check
from cli_helpers import emmy
from test_search_waves import MODEL, TARGET, _task

GOLDEN_4096 = {"block_m": 128, "block_n": 256, "warps": 8}


def _o_borrowing(tokens: int, borrowed: dict):
    """The o projection's problem at `tokens` and its default with `borrowed` values over it."""
    from emmy.targets import get_target
    from emmy.tuning.knobs import knob_space_for

    task = _task(tokens, "o_proj_residual")
    target = get_target(TARGET)
    info = task.info()
    return Problem("o_proj_residual", info, target, knob_space_for(info, target), {}), {**task.default, **borrowed}


@pytest.fixture(scope="module")
def o_3000():
    return _o_borrowing(3000, GOLDEN_4096)


@pytest.fixture(scope="module")
def prior():
    from pathlib import Path

    return load_prior(prior_path(Path(__file__).resolve().parents[2] / "golden", TARGET), TARGET)


def test_a_tile_that_leaves_a_wave_part_empty_is_reshaped_to_a_legal_one_predicted_faster(o_3000, prior):
    problem, borrowed = o_3000
    kernel = Kernel(problem.info, problem.target)
    assert terms(kernel, borrowed)[0] > SLACK  # 96 tiles on 132 SMs
    values, detail = Reshape(prior)(problem, {}, borrowed)
    assert (values["block_m"], values["block_n"]) == (256, 96)
    assert check(problem.info, values, problem.target) == []
    assert {k: v for k, v in values.items() if k not in ("block_m", "block_n", "warps")} == \
        {k: v for k, v in borrowed.items() if k not in ("block_m", "block_n", "warps")}
    assert terms(kernel, values)[0] < terms(kernel, borrowed)[0]
    assert detail["predicted_s"] * RESHAPE_MARGIN <= detail["borrowed_predicted_s"]
    assert detail["predicted_s"] == score(kernel, values, prior.coeffs, penalized=False)
    assert detail["from"] == {**GOLDEN_4096, "block_k": borrowed["block_k"]} and json.dumps(detail)
    assert detail["to"]["block_k"] == borrowed["block_k"]  # 96 columns: no exact deeper step


def test_a_pinned_tile_or_one_that_fills_its_waves_is_kept(o_3000, prior):
    problem, borrowed = o_3000
    pinned = {"block_n": Answer(256, "pinned", "pinned")}
    assert Reshape(prior)(problem, pinned, borrowed) is None
    filled = {**borrowed, "block_m": 256, "block_n": 96, "warps": 16}  # 132 tiles: one whole wave
    assert Reshape(prior)(problem, {}, filled) is None
    assert Reshape(prior)(problem, {}, {**borrowed, "split_k": 2}) is None  # split-k spreads its own waves


GOLDEN_2048 = {"block_m": 128, "block_n": 128, "block_k": 64, "warps": 8, "workers": "wgmma_ws", "copy": "tma",
               "stages": 4, "schedule": "grid", "split_k": 1}


@pytest.fixture(scope="module")
def o_1024():
    return _o_borrowing(1024, GOLDEN_2048)


def test_a_narrower_tile_gets_the_deeper_k_step_that_keeps_a_warpgroups_work_per_step(o_1024, prior):
    problem, borrowed = o_1024
    values, detail = Reshape(prior)(problem, {}, borrowed)
    assert (values["block_m"], values["block_n"], values["warps"]) == (128, 64, 8)  # 128 blocks, not 64
    assert values["block_k"] == 128 and step_work(values) == step_work(borrowed) == 64 * 128 * 64
    assert check(problem.info, values, problem.target) == []
    assert (detail["from"]["block_k"], detail["to"]["block_k"]) == (64, 128)
    assert "k steps 128 deep instead of 64" in describe(detail)
    pinned = {"block_k": Answer(64, "pinned", "pinned")}
    values, detail = Reshape(prior)(problem, pinned, borrowed)
    assert (values["block_n"], values["block_k"]) == (64, 64) and "k steps" not in describe(detail)


def test_deeper_step_only_scales_exactly_within_the_domain():
    domains = {"block_k": (16, 32, 64, 128)}
    wide = {"workers": "wgmma_ws", "warps": 8, "block_m": 128, "block_n": 128, "block_k": 64}
    assert deeper_step(domains, wide, {**wide, "block_n": 64}) == 128
    assert deeper_step(domains, wide, {**wide, "block_n": 96}) is None  # 128 / 96 is no whole factor
    assert deeper_step(domains, wide, {**wide, "block_n": 32}) is None  # 256 is outside the domain
    assert deeper_step(domains, wide, {**wide, "block_n": 256}) is None  # wider: the step is not smaller
    assert deeper_step(domains, wide, {**wide, "block_m": 256, "warps": 16, "block_n": 64}) == 128
    assert step_work({**wide, "workers": "mma_sync"}) is None


def test_explain_says_the_borrowed_tile_was_reshaped():
    proc = emmy("compile", MODEL, "--layer", "0", "--tokens", "3000", "--target", TARGET, "--explain")
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("o_proj_residual ")]
    block_m = next(r for r in rows if r.split()[1] == "block_m")
    assert block_m.split()[2:4] == ["256", "nearest"]
    assert "shape m=4096 n=1024 k=2048, reshaped to 256 x 96" in block_m
    assert "reshaped from 128 x 256 (8 warps) to 256 x 96 (16 warps) to fill the waves here" in block_m


def test_the_prior_tier_reshapes_the_rules_tile_too(o_3000, prior):
    """Without records (the prior and the rules alone) the rules' own 128 x 256 tile at 3000
    tokens is reshaped like a borrowed one: tier prior, the reason and the source say so, and the
    neighbourhood is ranked around the reshaped answer."""
    from emmy.evidence.prior import PriorDecider
    from emmy.prior.choose import rules_anchor

    problem, _ = o_3000
    rules = rules_anchor(problem.info, problem.target, problem.space)
    assert (rules["block_m"], rules["block_n"], rules["warps"]) == (128, 256, 8)
    decider = PriorDecider(prior)
    answers = decider.answer(problem, {})
    assert (answers["block_m"].value, answers["block_n"].value, answers["warps"].value) == (256, 96, 16)
    assert answers["block_m"].tier == "prior"
    assert "the rules' answer reshaped from 128 x 256 (8 warps) to 256 x 96 (16 warps)" in answers["block_m"].reason
    source = decider.source("o_proj_residual")
    assert source["reshaped"]["to"]["block_m"] == 256 and json.dumps(source)
    # a pinned tile is kept: nothing to reshape, and the rules' answer stands (no answer)
    pinned = {"block_n": Answer(256, "pinned", "--knob")}
    assert decider.answer(problem, pinned).get("block_m") is None


def test_explain_says_the_rules_tile_was_reshaped_by_the_prior():
    proc = emmy("compile", MODEL, "--layer", "0", "--tokens", "3000", "--target", TARGET, "--evidence",
                "pinned,prior,rule", "--explain")
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("down_proj_residual ")]
    block_n = next(r for r in rows if r.split()[1] == "block_n")
    assert block_n.split()[2:4] == ["96", "prior"]
    assert "the rules' answer reshaped from 128 x 256 (8 warps) to 256 x 96 (16 warps) to fill the waves" in block_n


def test_tile_heights_the_fit_has_not_seen_are_left_to_the_rules_and_tuning(o_3000):
    """192-row tiles (three consumer warpgroups) came after the prior's fit: the prior tier's
    neighbourhood never moves a tile there unless its anchor (the rules' answer) has that height,
    and the reshape's shapes leave them out; a tuning study's wave fillers still reach them."""
    from emmy.prior.choose import neighbourhood
    from emmy.prior.waves import UNFITTED_BLOCK_M, shapes

    problem, borrowed = o_3000
    narrow = {**borrowed, "block_n": 96}  # (192 rows, 12 warps) is a legal pair move from here
    around = neighbourhood(problem.info, problem.target, problem.space, narrow)
    assert around and all(c["block_m"] not in UNFITTED_BLOCK_M for c in around)
    tall = {**narrow, "block_m": 192, "warps": 12}
    assert not check(problem.info, tall, problem.target)
    assert any(c["block_m"] == 192 for c in neighbourhood(problem.info, problem.target, problem.space, tall))
    assert all(bm != 192 for bm, _, _ in shapes(problem.space, borrowed, UNFITTED_BLOCK_M))
    assert (192, 96, [12]) in list(shapes(problem.space, borrowed))


def test_evaluate_judges_the_anchor_the_prior_tier_deploys(o_3000, prior):
    """`emmy prior evaluate` bounds its pick by the anchor the prior tier deploys: the rules'
    128 x 256 tile at 3000 tokens reshaped to 256 x 96 (one whole wave), measured here faster;
    an unfitted prior (which never reshapes) is judged against the rules' tile as they give it."""
    from emmy.prior.data import KeyData, Sample
    from emmy.prior.evaluate import judge, prior_tier_anchor
    from emmy.prior.store import Prior

    problem, _ = o_3000
    kernel = Kernel(problem.info, problem.target)
    rules = prior_tier_anchor(kernel, problem.space, Prior(TARGET))
    filled = prior_tier_anchor(kernel, problem.space, prior)
    assert (rules["block_m"], rules["block_n"]) == (128, 256) and (filled["block_m"], filled["block_n"]) == (256, 96)
    assert filled == _prior_tier_values(problem, prior)  # the shipped prior keeps the reshaped anchor
    kd = KeyData("k", "contraction", kernel, problem.space)
    kd.samples = [Sample("k", "s", "m", "contraction", "o_proj_residual", v, t, {})
                  for v, t in ((rules, 32.9e-6), (filled, 25.3e-6))]
    row = judge(kd, prior, "shape")
    assert row.picked == "anchor" and row.regret == pytest.approx(1.0)
    row = judge(kd, Prior(TARGET), "shape")
    assert row.picked == "anchor" and row.regret == pytest.approx(32.9 / 25.3)


def _prior_tier_values(problem, prior) -> dict:
    """The values the prior tier answers for `problem` (every knob), as a compile would."""
    from emmy.evidence.prior import PriorDecider

    answers = PriorDecider(prior, completes=True).answer(problem, {})
    return {k: a.value for k, a in answers.items()}


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_study_measures_the_anchor_the_prior_tier_bounds_by(prior, tmp_path):
    """Where the fitted prior reshapes the rules' tile (the o projection at 3000 tokens: 128 x
    256 to 256 x 96), a study measures that anchor beside today's default and the rules' answer
    (`enqueued` "anchor"), so `emmy prior evaluate` judges the prior tier against a measured
    anchor; an unfitted prior reshapes nothing."""
    import optuna

    from emmy.prior.store import Prior
    from emmy.records import default_url, open_store
    from emmy.search.cost import CostMeasurer
    from emmy.search.study import Budget, conditional_space, enqueue_todays_answers, measured, open_study, run_trials

    task = _task(3000, "o_proj_residual")
    assert (task.default["block_m"], task.default["block_n"]) == (128, 256)  # no golden folder: the rules' answer
    store = open_store(default_url(tmp_path))
    space = conditional_space(task)
    study = open_study(store, task, space=space)  # its first trials (the wave fillers among them) never ran:
    for _ in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)  # a study made before, continued
    assert enqueue_todays_answers(study, space, task, prior=Prior(TARGET)) == ["default"]
    assert enqueue_todays_answers(study, space, task, prior=prior) == ["anchor"]
    assert enqueue_todays_answers(study, space, task, prior=prior) == []  # waiting now: once
    run_trials(store, task, CostMeasurer(), Budget(trials=2), prior=prior)  # the default, then the anchor
    (hit,) = [t for t in measured(store.load(task.key_id)) if t.user_attrs.get("enqueued") == "anchor"]
    values = hit.user_attrs["values"]
    assert (values["block_m"], values["block_n"], values["warps"]) == (256, 96, 16)


def test_tile_widths_the_fit_has_not_seen_are_left_to_the_rules_and_tuning(prior):
    """160-column tiles came after the prior's fit (emmy.prior.waves.UNFITTED_VALUES): the golden
    128 x 128 o tile of 2048 tokens, borrowed at 1100, was once reshaped to 64 x 160 (predicted
    17.68 us against 21.03; an H100 ran it 17.6 against 15.5 for 128 x 96). Neither the reshape
    nor the prior tier's neighbourhood moves a tile to 160 columns unless its anchor has them."""
    from emmy.prior.choose import neighbourhood
    from emmy.prior.waves import UNFITTED_VALUES

    assert ("block_n", 160) in UNFITTED_VALUES
    problem, borrowed = _o_borrowing(1100, {"block_m": 128, "block_n": 128, "warps": 8})
    assert 160 in problem.space["block_n"]
    reshaped = Reshape(prior)(problem, {}, borrowed)
    assert reshaped is not None  # it still reshapes, to a width the fit has seen
    assert reshaped[0]["block_n"] != 160
    around = neighbourhood(problem.info, problem.target, problem.space, borrowed)
    assert around and all(c["block_n"] != 160 for c in around)
    wide = {**borrowed, "block_n": 160}
    assert any(c["block_n"] == 160 for c in neighbourhood(problem.info, problem.target, problem.space, wide))
