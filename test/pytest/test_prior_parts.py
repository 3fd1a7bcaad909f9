"""The prior costs what runs: a kernel built as parts (`emmy.schedule.plan.plan_kernel`) is costed
part by part, each with its own plan, and the terms combined as the parts' launches run; a part's
bytes are only what it reads and stores; the row statistics a split prologue launches are counted
once for the parts sharing them; a reduction's threads' serial operations and the warps issuing
them are terms of their own."""

from __future__ import annotations

from math import ceil

import pytest

from emmy.analysis.classify import classify
from emmy.prior.features import NAMES, Kernel, combine, features, io_bytes
from emmy.schedule.plan import plan_kernel
from emmy.targets import get_target
from test_prior_bound import reduction  # noqa: F401  (the fixture: RMSNorm then a linear layer, one token)
from example_kernels import QKV, kernels

SM90A = get_target("sm_90a")


def _qkv(tokens: int, pins: tuple[str, ...] = ()):
    k = kernels(tokens, pins=tuple(f"{QKV}.{p}" for p in pins))[QKV]
    return k, classify(k), dict(k.knob_values())


@pytest.mark.parametrize("tokens,pins", [(300, ()), (300, ("fusion=split",)), (1, ()),
                                         (300, ("workers=wgmma_ws", "schedule=persistent", "fusion=split"))])
def test_a_kernel_of_parts_is_costed_as_its_launches_run(tokens, pins):
    """The running example's q, k, v kernel is two parts (q over n, k and v over d2): its terms
    count the blocks and launches the plan of what runs has, not those of one product over all
    the columns (or, at one token, all the row axes multiplied)."""
    k, info, values = _qkv(tokens, pins)
    kplan = plan_kernel(k, SM90A)
    assert len(kplan.parts) == 2
    f = features(info, values, SM90A)
    assert f["launches"] == len(kplan.launches)
    assert f["blocks"] == sum(p.plan.blocks for p in kplan.parts)
    kernel = Kernel(info, SM90A)
    parts = kernel.parts(values.get("siblings") == "apart")
    assert [p.info.name for p in parts] == [p.info.name for p in kplan.parts]
    terms = [p.terms(q.plan) for p, q in zip(parts, kplan.parts)]
    assert f["flops"] == sum(t["flops"] for t in terms)
    if kplan.merge != "separate":  # side by side: the launch's waves are those of all the blocks
        assert f["waves"] == ceil(f["blocks"] / SM90A.sms)
    else:  # one after another: their waves add up
        assert f["waves"] == sum(t["waves"] for t in terms)


def test_a_part_costs_only_the_operands_it_reads_and_the_results_it_stores():
    k, info, values = _qkv(300)
    parts = Kernel(info, SM90A).parts(False)
    whole = io_bytes(info)
    x = 300 * 1024 * 2  # the normalized input both parts read
    assert [p.unique_bytes for p in parts] == [float(io_bytes(p.info)) for p in parts]
    assert sum(p.unique_bytes for p in parts) == whole + x  # each part reads x; nothing else twice


def test_the_row_statistics_are_counted_once_for_the_parts_sharing_them():
    """fusion = split: one statistics launch reads the 300 rows of 1024 once and writes two floats
    per row, whichever parts read them."""
    k, info, values = _qkv(300, ("fusion=split",))
    assert values["fusion"] == "split"
    f = features(info, values, SM90A)
    assert f["stats_bytes"] == 300 * 1024 * 2 + 2 * 300 * 4
    fused = features(info, {**values, "fusion": "fused"}, SM90A)
    assert fused["stats_bytes"] == 0 and fused["recompute_flops"] > 0 and fused["launches"] < f["launches"]


def test_combine_adds_work_and_takes_the_most_of_what_a_block_holds():
    a = {n: 0.0 for n in NAMES} | dict(flops=1e9, unique_bytes=1e6, blocks=100, threads=128, smem_bytes=1000,
                                         occupancy=2, peak_flops=1e15, quant=1.0, busy=0.5, rounds=1, steps=4,
                                         serial_steps=4, waves=1, warps_resident=8, stats_bytes=10)
    b = a | dict(flops=3e9, blocks=80, threads=256, smem_bytes=500, occupancy=1, steps=8, serial_steps=8,
                 warps_resident=4)
    side = combine([a, b], False, SM90A)
    assert side["flops"] == 4e9 and side["blocks"] == 180 and side["threads"] == 256 and side["smem_bytes"] == 1000
    assert side["occupancy"] == 1 and side["stats_bytes"] == 10  # one statistics launch for both
    assert side["waves"] == 2 and side["rounds"] == 2  # 180 blocks, one per SM at once: two rounds
    assert side["serial_steps"] == 2 * 8  # each round waits for the slower part's k-steps
    after = combine([a, b], True, SM90A)
    assert after["waves"] == 2 and after["rounds"] == 2 and after["serial_steps"] == 12


def test_a_reductions_serial_operations_follow_its_threads_per_row(reduction):  # noqa: F811
    """Rows of 256: with 32 threads a row each thread takes 8 elements one after another, with 64
    threads 4; the busiest SM's warps each issue their thread's share (idle lanes too)."""
    one = features(reduction, {"rows_per_block": 1, "threads": 32, "vector": 1}, SM90A)
    two = features(reduction, {"rows_per_block": 1, "threads": 64, "vector": 1}, SM90A)
    assert one["rounds"] == two["rounds"] == 1
    assert one["thread_ops"] == 2 * two["thread_ops"] > 0
    blocks = ceil(512 / SM90A.sms)
    assert one["warp_ops"] == blocks * 1 * one["thread_ops"] and two["warp_ops"] == blocks * 2 * two["thread_ops"]
    wide = features(reduction, {"rows_per_block": 1, "threads": 32, "vector": 8}, SM90A)
    assert wide["thread_ops"] == one["thread_ops"]  # 8 lanes in one step: the same 8 elements a thread
