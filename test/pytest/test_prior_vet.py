"""The nearest tier's vet (emmy.evidence.prior.NearestVet) judges a borrowed answer by what
depends on the shape: the prior's physical model with its fitted coefficients, not the learned
correction, whose weights per knob value are the same on every shape (the borrowed values were
measured best, knob values and all, where they come from)."""

from __future__ import annotations

from emmy.analysis.classify import classify
from emmy.evidence.prior import NearestVet
from emmy.prior.choose import rules_anchor
from emmy.prior.features import Kernel
from emmy.prior.model import score
from emmy.prior.store import MIN_MARGIN, Prior
from emmy.targets import get_target
from emmy.tuning.deciders import Problem
from emmy.tuning.knobs import knob_space_for
from emmy.tuning.legality import check
from example_kernels import QKV, kernels

SM90A = get_target("sm_90a")


def test_the_vet_leaves_out_the_learned_correction():
    info = classify(kernels(512)[QKV])
    space = knob_space_for(info, SM90A)
    rules = rules_anchor(info, SM90A, space)
    other = next(v for v in space["group_m"] if v != rules["group_m"] and not check(info, {**rules, "group_m": v}, SM90A))
    borrowed = {**rules, "group_m": other}
    fitted = {"contraction": {"spread": 0.05, "keys": 2, "trials": 9}}
    plain = Prior("sm_90a", residuals=fitted)
    # a correction that puts 65% on the borrowed group_m: the corrected model predicts it slower
    corrected = Prior("sm_90a", residuals=fitted, correction={"contraction": {f"group_m={other}": 0.5}})
    kernel = Kernel(info, SM90A)
    assert score(kernel, borrowed, corrected, penalized=False) > MIN_MARGIN * score(kernel, rules, corrected, penalized=False)
    problem = Problem(QKV, info, SM90A, space, {})
    assert NearestVet(plain)(problem, {}, borrowed) == NearestVet(corrected)(problem, {}, borrowed) == ""
    # what depends on the shape still counts: a tile the model predicts far slower is vetted out
    slow = next(v for v in ({**rules, "block_m": m, "block_n": n} for m in space["block_m"] for n in space["block_n"])
                if not check(info, v, SM90A)
                and score(kernel, v, plain, penalized=False) > 1.5 * score(kernel, rules, plain, penalized=False))
    assert NearestVet(corrected)(problem, {}, slow).startswith("the prior's physical model predicts the rules' answer faster")
