"""The prior's bound and how it is judged: the held-out margin, the learned correction, the
proxy anchor of `evaluate`, and the feature terms added for small shapes (a reduction's flops
and idle threads, the last block's read-back of split_k parts). Times here come from the model
itself, multiplied by known factors: test data, not measurements."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emmy.diagnostics import EmmyError
from emmy.driver import CompileOptions, compile_model
from emmy.prior.choose import choose, neighbourhood, rules_anchor
from emmy.prior.correction import correction, fit_correction, knob_terms
from emmy.prior.data import KeyData, Sample
from emmy.prior.evaluate import evaluate, knob_distance, proxy_anchor
from emmy.prior.features import Kernel, features
from emmy.prior.fit import fit, folds, held_out, residuals
from emmy.prior.model import DEFAULTS, predict, score, with_target
from emmy.prior.store import Prior, load_prior, prior_json, write_prior
from emmy.search.task import tasks_in
from emmy.targets import get_target
from emmy.tuning.knobs import knob_space_for
from emmy.tuning.legality import check
from emmy.tuning.rules import decide

TARGET = get_target("sm_90a")
LINEAR = '''
import torch
from torch import nn

def make(tokens: int = 512):
    torch.manual_seed(0)
    lin = nn.Linear(1024, 4096, bias=False).to(torch.bfloat16)
    return lin, (torch.randn(1, tokens, 1024, dtype=torch.bfloat16),)
'''
NORM_LINEAR = '''
import torch
from torch import nn

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(256, eps=1e-6)
        self.lin = nn.Linear(256, 512, bias=False)

    def forward(self, x):
        return self.lin(self.norm(x))

def make(tokens: int = 1):
    torch.manual_seed(0)
    return M().to(torch.bfloat16), (torch.randn(1, tokens, 256, dtype=torch.bfloat16),)
'''


def _info(tmp_path_factory, source: str, tokens: int, kind: str):
    path = tmp_path_factory.mktemp("model") / "m.py"
    path.write_text(source)
    result = compile_model(CompileOptions(model=f"{path}:make", tokens=tokens, target="sm_90a", stop_after="tile"))
    return next(t.info() for t in tasks_in(result.module, TARGET, tokens) if t.info().kind == kind)


@pytest.fixture(scope="module")
def info(tmp_path_factory):
    """x[512, 1024] @ W[4096, 1024]^T: one contraction m=512 n=4096 k=1024."""
    return _info(tmp_path_factory, LINEAR, 512, "contraction")


@pytest.fixture(scope="module")
def reduction(tmp_path_factory):
    """RMSNorm then a linear layer at one token: a reduction of 512 rows of 256, two reduces."""
    return _info(tmp_path_factory, NORM_LINEAR, 1, "reduction")


def _anchor(info):
    return {k: c.value for k, c in decide(info, TARGET, knob_space_for(info, TARGET)).items()}


def _held(margin: float, worst: float = 4.0) -> dict:
    return {"contraction": {"spread": 0.1, "held_out": {"margin": margin, "worst": worst, "pairs": 100}}}


# -- feature terms -------------------------------------------------------------------------------


def test_a_reductions_flops_count_each_reduce_once_per_row(reduction):
    assert reduction.axes == {"n": 512, "k": 256} and len(reduction.reductions) == 2
    f = features(reduction, {"rows_per_block": 1, "threads": 256, "vector": 8}, TARGET)
    assert f["flops"] == 2 * 512 * (256 + 256)  # the sum of squares and the dot product, per row
    # 256 threads per row, 8 elements each, on a row of 256: 32 threads load, 224 idle
    occupancy = f["occupancy"]
    assert f["rounds"] == math.ceil(512 / (TARGET.sms * occupancy))
    assert f["idle_rounds"] == pytest.approx(f["rounds"] * (1 - 32 / 256))
    resident = min(occupancy, math.ceil(512 / TARGET.sms))
    assert f["inflight_bytes"] == resident * 32 * 8 * 2 and f["warps_resident"] == resident * 1
    full = features(reduction, {"rows_per_block": 1, "threads": 32, "vector": 8}, TARGET)
    assert full["idle_rounds"] == 0  # 32 threads x 8 elements: the whole row


def test_few_loads_in_flight_pull_less_than_the_bandwidth(reduction):
    few = with_target(features(reduction, {"rows_per_block": 1, "threads": 32, "vector": 1}, TARGET), TARGET)
    many = with_target(features(reduction, {"rows_per_block": 1, "threads": 32, "vector": 8}, TARGET), TARGET)
    assert few["inflight_bytes"] * 8 == many["inflight_bytes"]
    assert predict(few, DEFAULTS) > predict(many, DEFAULTS)
    assert predict({**few, "inflight_bytes": 0.0}, DEFAULTS) < predict(few, DEFAULTS)  # 0: not applicable


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """The same projection at 32768 tokens: 343 MB of operands and result, past the 60 MB L2."""
    return _info(tmp_path_factory, LINEAR, 32768, "contraction")


TILE = {"workers": "wgmma_ws", "block_m": 128, "block_n": 256, "block_k": 64, "warps": 8, "stages": 4,
        "split_k": 1, "schedule": "grid", "copy": "tma", "cluster": 1, "group_m": 1, "vector": 8}


def test_l2_serves_re_reads_when_a_waves_tiles_fit_not_the_whole_operands(large):
    """At 32768 tokens the operands do not fit in L2 (60 MB of 343), but the 132 tiles of
    128 x 256 running at once, in order along n, read 9 rows of A tiles and all 16 columns of B
    tiles: 10.7 MB, which do; the re-reads come from L2 (before: 60 / 343 of them). The order
    matters: with group_m = 8 the wave fills a group (8 rows of all 16 columns) and starts the next
    one, down its rows first: 12 rows."""
    from emmy.prior.features import _wave_bytes
    from emmy.schedule.plan import plan_for

    values = {k: v for k, v in {**TILE, "fusion": "fused", "combine": "kernel", "split_tail": 1,
                                "epilogue": "together"}.items() if k in knob_space_for(large, TARGET)}
    assert not check(large, values, TARGET)
    f = features(large, values, TARGET)
    assert f["unique_bytes"] > TARGET.l2_bytes and f["l2_fraction"] == 1.0
    plan = plan_for(large, values, TARGET)
    assert _wave_bytes(plan, 256, 16, 1024 * 2, 1, TARGET) == (9 * 128 + 16 * 256) * 1024 * 2
    grouped = plan_for(large, {**values, "group_m": 8}, TARGET)
    assert _wave_bytes(grouped, 256, 16, 1024 * 2, 1, TARGET) == (12 * 128 + 16 * 256) * 1024 * 2
    # a wave that does not fit is served in the share that fits
    assert _wave_bytes(plan, 256, 16, 64 * 1024 * 2, 1, TARGET) > TARGET.l2_bytes
    # re-reads from L2 rather than DRAM: the time falls (3 GB of them, once DRAM-bound)
    whole = TARGET.l2_bytes / f["unique_bytes"]  # the share the whole operands gave
    t = {share: predict(with_target({**f, "l2_fraction": share}, TARGET), DEFAULTS) for share in (whole, 1.0)}
    assert f["reread_bytes"] > 3e9 and t[1.0] < 0.8 * t[whole]


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    """RMSNorm then a linear layer at 128 tokens: a contraction with a row-statistics prologue."""
    return _info(tmp_path_factory, NORM_LINEAR, 128, "contraction")


def test_a_fused_prologue_is_folded_by_each_consumer_thread_between_its_mmas(fused):
    """Fused, each tile's consumer threads fold its rows' squares over k themselves: 64 rows of
    256 over 128 consumer threads (one warpgroup beside the producer) is 128 elements a thread,
    as many as 128 rows over 256 (two warpgroups); split, the statistics launch does it and the
    chain is 0. The chain costs the fold's time, so fusing costs more as it grows."""
    base = {k: v for k, v in {**TILE, "block_n": 128, "warps": 4, "block_m": 64, "fusion": "fused",
                              "combine": "kernel", "split_tail": 1, "epilogue": "together"}.items()
            if k in knob_space_for(fused, TARGET)}
    assert not check(fused, base, TARGET), check(fused, base, TARGET)
    one = features(fused, base, TARGET)
    two = features(fused, {**base, "block_m": 128, "warps": 8}, TARGET)
    split = features(fused, {**base, "fusion": "split"}, TARGET)
    assert (one["rounds"], one["recompute_chain"], two["recompute_chain"]) == (1, 64 * 256 / 128, 128 * 256 / 256)
    assert split["recompute_chain"] == 0 and split["recompute_flops"] == 0
    f = with_target(one, TARGET)
    slow, fast = (predict(f, {**DEFAULTS, "recompute_op_s": t}) for t in (1e-8, 1e-9))
    assert slow > fast
    # the whole fold is on the busiest SM's path
    assert slow - fast >= 0.99 * one["recompute_chain"] * 9e-9


def test_a_fused_fold_is_not_hidden_under_the_kernels_loads(fused):
    """The consumer threads' fold adds to a kernel's time even where its loads are the slower
    side: on the H200 the fused wgmma_ws schedules at 128 tokens (memory-bound: the weights
    stream) measured 6 us over their split twins, the fold's share, not the few hundred ns a
    fold overlapping the loads would leave. Made memory-bound here by a hundred times the bytes,
    the fold still adds its whole time (overlapping it, the model added a tenth: `overlap`)."""
    base = {k: v for k, v in {**TILE, "block_n": 128, "warps": 4, "block_m": 64, "fusion": "fused",
                              "combine": "kernel", "split_tail": 1, "epilogue": "together"}.items()
            if k in knob_space_for(fused, TARGET)}
    one = features(fused, base, TARGET)
    f = with_target({**one, "unique_bytes": 100 * one["unique_bytes"]}, TARGET)
    slow, fast = (predict(f, {**DEFAULTS, "recompute_op_s": t}) for t in (1e-8, 1e-9))
    assert slow - fast == pytest.approx(one["recompute_chain"] * 9e-9)


def test_a_fused_prologue_pass_waits_for_each_warps_rows_one_after_another(fused):
    """Without a producer warpgroup (mma_sync here) a fused kernel computes its rows' statistics
    in a pass before its k loop: each of its 4 warps takes 32 / 4 = 8 rows one after another,
    and each lane waits for its 16-byte load of a row of 256 (one: 32 lanes x 8 elements) on its
    own, nothing overlapping. Costed per element folded (as wgmma_ws's fold between its MMAs),
    32-token forks measured on the H200 took 3 to 4 us more fused than split where the fold
    predicted 1: the loads' round trips, not the arithmetic, are the cost. wgmma_ws keeps its
    fold and makes no pass."""
    base = {k: v for k, v in {**TILE, "workers": "mma_sync", "block_m": 32, "block_n": 32, "warps": 4,
                              "copy": "cp_async", "fusion": "fused", "combine": "kernel", "split_tail": 1,
                              "epilogue": "together"}.items() if k in knob_space_for(fused, TARGET)}
    assert not check(fused, base, TARGET), check(fused, base, TARGET)
    one = features(fused, base, TARGET)
    two = features(fused, {**base, "warps": 8}, TARGET)
    split = features(fused, {**base, "fusion": "split"}, TARGET)
    ws = features(fused, {**base, "workers": "wgmma_ws", "block_m": 64, "copy": "tma"}, TARGET)
    assert (one["rounds"], one["prologue_loads"], two["prologue_loads"]) == (1, 8, 4)
    assert one["recompute_chain"] == 0 and split["prologue_loads"] == 0
    assert ws["prologue_loads"] == 0 and ws["recompute_chain"] > 0
    # nothing overlaps the pass: each load adds its round trip to the kernel's time
    f = with_target(one, TARGET)
    slow, fast = (predict(f, {**DEFAULTS, "prologue_load_s": t}) for t in (3e-7, 1e-7))
    assert slow - fast == pytest.approx(8 * 2e-7)


def test_a_reductions_issue_overlaps_its_loads(reduction):
    """Thread and warp operations are the issue side of the kernel (with its arithmetic): a few
    hide under the loads of a memory-bound reduction; many more make it issue-bound, and then
    they cost in proportion."""
    f = with_target(features(reduction, {"rows_per_block": 1, "threads": 32, "vector": 8}, TARGET), TARGET)
    c = {**DEFAULTS, "warp_op_s": 1e-12, "thread_op_s": 1e-12}
    base = predict({**f, "warp_ops": 0.0, "thread_ops": 0.0}, c)
    assert predict({**f, "warp_ops": 10.0, "thread_ops": 10.0}, c) == pytest.approx(base, rel=1e-6)
    many, more = (predict({**f, "warp_ops": n, "thread_ops": 0.0}, c) for n in (1e8, 2e8))
    assert base < many < more and more - many == pytest.approx(1e8 * 1e-12, rel=0.05)


def test_the_last_block_reads_the_other_split_parts_back_alone(info):
    v = {**_anchor(info), "split_k": 2, "combine": "last_block"}
    assert not check(info, v, TARGET), check(info, v, TARGET)
    f = features(info, v, TARGET)
    bm, bn = int(v["block_m"]), int(v["block_n"])
    assert f["ticket_bytes"] == (2 - 1) * bm * bn * 4 and f["launches"] == 1
    kernel = features(info, {**v, "combine": "kernel"}, TARGET)
    assert kernel["ticket_bytes"] == 0 and kernel["launches"] == 2


# -- the bound -----------------------------------------------------------------------------------


@pytest.mark.parametrize("factor", [1.2, 1.5, 3.0])
def test_a_model_wrong_by_a_known_factor_never_picks_past_the_bound(info, factor):
    """Every candidate's measured time is the model's times a factor within [1/F, F]: the pick
    measures at most F^2 / margin times the anchor (never slower than it once the margin covers
    F^2), over many draws and margins; and it is never predicted slower than the anchor."""
    rng = np.random.default_rng(int(factor * 10))
    anchor = _anchor(info)
    candidates = neighbourhood(info, TARGET, knob_space_for(info, TARGET), anchor)
    kernel = Kernel(info, TARGET)
    model = {repr(sorted(v.items())): score(kernel, v, DEFAULTS) for v in [anchor, *candidates]}
    picked = 0
    for margin in (1.03, factor, factor ** 2):
        prior = Prior("sm_90a", dict(DEFAULTS), _held(margin))
        assert prior.margin("contraction") == margin
        for _ in range(5):
            wrong = {k: t * math.exp(rng.uniform(-math.log(factor), math.log(factor))) for k, t in model.items() if t}
            c = choose(info, TARGET, candidates, anchor, prior)
            measured = wrong[repr(sorted(c.values.items()))] / wrong[repr(sorted(anchor.items()))]
            assert measured <= factor ** 2 / c.margin * (1 + 1e-9)
            assert c.predicted_s <= c.anchor_s
            if margin >= factor ** 2:
                assert measured <= 1 + 1e-9
            picked += c.picked == "prior"
    assert picked  # the bound was exercised: some picks were not the anchor


def _synthetic(info, key: str, points, rng, wrong: float = 0.03, knob=None) -> list[Sample]:
    """Times the default model predicts, times a lognormal error of `wrong` (log units), and
    exp(0.5) more for candidates with the knob value `knob` (what a learned correction should
    find)."""
    kernel = Kernel(info, TARGET)
    out = []
    for v in points:
        f = with_target(kernel.features(v), TARGET)
        t = predict(f, DEFAULTS) * math.exp(rng.normal(0, wrong))
        if knob is not None and v.get(knob[0]) == knob[1]:
            t *= math.exp(0.5)
        out.append(Sample(key, "s", key, info.kind, "linear", v, t, f))
    return out


def test_the_margin_is_calibrated_on_held_out_keys(info):
    rng = np.random.default_rng(4)
    points = neighbourhood(info, TARGET, knob_space_for(info, TARGET), _anchor(info))
    exact = [s for i, k in enumerate("abcd") for s in _synthetic(info, k, points[i * 25:(i + 1) * 25], rng, 0.01)]
    noisy = [s for i, k in enumerate("abcd") for s in _synthetic(info, k, points[i * 25:(i + 1) * 25], rng, 0.4)]
    assert [sorted(f) for f in folds(exact)] == [["a"], ["b"], ["c"], ["d"]]
    good, bad = fit(exact, "sm_90a"), fit(noisy, "sm_90a")
    g, b = good.residuals["contraction"]["held_out"], bad.residuals["contraction"]["held_out"]
    assert g["pairs"] == b["pairs"] == 4 * 24  # each held-out key: its top candidate against the 24 others
    assert g["margin"] < 1.1 < b["margin"] <= b["worst"] and g["worst"] < 1.2 < 2 < b["worst"]
    assert good.margin("contraction") == g["margin"] and bad.margin("contraction") == b["margin"]
    one = fit(exact[:25], "sm_90a")  # one key: nothing to hold out, the in-sample spread decides
    assert folds(exact[:25]) == [] and "held_out" not in one.residuals["contraction"]
    lone = fit(exact[:25] + exact[25:26], "sm_90a")  # holding out key a leaves one sample to fit on
    assert lone.residuals["contraction"]["keys"] == 2 and "held_out" not in lone.residuals["contraction"]


def test_pairs_on_other_arithmetic_units_get_a_margin_of_their_own(info):
    """The model errs more between candidates on different units (`workers`): here every
    candidate off the anchor's units measures within a lognormal of 0.6 of the model, the others
    within 0.01. The fit calibrates the two kinds of pairs apart, and only a candidate on other
    units than the anchor has to beat the larger margin. (Fewer noisy candidates per key than
    tight ones, and noisier: pairs of two noisy ones on the same units count as the same kind,
    and with 0.3 and as many of them the two margins came out within a few percent, their order
    depending on the draw.)"""
    rng = np.random.default_rng(6)
    anchor = _anchor(info)
    space = knob_space_for(info, TARGET)
    mine = neighbourhood(info, TARGET, space, anchor)
    other = [v for w in ("wgmma", "mma_sync")
             for v in neighbourhood(info, TARGET, space, rules_anchor(info, TARGET, space, {"workers": w}), {"workers": w})]
    assert {v["workers"] for v in mine} == {anchor["workers"]} != {v["workers"] for v in other} == {"wgmma", "mma_sync"}
    rng.shuffle(other)
    samples = []
    for i, k in enumerate("abcd"):
        samples += _synthetic(info, k, mine[i * 15:(i + 1) * 15], rng, 0.01)
        samples += _synthetic(info, k, other[i * 10:(i + 1) * 10], rng, 0.6)
    prior = fit(samples, "sm_90a")
    held = prior.residuals["contraction"]["held_out"]
    assert held["across"]["pairs"] >= 10 and held["across"]["margin"] > held["margin"]
    assert prior.margin("contraction", across=True) == held["across"]["margin"] > prior.margin("contraction")
    # a choice: the same predicted gain picks a candidate on the anchor's units, not one on others
    p = Prior("sm_90a", dict(DEFAULTS), {"contraction": {"spread": 0.1, "held_out": {
        "margin": 1.03, "worst": 2.0, "pairs": 100, "across": {"margin": 100.0, "worst": 200.0, "pairs": 50}}}})
    kernel = Kernel(info, TARGET)
    slow = rules_anchor(info, TARGET, space, {"workers": "mma_sync"})  # an anchor the others beat
    slow_s = score(kernel, slow, p, penalized=False)
    faster = [v for v in mine if (score(kernel, v, p) or math.inf) * 1.03 < slow_s]
    assert faster  # candidates on other units than this anchor, predicted faster than it
    c = choose(info, TARGET, faster, slow, p)
    assert c.picked == "anchor" and c.values == slow and "on other units than the rules' (wgmma_ws)" in c.reason
    assert choose(info, TARGET, faster, slow, Prior("sm_90a", dict(DEFAULTS), _held(1.03))).picked == "prior"
    near = [v for v in other if v["workers"] == "mma_sync" and (score(kernel, v, p) or math.inf) * 1.03 < slow_s]
    assert near and choose(info, TARGET, near + faster, slow, p).values in near  # same units: the small margin


def test_the_learned_correction_finds_a_knob_value_the_model_misses(info):
    rng = np.random.default_rng(5)
    points = neighbourhood(info, TARGET, knob_space_for(info, TARGET), _anchor(info))[:160]
    kernel = Kernel(info, TARGET)
    # the stage depth of the model's favourite is what the "card" makes slow, so that the model's
    # picks lose and the correction has something to win back on held-out keys
    deep = min(points, key=lambda v: predict(with_target(kernel.features(v), TARGET), DEFAULTS))["stages"]
    samples = [s for i, k in enumerate("abcd")
               for s in _synthetic(info, k, points[i * 40:(i + 1) * 40], rng, 0.02, knob=("stages", deep))]
    assert any(s.values["stages"] == deep for s in samples) and any(s.values["stages"] != deep for s in samples)
    weights = fit_correction(samples, residuals(samples, DEFAULTS))["contraction"]
    assert weights[f"stages={deep}"] > 0.2
    assert max(abs(w) for t, w in weights.items() if not t.startswith("stages")) < 0.1
    v = next(s.values for s in samples if s.values["stages"] == deep)
    assert correction(weights, v) == pytest.approx(sum(weights.get(t, 0.0) for t in knob_terms(v)))
    plain, learnt = held_out(samples, DEFAULTS)["contraction"]
    assert plain["regret"] > 1.1 and learnt["regret"] < 1.05
    prior = Prior("sm_90a", dict(DEFAULTS), _held(1.1), correction={"contraction": weights})
    assert score(kernel, v, prior, penalized=False) == pytest.approx(score(kernel, v, DEFAULTS) * math.exp(correction(weights, v)))


def test_a_prior_file_keeps_the_held_out_margin_and_the_correction(tmp_path):
    path = tmp_path / "prior.json"
    prior = Prior("sm_90a", dict(DEFAULTS), _held(1.25, 2.5), correction={"contraction": {"stages=3": 0.4}})
    write_prior(path, prior)
    back = load_prior(path, "sm_90a")
    assert prior_json(back) == prior_json(prior) and back.margin("contraction") == 1.25
    assert back.corrected("contraction", {"stages": 3}) == pytest.approx(math.exp(0.4))
    assert back.corrected("attention", {"stages": 3}) == 1.0


@pytest.mark.parametrize("extra, message", [
    ('"residuals": {"contraction": {"spread": 0.1, "held_out": {"margin": 0.5, "worst": 1, "pairs": 3}}}',
     r"residuals of contraction: \"held_out\" must hold a \"margin\" of at least 1"),
    ('"residuals": {"contraction": {"spread": 0.1, "held_out": 2}}', r"\"held_out\" must hold"),
    ('"residuals": {"contraction": {"spread": 0.1, "held_out": {"margin": 1.2, "worst": 2, "pairs": 30, '
     '"across": {"margin": 1.5}}}}', r"residuals of contraction: \"held_out.across\" must hold a \"margin\""),
    ('"correction": {"contraction": {"stages=3": "big"}}', r"\"correction\" must map each kind"),
    ('"correction": []', r"\"correction\" must map each kind"),
])
def test_a_broken_margin_or_correction_is_an_error_naming_the_file(tmp_path, extra, message):
    path = tmp_path / "prior.json"
    path.write_text('{"format": "emmy-prior", "schema": 2, "target": "sm_90a", "coefficients": {}, ' + extra + "}")
    with pytest.raises(EmmyError, match=message) as e:
        load_prior(path, "sm_90a")
    assert str(path) in str(e.value)


def test_a_schema_1_file_still_reads_with_the_spreads_margin(tmp_path):
    path = tmp_path / "prior.json"
    path.write_text('{"format": "emmy-prior", "schema": 1, "target": "sm_90a", "coefficients": {"knee": 40},'
                    ' "residuals": {"contraction": {"spread": 0.1}}}')
    prior = load_prior(path, "sm_90a")
    assert prior.margin("contraction") == pytest.approx(math.exp(2 * 0.1)) and prior.correction == {}
    assert prior.coeffs["ticket_eff"] == DEFAULTS["ticket_eff"]  # coefficients it predates: the defaults


# -- judged against a proxy anchor ---------------------------------------------------------------


def test_proxy_anchor_is_the_measured_candidate_with_fewest_differing_knobs():
    anchor = {"a": 1, "b": 2, "c": 3}
    measured = [{"a": 9, "b": 9, "c": 3}, {"a": 1, "b": 9, "c": 3}, {"a": 1, "b": 2, "c": 9}]
    # one knob each: the nearer value wins (9 / 3 is less far than 9 / 2), in either order
    assert proxy_anchor(anchor, measured) == {"a": 1, "b": 2, "c": 9}
    assert proxy_anchor(anchor, measured[::-1]) == {"a": 1, "b": 2, "c": 9}
    # as near as each other: the earliest measured
    even = [{"a": 1, "b": 4, "c": 3}, {"a": 1, "b": 1, "c": 3}]
    assert proxy_anchor(anchor, even) == even[0] and proxy_anchor(anchor, even[::-1]) == even[1]


def test_among_proxies_differing_in_as_many_knobs_the_nearest_values_stand_in():
    """At 128 tokens the Qwen3 q/k/v rules' answer (64 x 64 tiles, 8 stages, grid) was not
    measured; two measured candidates differ from it in five knobs. 128 x 32 tiles in a grid
    with 4 stages lie nearer than 128 x 112 persistent with 2 stages, measured earlier."""
    anchor = {"block_m": 64, "block_n": 64, "group_m": 2, "schedule": "grid", "stages": 8, "warps": 4}
    far = {**anchor, "block_m": 128, "block_n": 112, "group_m": 1, "schedule": "persistent", "stages": 2}
    near = {**anchor, "block_m": 128, "block_n": 32, "group_m": 1, "stages": 4, "warps": 8}
    assert knob_distance(anchor, near) == pytest.approx(5.0)
    assert knob_distance(anchor, far) > knob_distance(anchor, near)
    assert proxy_anchor(anchor, [far, near]) == near


def test_a_proxy_anchor_runs_the_rules_program_first():
    """A candidate of the other `fusion` value is another program: it stands in for the rules'
    answer only where no measured candidate runs the rules' program (at 32 tokens, the fused
    attention one knob from the rules' split answer measured 1.7x the best)."""
    anchor = {"fusion": "split", "block_q": 32, "stages": 2, "workers": "mma_sync"}
    measured = [{"fusion": "fused", "block_q": 32, "stages": 3, "workers": "mma_sync"},
                {"fusion": "split", "block_q": 64, "stages": 3, "workers": "wgmma"},
                {"fusion": "split", "block_q": 64, "stages": 2, "workers": "wgmma"}]
    assert proxy_anchor(anchor, measured) == measured[2]
    assert proxy_anchor(anchor, measured[:1]) == measured[0]  # no split candidate: the nearest
    assert proxy_anchor({"block_q": 32}, measured) == measured[0]  # no structural knob: fewest knobs


def test_a_key_whose_rules_answer_was_not_measured_is_judged_against_its_proxy(info):
    """The rules' answer was never measured; its nearest measured neighbour (one knob apart)
    stands in. The unfitted prior's margin (about 2x) keeps it although another candidate
    measured faster: the row shows the proxy's regret, not the unbounded top pick's."""
    anchor = _anchor(info)
    space = knob_space_for(info, TARGET)
    near = next(c for c in neighbourhood(info, TARGET, space, anchor) if c["stages"] != anchor["stages"]
                and all(c[k] == anchor[k] for k in anchor if k != "stages"))
    far = {**anchor, "block_n": 64, "warps": 4, "workers": "wgmma", "stages": 3}
    far = far if not check(info, far, TARGET) else next(
        c for c in neighbourhood(info, TARGET, space, anchor) if sum(c[k] != anchor[k] for k in anchor) == 2)
    kd = KeyData("p", "contraction", Kernel(info, TARGET), space)
    for v, t in ((far, 10.0), (near, 15.0)):
        kd.samples.append(Sample("p", "s", "p", "contraction", "linear", v, t * 1e-6, {}))
    (row,) = evaluate({"p": kd}, "sm_90a", fitter=lambda train: Prior("sm_90a"), schemes=("shape",))
    assert row.picked == "anchor~" and row.regret == pytest.approx(1.5) and row.bounded_s == pytest.approx(15e-6)


NESTED = '''
import torch
from torch import nn

class M(nn.Module):
    def forward(self, q, k, v, x):
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v, x.sum(-1)

def make(tokens: int = 1):
    torch.manual_seed(0)
    shapes = ((64, 1, 16), (64, 4, 16), (64, 4, 512), (64, 2048))
    return M(), tuple(torch.randn(s, dtype=torch.bfloat16) for s in shapes)
'''


def test_a_reduce_nested_in_another_runs_its_body_for_each_of_its_elements(tmp_path_factory):
    """Softmax(q k^T) v with every sum short is one reduction kernel whose three reduces over the
    4 keys each hold the 16-long score sum: a thread runs that sum's body 16 times per key, and
    the prior's serial operations count it so (it once counted it once, and predicted 7 us for
    a kernel the H200 ran in 14 ms)."""
    from emmy.dialects.loop import ReduceOp
    from emmy.prior.features import _ops_per_element, _row_ops

    path = tmp_path_factory.mktemp("model") / "m.py"
    path.write_text(NESTED)
    result = compile_model(CompileOptions(model=f"{path}:make", tokens=1, target="sm_90a", stop_after="tile"))
    (info,) = [t.info() for t in tasks_in(result.module, TARGET, 1) if t.info().name == "attention"]
    assert info.kind == "reduction"
    rows = _row_ops(info)
    assert len(rows) == 3
    for r, ops in rows:
        (inner,) = [o for o in r.body.block.ops if isinstance(o, ReduceOp)]
        inner_ops = sum(1 for o in inner.walk() if o is not inner) - 1
        assert info.extent(inner.axis_names) == 16
        flat = sum(1 for o in r.walk() if o is not r) - 1  # every op once, nested or not
        assert ops == _ops_per_element(info, r) >= 16 * inner_ops
        assert ops > flat + 14 * inner_ops
    f = features(info, {"rows_per_block": 1, "threads": 32, "vector": 1}, TARGET)
    assert f["thread_ops"] >= f["rounds"] * sum(16 * 4 for _ in rows)
