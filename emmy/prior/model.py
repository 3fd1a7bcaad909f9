"""The prior's cost model: a candidate's terms (`emmy.prior.features`) -> seconds.

    predict(features, coeffs) -> seconds          # one candidate (or arrays of them: numpy)
    DEFAULTS                                      # the coefficients before any fit
    rank(info, points, target, prior) -> [(values, predicted_s), ...]   fastest first

The time of a kernel is its slower side, compute or memory, plus a share of the other (they
overlap, not perfectly), times what keeps the units from their peak, plus its launches:

    compute  = flops * quant / (peak_flops * eff * feed * hide) + recompute_flops * quant / (fp32_flops
               * recompute_eff * hide) + serial_steps * step_s + softmax_steps * softmax_step_s
               + recompute_rows * recompute_row_s
               + thread_ops * thread_op_s + warp_ops * warp_op_s
               (a reduction's issue side: its operations overlap its loads like any arithmetic)
               eff = compute_eff on tensor cores, fma_eff on FMA units; feed = min(1, intensity /
               knee) for tensor cores (a tile that stages too little per multiply-add starves
               them); hide = warps / (warps + hide_warps) (latency hiding)
    memory   = (unique + (1 - l2) * again) / (dram * dram_eff * pull)
               + l2 * again / (l2_bandwidth * l2_eff * pull),  again = reread + recompute + workspace
               + stats
               pull = min(1, busy * busy_sms): a launch on few SMs pulls less than the bandwidth
               times (depth + depth_half) / depth, depth = stages - 1 loads in flight (a deeper
               pipeline hides more of their latency; 1 + depth_half unstaged, 1 without a k loop)
               over flight = min(1, inflight_bytes / (dram / sms * mem_latency_s)) for kernels
               without a k loop (Little's law: an SM pulls its share of the bandwidth only with
               that many bytes of loads in flight; 1 where the term is 0)
    kernel   = (max(compute, memory) + overlap * min(compute, memory)) * (1 + unstaged_cost
               * unstaged) * (1 + single_slice_cost * single_slice)
               * (1 + multi_slice_cost * multi_slice) * (1 + spill_cost * spill_bytes / 1024)
               * (1 + reg_cost * reg_overflow / 64) + rounds * round_s + idle_rounds * idle_round_s
               + ticket_bytes / (l2_bandwidth / sms * ticket_eff) + tickets * ticket_s
               + prologue_loads * prologue_load_s + recompute_chain * recompute_op_s
               (a fused kernel's row statistics: the pass before its k loop, whose loads each warp
               waits for one by one, or the fold each consumer thread runs between its MMAs; the
               H200 shows neither hidden under the kernel's loads or MMAs, so both come after
               the overlap)
    seconds  = kernel + launches * launch_s

The rates and bandwidths come from the target's table; the coefficients (all positive) are what
`emmy prior fit` fits per target. The defaults are physically
reasonable guesses, checked for scale against the H200 kernel times in docs/bench (the Qwen3
layer's kernels at 512 tokens, h200-o-down-schedules.log), so the model ranks sensibly before
any fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from emmy.diagnostics import EmmyError

if TYPE_CHECKING:
    from emmy.analysis.classify import KernelInfo
    from emmy.prior.store import Prior
    from emmy.targets import Target
    from emmy.tuning.knobs import KnobValue

# The coefficients before any fit (`emmy prior fit` replaces them per target).
DEFAULTS: dict[str, float] = {
    "compute_eff": 0.85,  # share of the peak rate the inner loop reaches
    "fma_eff": 0.3,  # share of the FMA rate CUDA-core arithmetic reaches (workers = thread)
    "recompute_eff": 0.08,  # ... and recomputation inside a fused kernel (on its critical path)
    "knee": 32.0,  # multiply-adds per staged element (per k) that keep tensor cores fed
    "step_s": 4e-8,  # one k-step's barrier and wait, however small the step
    "softmax_step_s": 1.3e-6,  # one key block of flash attention: two products, the online softmax, barriers
    "hide_warps": 2.0,  # resident warps at which latency is half hidden
    "dram_eff": 0.9,  # share of the copy bandwidth a kernel's loads reach
    "l2_eff": 1.0,  # share of the L2 bandwidth re-read tiles reach
    "busy_sms": 2.0,  # 1 / the share of SMs that already pull the whole bandwidth
    "depth_half": 0.5,  # loads in flight (stages - 1) at which a pipeline hides two thirds of their latency
    "overlap": 0.1,  # share of the faster side that does not overlap with the slower
    "round_s": 0.5e-6,  # a round of blocks: the pipeline's fill (first loads' latency) and the epilogue
    "unstaged_cost": 1.0,  # operands straight to registers, no staging
    "single_slice_cost": 0.4,  # wgmma_ws with one 64-row slice per consumer: nothing else to issue
    "multi_slice_cost": 0.15,  # two slices per warpgroup: twice the accumulators
    "spill_cost": 0.5,  # per KiB spilled per thread
    "reg_cost": 1.0,  # per 64 accumulator registers past the budget
    "launch_s": 1.0e-6,  # one launch under CUDA-graph replay
    "recompute_row_s": 2e-8,  # one computed row of fused attention, on the critical path
    "recompute_op_s": 4e-9,  # one element of a fused row statistic a consumer thread folds between its MMAs
    "ticket_eff": 1.0,  # share of one SM's part of the L2 bandwidth a last block's read-back reaches
    "ticket_s": 1.5e-6,  # a last block's fence, ticket and wait for the other parts' flags, in series
    "idle_round_s": 1e-6,  # a round of reduction blocks with every thread idle: barriers over them all
    "mem_latency_s": 6e-7,  # a DRAM load's latency under load (Little's law: bytes in flight per SM)
    "thread_op_s": 2e-9,  # one operation a reduction's thread runs after its others (a dependent instruction's latency)
    "warp_op_s": 2.5e-10,  # one warp instruction of a reduction on the busiest SM (4 schedulers at ~2 GHz: 1.3e-10)
    "prologue_load_s": 2e-7,  # one load of a fused statistics pass waited for alone (an L2 round trip under load, ~400 cycles)
}
NAMES = tuple(DEFAULTS)


def predict(f: Mapping, coeffs: Mapping[str, float]) -> float | np.ndarray:
    """Seconds for the terms `f` (floats, or numpy arrays of many candidates' terms)."""
    c = coeffs
    feed = np.where(f["tensor"] > 0, np.minimum(1.0, f["intensity"] / c["knee"]), 1.0)
    hide = f["warps_resident"] / (f["warps_resident"] + c["hide_warps"])
    eff = np.where(f["tensor"] > 0, c["compute_eff"], c["fma_eff"])
    compute = f["flops"] * f["quant"] / (f["peak_flops"] * eff * feed * hide)
    # recomputation runs inside the blocks, so on the busiest SM too (quant), not spread over all
    compute = compute + f["recompute_flops"] * f["quant"] / (f["fp32_flops"] * c["recompute_eff"] * hide) \
        + f["serial_steps"] * c["step_s"]
    compute = compute + f["softmax_steps"] * c["softmax_step_s"] + f["recompute_rows"] * c["recompute_row_s"]
    # a reduction thread's operations, one after another, and the busiest SM's warp instructions:
    # the issue side of the kernel, which overlaps with its loads like any arithmetic
    compute = compute + f["thread_ops"] * c["thread_op_s"] + f["warp_ops"] * c["warp_op_s"]
    pull = np.minimum(1.0, f["busy"] * c["busy_sms"])
    # re-read tiles, recomputed rows and partial sums (read back soon): from L2 where they fit
    again = f["reread_bytes"] + f["recompute_bytes"] + f["workspace_bytes"] + f["stats_bytes"]
    l2 = f["l2_fraction"]
    dram_s = (f["unique_bytes"] + (1.0 - l2) * again) / (f["dram_bandwidth"] * c["dram_eff"] * pull)
    l2_s = l2 * again / (f["l2_bandwidth"] * c["l2_eff"] * pull)
    depth = np.maximum(f["stages"] - 1.0, 0.0)
    # stages = 0: a kernel without a k pipeline (elementwise, reductions: occupancy hides latency)
    hidden = np.where(depth > 0, (depth + c["depth_half"]) / np.maximum(depth, 1.0),
                      np.where(f["stages"] > 0, 1.0 + c["depth_half"], 1.0))
    # Little's law for kernels without a k pipeline: too few bytes in flight per SM pull less
    need = f["dram_bandwidth"] / f["sms"] * c["mem_latency_s"]
    flight = np.where(f["inflight_bytes"] > 0, np.minimum(1.0, f["inflight_bytes"] / need), 1.0)
    memory = (dram_s + l2_s) * hidden / flight
    kernel = np.maximum(compute, memory) + c["overlap"] * np.minimum(compute, memory)
    kernel = kernel * (1.0 + c["unstaged_cost"] * f["unstaged"])
    kernel = kernel * (1.0 + c["single_slice_cost"] * f["single_slice"]) * (1.0 + c["multi_slice_cost"] * f["multi_slice"])
    kernel = kernel * (1.0 + c["spill_cost"] * f["spill_bytes"] / 1024.0) * (1.0 + c["reg_cost"] * f["reg_overflow"] / 64.0)
    # a tile's last block waits for the other parts' flags, then adds them alone, after the rest
    # (at one SM's share of L2)
    kernel = kernel + f["rounds"] * c["round_s"] + f["idle_rounds"] * c["idle_round_s"] \
        + f["ticket_bytes"] * f["sms"] / (f["l2_bandwidth"] * c["ticket_eff"]) + f["tickets"] * c["ticket_s"]
    # a fused kernel's row statistics: the pass before the k loop (nothing overlaps its loads,
    # waited for one by one) or the fold each consumer thread runs between its MMAs
    kernel = kernel + f["prologue_loads"] * c["prologue_load_s"] + f["recompute_chain"] * c["recompute_op_s"]
    out = kernel + f["launches"] * c["launch_s"]
    return float(out) if np.ndim(out) == 0 else out


def with_target(f: Mapping[str, float], target: Target) -> dict[str, float]:
    """The terms and the target's bandwidths, FMA rate and SM count, as `predict` reads them."""
    return {**f, "dram_bandwidth": target.dram_bandwidth, "l2_bandwidth": target.l2_bandwidth,
            "fp32_flops": target.fp32_flops, "sms": float(target.sms)}


def check_coeffs(coeffs: Mapping[str, object], where: str) -> dict[str, float]:
    """The coefficients as floats: every name of DEFAULTS, each a positive finite number (an
    EmmyError naming `where` and the coefficient otherwise; unknown names too)."""
    if not isinstance(coeffs, Mapping):
        raise EmmyError(f"{where}: \"coefficients\" must be an object of numbers")
    unknown = sorted(set(coeffs) - set(DEFAULTS))
    if unknown:
        raise EmmyError(f"{where}: unknown coefficients {', '.join(unknown)}", hint="known: " + ", ".join(NAMES))
    out = {}
    for name in NAMES:
        v = coeffs.get(name, DEFAULTS[name])
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
            raise EmmyError(f"{where}: coefficient {name} must be a positive number, not {v!r}")
        out[name] = float(v)
    return out


def rank(info: KernelInfo, points: Iterable[Mapping[str, KnobValue]], target: Target,
         prior: Prior | Mapping[str, float] | None = None) -> list[tuple[dict, float]]:
    """The points (legal knob assignments of the kernel `info`), fastest predicted first:
    (values, predicted seconds). With a fitted `Prior`, a point whose terms fall outside what the
    fit saw is slowed by its envelope penalty (`Prior.penalty`); plain coefficients (or None:
    DEFAULTS) rank without one. Points the plan cannot build are left out. Ties keep the
    points' order."""
    from emmy.prior.features import Kernel

    kernel = Kernel(info, target)
    scored = []
    for i, values in enumerate(points):
        t = score(kernel, values, prior)
        if t is not None:
            scored.append((t, i, dict(values)))
    scored.sort(key=lambda s: (s[0], s[1]))
    return [(v, t) for t, _, v in scored]


def score(kernel, values: Mapping[str, KnobValue], prior, penalized: bool = True, base: float = 0.0) -> float | None:
    """Predicted seconds of one candidate of `kernel` (a features.Kernel): the model's time times
    a fitted Prior's learned correction (`Prior.corrected`), and its envelope penalty when
    `penalized` (for the distance past `base`: `Prior.penalty`); None when the plan cannot build
    it or the prediction is not a positive number."""
    from emmy.prior.store import Prior

    try:
        f = kernel.features(values)
    except EmmyError:
        return None
    if isinstance(prior, Prior):
        coeffs = prior.coeffs
        factor = prior.corrected(kernel.info.kind, values)
        if penalized:
            factor *= prior.penalty(kernel.info.kind, f, values, base)
    else:
        coeffs, factor = (prior if prior is not None else DEFAULTS), 1.0
    with np.errstate(all="ignore"):
        t = predict(with_target(f, kernel.target), coeffs) * factor
    return t if np.isfinite(t) and t > 0 else None


__all__ = ["DEFAULTS", "NAMES", "check_coeffs", "predict", "rank", "score", "with_target"]
