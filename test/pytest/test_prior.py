"""The prior (emmy.prior): its features on a known plan, its ranking, the bound that keeps its
pick from ever being predicted slower than the rules' answer, the fit (on times the model itself
generates, with noise and outliers: a test of the fitting code, not a measurement), the regret
arithmetic of `evaluate`, and the prior file's checks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from emmy.diagnostics import EmmyError
from emmy.driver import CompileOptions, compile_model
from emmy.prior.choose import choose, neighbourhood, prior_decision
from emmy.prior.data import KeyData, Sample
from emmy.prior.evaluate import (
    evaluate, judge, measured_times, model_groups, newest_studies, reachable, summarize, summary,
)
from emmy.prior.features import Kernel, features
from emmy.prior.fit import fit, fit_coeffs, residuals, robust_spread, within_key
from emmy.prior.model import DEFAULTS, predict, rank, with_target
from emmy.prior.store import (
    DEFAULT_SPREAD, ENVELOPE_PENALTY, MIN_MARGIN, Prior, load_prior, prior_from, prior_json, prior_path, write_prior,
)
from emmy.search.task import tasks_in
from emmy.targets import get_target
from emmy.tuning.knobs import knob_space_for
from emmy.tuning.legality import check
from emmy.tuning.rules import decide

TARGET = get_target("sm_90a")
FACTORY = '''
import torch
from torch import nn

def make(tokens: int = 512):
    torch.manual_seed(0)
    lin = nn.Linear(1024, 4096, bias=False).to(torch.bfloat16)
    return lin, (torch.randn(1, tokens, 1024, dtype=torch.bfloat16),)
'''

SENSIBLE = {"block_m": 128, "block_n": 128, "block_k": 64, "split_k": 1, "combine": "kernel", "split_tail": 1,
            "stages": 4, "workers": "wgmma_ws", "warps": 8, "schedule": "grid", "copy": "tma", "cluster": 1,
            "group_m": 1, "epilogue": "together", "slices": "rows", "vector": 8, "fusion": "fused"}


@pytest.fixture(scope="module")
def proj(tmp_path_factory):
    """The task of x[512, 1024] @ W[4096, 1024]^T: one contraction m=512 n=4096 k=1024."""
    path = tmp_path_factory.mktemp("model") / "proj.py"
    path.write_text(FACTORY)
    result = compile_model(CompileOptions(model=f"{path}:make", tokens=512, target="sm_90a", stop_after="tile"))
    (task,) = tasks_in(result.module, TARGET, 512)
    return task


NORMED = '''
import torch
from torch import nn

class Normed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1024, 4096, bias=False).to(torch.bfloat16)

    def forward(self, x):
        x = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)
        return self.lin(x)

def make(tokens: int = 512):
    torch.manual_seed(0)
    return Normed(), (torch.randn(1, tokens, 1024, dtype=torch.bfloat16),)
'''


@pytest.fixture(scope="module")
def normed_info(tmp_path_factory):
    """An RMS-normed x[512, 1024] @ W[4096, 1024]^T: a contraction with row statistics, so a
    `fusion` knob (the plain projection has none)."""
    path = tmp_path_factory.mktemp("model") / "normed.py"
    path.write_text(NORMED)
    result = compile_model(CompileOptions(model=f"{path}:make", tokens=512, target="sm_90a", stop_after="tile"))
    (info,) = [t.info() for t in tasks_in(result.module, TARGET, 512) if t.info().kind == "contraction"]
    assert "fusion" in knob_space_for(info, TARGET)
    return info


@pytest.fixture(scope="module")
def info(proj):
    return proj.info()


def _values(info, **changes):
    v = {**SENSIBLE, **changes}
    v = {k: x for k, x in v.items() if k in knob_space_for(info, TARGET)}
    assert not check(info, v, TARGET), check(info, v, TARGET)
    return v


# -- features ------------------------------------------------------------------------------------


def test_features_of_a_512x4096x1024_contraction_by_hand(info):
    assert (info.M, info.gemm_n_nc, info.K) == (512, (4096, 1), 1024)
    f = features(info, _values(info), TARGET)
    assert f["flops"] == 2 * 512 * 4096 * 1024
    assert f["unique_bytes"] == (512 * 1024 + 4096 * 1024 + 512 * 4096) * 2  # x, W, out in bf16
    # A is read by each of the 32 columns of tiles, B by each of the 4 rows: all but once again
    assert f["reread_bytes"] == (31 * 512 * 1024 + 3 * 4096 * 1024) * 2
    assert f["l2_fraction"] == 1.0  # 13 MB fit in the H200's 60 MB of L2
    assert (f["blocks"], f["waves"], f["launches"]) == (128, 1, 1)
    assert f["busy"] == pytest.approx(128 / 132) and f["quant"] == pytest.approx(132 / 128)
    # the plan's layout: 128 KiB of operand tiles, mbarriers and wgmma's alignment, of 228 a block
    assert f["smem_bytes"] == 4 * (128 + 128) * 64 * 2 + 2 * 4 * 8 + 1024 and f["occupancy"] == 1
    assert (f["steps"], f["rounds"], f["serial_steps"]) == (16, 1, 16)
    assert f["tensor"] == 1 and f["peak_flops"] == TARGET.tensor_flops and f["intensity"] == 64
    assert f["workspace_bytes"] == 0 and f["recompute_bytes"] == 0 and f["recompute_flops"] == 0


def test_split_k_adds_workspace_and_a_combine_launch(info):
    f = features(info, _values(info, split_k=2, block_n=256), TARGET)
    assert f["workspace_bytes"] == 2 * 2 * 512 * 4096 * 4  # fp32 parts written and read back
    assert f["launches"] == 2 and f["steps"] == 8
    assert f["flops"] == 2 * 512 * 4096 * 1024


def test_a_last_block_waits_for_its_tickets(info):
    """combine = last_block: the last block of a tile reads the other parts back alone and, before
    that, waits for their flags (a fixed cost, `ticket_s`); a combine kernel has neither."""
    last = features(info, _values(info, split_k=2, combine="last_block"), TARGET)
    kernel = features(info, _values(info, split_k=2), TARGET)
    assert (last["tickets"], kernel["tickets"]) == (1, 0) and kernel["ticket_bytes"] == 0
    f = with_target(last, TARGET)
    assert predict(f, {**DEFAULTS, "ticket_s": 1e-5}) - predict(f, {**DEFAULTS, "ticket_s": 1e-6}) == pytest.approx(9e-6)


def test_a_persistent_block_runs_its_share_of_the_tiles_one_after_another(info):
    """256 tiles of 128 x 64 on 132 SMs: the grid launches 256 blocks, persistent 132 that loop;
    the busiest persistent block runs 2 tiles in turn (its rounds and waves, twice the k-steps),
    and the quantization is 2 tiles on the busiest SM over 256/132 on average, as the grid's
    (before, a persistent launch of 132 blocks counted as one round with no quantization)."""
    grid = features(info, _values(info, block_n=64), TARGET)
    persistent = features(info, _values(info, block_n=64, schedule="persistent"), TARGET)
    assert (grid["blocks"], persistent["blocks"]) == (256, 132)
    assert (persistent["rounds"], persistent["waves"], persistent["serial_steps"]) == (2, 2, 2 * 16)
    assert persistent["quant"] == pytest.approx(2 * 132 / 256) == grid["quant"]
    assert persistent["busy"] == 1
    fewer = features(info, _values(info, schedule="persistent"), TARGET)  # 128 tiles: one each
    assert (fewer["blocks"], fewer["rounds"], fewer["quant"]) == (128, 1, pytest.approx(132 / 128))
    t = {p: predict(with_target(f, TARGET), DEFAULTS) for p, f in (("two", persistent), ("one", fewer))}
    assert t["two"] > t["one"]  # the same work in 64-column tiles: two rounds of them cost more


def test_a_stream_k_block_runs_its_equal_share_of_the_k_steps(info):
    """stream_k over the same 256 tiles of 16 k-steps: no whole wave but the last, so 132 blocks
    share 4096 k-steps, 32 for the busiest (ceil(4096 / 132)), over 2 tiles' worth."""
    f = features(info, _values(info, block_n=64, schedule="stream_k"), TARGET)
    assert f["blocks"] == 132 and (f["serial_steps"], f["rounds"]) == (32, 2)
    assert f["quant"] == pytest.approx(32 * 132 / 4096)


def test_mma_sync_on_sm_90a_has_half_the_wgmma_rate_and_thread_the_fma_rate(info):
    mma = features(info, _values(info, workers="mma_sync", warps=4, copy="cp_async"), TARGET)
    assert mma["peak_flops"] == TARGET.tensor_flops / 2
    thread = features(info, _values(info, workers="thread", block_m=64, block_n=64, warps=4, copy="cp_async",
                                     block_k=32, stages=2), TARGET)
    assert thread["tensor"] == 0 and thread["peak_flops"] == TARGET.fp32_flops


def test_spills_come_from_build_facts(info):
    assert features(info, _values(info), TARGET, {"spill_bytes": 96})["spill_bytes"] == 96
    assert features(info, _values(info), TARGET, {"spill_bytes": True})["spill_bytes"] == 0


# -- ranking -------------------------------------------------------------------------------------


def test_a_tile_far_too_small_ranks_below_a_sensible_one(info):
    tiny = _values(info, workers="mma_sync", block_m=16, block_n=16, block_k=16, warps=1, stages=2,
                   copy="cp_async")
    sensible = _values(info)
    ranked = rank(info, [tiny, sensible], TARGET)
    assert [v for v, _ in ranked] == [sensible, tiny]
    assert ranked[1][1] > 3 * ranked[0][1]


def test_rank_leaves_out_points_the_plan_cannot_build(info):
    bad = {**_values(info), "block_k": 24}  # not a block_k any plan builds
    assert [v for v, _ in rank(info, [bad, _values(info)], TARGET)] == [_values(info)]


def test_predict_takes_arrays(info):
    f = with_target(features(info, _values(info), TARGET), TARGET)
    one = predict(f, DEFAULTS)
    many = predict({k: np.array([v, v]) for k, v in f.items()}, DEFAULTS)
    assert many.tolist() == pytest.approx([one, one])


# -- the bound -----------------------------------------------------------------------------------


def _anchor(info):
    choices = decide(info, TARGET, knob_space_for(info, TARGET))
    return {k: c.value for k, c in choices.items()}


def test_the_pick_is_never_predicted_slower_than_the_anchor(info):
    """Property: over random coefficient sets and spreads, the prior's pick is the anchor or is
    predicted faster than it by at least the margin."""
    from emmy.prior.model import score

    rng = np.random.default_rng(0)
    anchor = _anchor(info)
    candidates = neighbourhood(info, TARGET, knob_space_for(info, TARGET), anchor)
    assert len(candidates) > 50
    kernel = Kernel(info, TARGET)
    for _ in range(6):
        coeffs = {k: v * math.exp(rng.uniform(-2, 2)) for k, v in DEFAULTS.items()}
        spread = float(rng.uniform(0.0, 0.5))
        prior = Prior("sm_90a", coeffs, {"contraction": {"spread": spread}})
        c = choose(info, TARGET, candidates, anchor, prior)
        anchor_s = score(kernel, anchor, prior, penalized=False)
        assert c.anchor_s == anchor_s
        if c.picked == "prior":
            assert c.values != anchor
            assert c.predicted_s * c.margin <= anchor_s and c.margin >= prior.margin("contraction")
            assert score(kernel, c.values, prior) == c.predicted_s
        else:
            assert c.values == anchor


def _synthetic(info, key: str, coeffs, points, rng, noise=0.03, outliers=0):
    """Times the model itself predicts under `coeffs`, with lognormal noise (test data, not a
    measurement); the first `outliers` times are multiplied by 3."""
    kernel = Kernel(info, TARGET)
    out = []
    for i, v in enumerate(points):
        f = with_target(kernel.features(v), TARGET)
        t = predict(f, coeffs) * math.exp(rng.normal(0, noise)) * (3.0 if i < outliers else 1.0)
        out.append(Sample(key, "s", "m", info.kind, "linear", v, t, f))
    return out


def test_an_adversarial_coefficient_set_falls_back_to_the_anchor(info):
    rng = np.random.default_rng(1)
    anchor = _anchor(info)
    candidates = neighbourhood(info, TARGET, knob_space_for(info, TARGET), anchor)
    truth = _synthetic(info, "k", DEFAULTS, candidates[:80], rng)
    # coefficients that rank tiny, starved, unpipelined tiles first
    adversarial = {**DEFAULTS, "knee": 1e-3, "step_s": 1e-12, "round_s": 1e-12, "launch_s": 1e-9,
                   "unstaged_cost": 1e-3, "compute_eff": 1e-3, "dram_eff": 50.0, "l2_eff": 50.0}
    confident = Prior("sm_90a", adversarial, {"contraction": {"spread": 0.0}})
    assert choose(info, TARGET, candidates, anchor, confident).picked == "prior"  # a lying file would pick
    spread = robust_spread(within_key(truth, residuals(truth, adversarial)))
    honest = Prior("sm_90a", adversarial, {"contraction": {"spread": spread}})
    c = choose(info, TARGET, candidates, anchor, honest)
    assert c.picked == "anchor" and c.values == anchor
    assert "margin" in c.reason


def test_unfitted_defaults_need_a_large_gain(info):
    prior = Prior("sm_90a")
    assert not prior.fitted and prior.margin("contraction") == pytest.approx(math.exp(2 * DEFAULT_SPREAD))
    assert Prior("sm_90a", residuals={"contraction": {"spread": 0.0}}).margin("contraction") == MIN_MARGIN
    c = prior_decision(info, TARGET, knob_space_for(info, TARGET), prior)
    assert c.picked == "anchor" and c.runner_up is not None and c.candidates > 50


def test_candidates_outside_the_fitted_envelope_are_penalized(info):
    inside = _values(info)
    f = features(info, inside, TARGET)
    env = {"tile_area": [math.log1p(f["tile_area"])] * 2, "workers": ["wgmma_ws"]}
    prior = Prior("sm_90a", residuals={"contraction": {"spread": 0.05}}, envelope={"contraction": env})
    assert prior.penalty("contraction", f, inside) == 1.0
    small = _values(info, block_n=64)
    g = features(info, small, TARGET)
    assert prior.distance("contraction", g, small) == pytest.approx(math.log1p(f["tile_area"]) - math.log1p(g["tile_area"]))
    assert prior.penalty("contraction", g, {**small, "workers": "wgmma"}) > prior.penalty("contraction", g, small) > 1.0
    d = prior.distance("contraction", g, small)  # an anchor as far out: only the distance past it counts
    assert prior.penalty("contraction", g, small, base=d) == 1.0
    assert prior.penalty("contraction", g, small, base=d / 2) == pytest.approx(math.exp(ENVELOPE_PENALTY * d / 2))


# -- fitting -------------------------------------------------------------------------------------


def test_fit_recovers_known_coefficients_despite_noise_and_outliers(info):
    rng = np.random.default_rng(2)
    anchor = _anchor(info)
    points = neighbourhood(info, TARGET, knob_space_for(info, TARGET), anchor)
    truth = {**DEFAULTS, "compute_eff": 0.5, "dram_eff": 0.7, "l2_eff": 0.45, "single_slice_cost": 0.6}
    samples = _synthetic(info, "k", truth, points, rng, noise=0.02, outliers=8)
    fitted = fit_coeffs(samples)
    r = residuals(samples, fitted)
    assert robust_spread(r) < 0.03  # the fit explains all but the noise
    assert float(np.median(np.abs(r[8:]))) < 0.03 and float(np.median(r[:8])) > 0.9  # outliers stand out
    # what these candidates tell apart (compute_eff trades with hide_warps: both scale the arithmetic)
    for name in ("dram_eff", "l2_eff", "single_slice_cost"):
        assert fitted[name] == pytest.approx(truth[name], rel=0.1), name
    assert fitted["compute_eff"] == pytest.approx(truth["compute_eff"], rel=0.25)
    start = residuals(samples, DEFAULTS)  # the defaults are off by a factor of about 1.3
    assert float(np.median(np.abs(start))) > 5 * float(np.median(np.abs(r)))


def test_fit_keeps_residuals_and_envelope_per_kind(info):
    rng = np.random.default_rng(3)
    points = neighbourhood(info, TARGET, knob_space_for(info, TARGET), _anchor(info))[:40]
    samples = _synthetic(info, "k1", DEFAULTS, points[:20], rng) + _synthetic(info, "k2", DEFAULTS, points[20:], rng)
    prior = fit(samples, "sm_90a", ["test data"], "0.0")
    assert prior.fitted and set(prior.residuals) == {"contraction"}
    assert prior.residuals["contraction"]["keys"] == 2 and prior.residuals["contraction"]["trials"] == 40
    assert prior.data["keys"] == {"k1": 20, "k2": 20} and prior.data["sources"] == ["test data"]
    assert "wgmma_ws" in prior.envelope["contraction"]["workers"]
    with pytest.raises(EmmyError, match="at least 2 measured candidates"):
        fit(samples[:1], "sm_90a")


# -- evaluate ------------------------------------------------------------------------------------


def test_regret_arithmetic_on_a_hand_made_set(info, normed_info):
    """Two keys of three measured candidates; the prior ranks the sensible tile first. Key a: it
    is the fastest (regret 1); key b: another measured 10 us against its 12 (regret 1.2)."""
    sensible = _values(info)
    tiny = _values(info, workers="mma_sync", block_m=16, block_n=16, block_k=16, warps=1, stages=2, copy="cp_async")
    mid = _values(info, workers="mma_sync", block_m=64, block_n=64, warps=4, copy="cp_async")
    kernel = Kernel(info, TARGET)
    space = knob_space_for(info, TARGET)

    def key(name, times):
        kd = KeyData(name, "contraction", kernel, space)
        for v, t in times:
            kd.samples.append(Sample(name, "s", name, "contraction", "linear", v, t * 1e-6, {}))
        return kd

    a = key("a", [(sensible, 10.0), (tiny, 30.0), (mid, 12.0), (mid, 14.0)])  # mid's median: 13
    b = key("b", [(sensible, 12.0), (tiny, 30.0), (mid, 10.0)])
    assert measured_times(a.samples)[tuple(sorted((k, repr(v)) for k, v in mid.items()))][1] == pytest.approx(13e-6)
    rows = evaluate({"a": a, "b": b}, "sm_90a", fitter=lambda train: Prior("sm_90a"), schemes=("shape",))
    assert [(r.key, r.top_regret) for r in rows] == [("a", 1.0), ("b", pytest.approx(1.2))]
    assert [r.fusion for r in rows] == ["", ""]  # every candidate fused: no fusion fork
    assert summarize([1.0, 1.2]) == {"geomean_regret": round(math.sqrt(1.2), 4), "worst_regret": 1.2, "n": 2}
    s = summary(rows)
    assert s["n"] == 2 and s["by"]["shape"]["top_geomean_regret"] == round(math.sqrt(1.2), 4)
    normed = Kernel(normed_info, TARGET)
    fork = KeyData("d", "contraction", normed, knob_space_for(normed_info, TARGET))
    tiny_normed = _values(normed_info, workers="mma_sync", block_m=16, block_n=16, block_k=16, warps=1, stages=2,
                          copy="cp_async")
    # the rules' answer (split statistics here) measured: the fork's row says what was best and picked
    for fused_us, split_us, said, regret in ((12.0, 10.0, "best split, pick split", 1.0),
                                             (10.0, 12.0, "best fused, pick split", 1.2)):
        fork.samples = [Sample("d", "s", "d", "contraction", "linear", v, t * 1e-6, {})
                        for v, t in ((_values(normed_info), fused_us), (_values(normed_info, fusion="split"), split_us),
                                     (tiny_normed, 30.0))]
        (row,) = evaluate({"d": fork}, "sm_90a", fitter=lambda train: Prior("sm_90a"), schemes=("shape",))
        assert row.picked == "anchor" and row.fusion == said and row.regret == pytest.approx(regret)
    one = key("c", [(sensible, 10.0)])
    assert judge(one, Prior("sm_90a"), "shape") is None  # one candidate: nothing to choose


def test_leave_one_out_never_fits_on_the_held_out_key(info):
    seen = []
    kernel = Kernel(info, TARGET)
    space = knob_space_for(info, TARGET)
    keys = {}
    for name in ("a", "b", "c"):
        kd = keys[name] = KeyData(name, "contraction", kernel, space)
        for v, t in ((_values(info), 1e-5), (_values(info, block_n=64), 2e-5)):
            kd.samples.append(Sample(name, "s", "model-" + ("x" if name == "c" else "y"), "contraction", "l", v, t, {}))

    def fitter(train):
        seen.append(sorted({s.key for s in train}))
        return Prior("sm_90a")

    evaluate(keys, "sm_90a", fitter=fitter)
    assert seen == [["b", "c"], ["a", "c"], ["a", "b"], ["a", "b"], ["c"]]


def test_leave_one_model_out_holds_out_the_models_unrecorded_studies_too(info):
    """Key b was tuned before the tuner recorded models (its model is its structure, "s1"), of a
    kernel key a was tuned from model-x: both are model-x's, held out together (fitting on b
    while judging a would fit on the held-out model). Key c is model-y's own structure; d shares
    structure "s2" with c but names model-z: two recorded models of one kernel stay apart."""
    kernel = Kernel(info, TARGET)
    space = knob_space_for(info, TARGET)
    keys = {}
    for name, structure, model in (("a", "s1", "model-x"), ("b", "s1", "s1"), ("c", "s2", "model-y"),
                                   ("d", "s2", "model-z"), ("e", "s3", "s3")):
        kd = keys[name] = KeyData(name, "contraction", kernel, space)
        for v, t in ((_values(info), 1e-5), (_values(info, block_n=64), 2e-5)):
            kd.samples.append(Sample(name, structure, model, "contraction", "l", v, t, {}))
    assert model_groups(keys) == {"a": "model-x", "b": "model-x", "c": "model-y", "d": "model-z", "e": "s3"}
    seen = []

    def fitter(train):
        seen.append(sorted({s.key for s in train}))
        return Prior("sm_90a")

    evaluate(keys, "sm_90a", fitter=fitter, schemes=("model",))
    assert seen == [["c", "d", "e"], ["a", "b", "d", "e"], ["a", "b", "c", "e"], ["a", "b", "c", "d"]]


def test_a_problems_older_studies_are_held_out_with_it_and_judged_once(info):
    """Keys s1:p and s2:p are one problem (the kernel on shape p) measured under two pipelines,
    s2 the newer; s1:q another problem. Holding out p holds out both studies, and p is judged
    once, on s2."""
    kernel, space = Kernel(info, TARGET), knob_space_for(info, TARGET)
    keys = {}
    for name, date in (("s1:p:sm_90a:v1", "2026-12-02T10:00:00Z"), ("s2:p:sm_90a:v1", "2026-12-06T10:00:00Z"),
                       ("s1:q:sm_90a:v1", "2026-12-02T11:00:00Z")):
        kd = keys[name] = KeyData(name, "contraction", kernel, space, date=date)
        for v, t in ((_values(info), 1e-5), (_values(info, block_n=64), 2e-5)):
            kd.samples.append(Sample(name, name[:2], "m", "contraction", "linear", v, t, {}))
    assert keys["s1:p:sm_90a:v1"].problem == keys["s2:p:sm_90a:v1"].problem == ("linear", "p")
    assert newest_studies(keys) == ["s1:q:sm_90a:v1", "s2:p:sm_90a:v1"]
    seen = []

    def fitter(train):
        seen.append(sorted({s.key for s in train}))
        return Prior("sm_90a")

    rows = evaluate(keys, "sm_90a", fitter=fitter, schemes=("shape",))
    assert sorted(r.key for r in rows) == ["s1:q:sm_90a:v1", "s2:p:sm_90a:v1"]
    assert sorted(seen) == [["s1:p:sm_90a:v1", "s2:p:sm_90a:v1"], ["s1:q:sm_90a:v1"]]


def test_the_bounded_pick_is_among_what_the_prior_tier_could_deploy(info):
    """The prior tier ranks the anchor's neighbourhood (one knob changed, or two of the main
    ones), never a schedule three knobs away: `evaluate` judges the same choice."""
    kernel, space = Kernel(info, TARGET), knob_space_for(info, TARGET)
    anchor = _values(info)
    near = _values(info, block_n=64)
    far = _values(info, block_n=64, block_m=256, stages=3, group_m=2)
    kd = KeyData("k", "contraction", kernel, space)
    assert reachable(kd, anchor, [anchor, near, far]) == [near]


# -- the prior file ------------------------------------------------------------------------------


def test_a_missing_file_gives_the_defaults_and_a_written_one_reads_back(tmp_path):
    path = prior_path(tmp_path, "sm_90a")
    assert load_prior(path, "sm_90a") == Prior("sm_90a")
    prior = Prior("sm_90a", {**DEFAULTS, "knee": 40.0}, {"contraction": {"spread": 0.1, "keys": 3, "trials": 9}},
                  {"contraction": {"stages": [1.0, 1.6], "workers": ["wgmma_ws"]}}, {"trials": 9}, "2026-12-01", "0.1")
    write_prior(path, prior)
    back = load_prior(path, "sm_90a")
    assert prior_json(back) == prior_json(prior) and back.path == str(path)


@pytest.mark.parametrize("text, message", [
    ("{", r"prior.json:1:2: not JSON"),
    ("[]", r"prior.json: not an Emmy prior file"),
    ('{"format": "emmy-prior", "schema": "1"}', r"its \"schema\" must be an integer"),
    ('{"format": "emmy-prior", "schema": 9, "target": "sm_90a"}', r"written by a newer Emmy"),
    ('{"format": "emmy-prior", "schema": 1, "target": "sm_80", "coefficients": {}}', r"a prior for 'sm_80', not for sm_90a"),
    ('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": {"knee": -1}}',
     r"coefficient knee must be a positive number"),
    ('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": {"speed": 2}}', r"unknown coefficients speed"),
    ('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": [1, 2]}',
     r"\"coefficients\" must be an object of numbers"),
    ('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": {}, "residuals": {"x": {}}}',
     r"\"residuals\" must map"),
    ('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": {}, "envelope": {"x": {"stages": [1]}}}',
     r"envelope of x: stages"),
    ('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": {}, "envelope": {"x": 1}}',
     r"\"envelope\" must map each kind to an object"),
    ('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": {}, '
     '"residuals": {"x": {"spread": 0.1, "held_out": {"margin": 0.5, "worst": 2, "pairs": 3}}}}',
     r"residuals of x: \"held_out\" must hold a \"margin\" of at least 1"),
    ('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": {}, "correction": {"x": {"a=1": "fast"}}}',
     r"\"correction\" must map each kind"),
])
def test_a_broken_prior_file_is_an_error_naming_it(tmp_path, text, message):
    path = tmp_path / "prior.json"
    path.write_text(text)
    with pytest.raises(EmmyError, match=message) as e:
        load_prior(path, "sm_90a")
    assert str(path) in str(e.value)


def test_prior_from_checks_data_not_just_files():
    data = json.loads(json.dumps(prior_json(Prior("sm_90a"))))
    assert prior_from(data, "<x>", "sm_90a").coeffs == DEFAULTS


def test_pins_never_change_and_an_illegal_pin_gives_no_decision(info):
    space = knob_space_for(info, TARGET)
    pins = {"workers": "mma_sync", "block_k": 32}
    fitted = Prior("sm_90a", residuals={"contraction": {"spread": 0.0}})  # the smallest margin
    c = prior_decision(info, TARGET, space, fitted, pins)
    assert c.values["workers"] == "mma_sync" and c.values["block_k"] == 32 and c.anchor["block_k"] == 32
    assert not check(info, c.values, TARGET)
    assert all(v["workers"] == "mma_sync" for v in neighbourhood(info, TARGET, space, c.anchor, pins))
    assert prior_decision(info, TARGET, space, fitted, {"block_k": 24}) is None


def test_attention_rereads_count_the_copied_slabs():
    """Tensor-map copies of K and V move whole 64-column slabs: at head dim 96 the re-read bytes
    count 128 columns a row; cp.async copies, the 96 real ones."""
    from emmy.analysis.classify import classify
    from attention_examples import attention_ir, parse_kernel

    info = classify(parse_kernel(attention_ir(T=3000, H=32, HKV=32, D=96, qwen=False, target="sm_90a")))
    tma = {k: c.value for k, c in decide(info, TARGET, knob_space_for(info, TARGET)).items()}
    assert (tma["workers"], tma["copy"]) == ("wgmma_ws", "tma") and not check(info, tma, TARGET)
    cp = {**tma, "workers": "wgmma", "copy": "cp_async", "stages": 3, "schedule": "grid"}
    assert not check(info, cp, TARGET)
    assert features(info, tma, TARGET)["reread_bytes"] == pytest.approx(features(info, cp, TARGET)["reread_bytes"] * 128 / 96)
