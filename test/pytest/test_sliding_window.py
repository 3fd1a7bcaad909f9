"""Sliding-window attention past the frontend: the attention analysis finds the window inside
the causal mask, the plan starts each query block's key blocks at its window (wgmma_ws) and the
tile interpreter follows it, and the kernel's CUDA carries the window and builds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from emmy.cli.main import run
from emmy.driver import CompileOptions, compile_model
from emmy.schedule.attention import AttentionPlan
from tiny_models import write_tiny_model

ROOT = Path(__file__).resolve().parents[2]


def _model(tmp_path: Path, window: int) -> str:
    return write_tiny_model(tmp_path / "mistral", "mistral", sliding_window=window)


def _attention_plan(module) -> AttentionPlan:
    from emmy.dialects.tile import KernelOp
    from emmy.schedule.plan import plan_kernel
    from emmy.targets import get_target

    (att,) = [op for op in module.walk() if isinstance(op, KernelOp) and op.kernel_name == "attention"]
    return plan_kernel(att, get_target("sm_90a")).parts[0].plan


def test_every_main_loop_starts_at_the_window(tmp_path):
    """Window 16 over 300 tokens, blocks of 64: query block b's first key is 64 b - 15, so its
    key blocks start at (64 b - 15) // 64 = b - 1 (b >= 1) and end at b, with wgmma_ws,
    mma_sync and wgmma's 3-stage ring (flash_wgmma) alike."""
    d = _model(tmp_path, 16)
    pins = ("attention.workers=wgmma_ws", "attention.block_q=64", "attention.block_kv=64")
    ws = _attention_plan(compile_model(CompileOptions(model=d, layer=0, tokens=300, target="sm_90a", pins=pins,
                                                      stop_after="tile")).module)
    assert (ws.window, ws.causal, ws.causal_offset) == (16, True, 0)
    assert [ws.key_parts(b) for b in range(5)] == [[(0, 1)], [(0, 2)], [(1, 3)], [(2, 4)], [(3, 5)]]
    def plan(*pins):
        opts = CompileOptions(model=d, layer=0, tokens=300, target="sm_90a", pins=pins, stop_after="tile")
        return _attention_plan(compile_model(opts).module)

    mma = plan("attention.workers=mma_sync", "attention.block_q=64", "attention.block_kv=64")
    assert [mma.key_parts(b) for b in range(3)] == [[(0, 1)], [(0, 2)], [(1, 3)]]
    ring = plan("attention.workers=wgmma", "attention.stages=3", "attention.block_q=64", "attention.block_kv=64")
    assert ring.window == 16 and [ring.key_parts(b) for b in range(5)] == [[(0, 1)], [(0, 2)], [(1, 3)], [(2, 4)],
                                                                           [(3, 5)]]


@pytest.mark.parametrize("pins", [
    "attention.workers=wgmma_ws",
    "attention.workers=wgmma_ws;attention.schedule=persistent",
    "attention.workers=wgmma_ws;attention.split_kv=2;attention.block_q=64;attention.block_kv=64",
    "attention.workers=mma_sync",
    "attention.workers=mma_sync;attention.stages=1",
    "attention.workers=wgmma;attention.stages=3",
])
def test_interpreted_layer_with_the_plans_key_blocks_matches_pytorch(pins, tmp_path, capsys):
    """The tile interpreter visits the key blocks the plan does: one block too few at the start
    (a visible key skipped) leaves rows with no key (an infinite error), so this checks the
    plan's first block as well as the mask."""
    assert run(["run", _model(tmp_path, 16), "--layer", "0", "--tokens", "300", "--target", "sm_90a",
                "--knob", pins, "--backend", "interpret", "--check", "--tolerance", "5e-3"]) == 0


def _score_lambdas(src: str) -> list[str]:
    """The bodies of the generated `(q, kv, dot) -> float` lambdas, in order (the score, then
    the free score, of each attention call)."""
    out = []
    for part in src.split("-> float {")[1:]:
        if "const float dot_" in src[: src.index(part)].rsplit("auto ", 1)[-1]:
            out.append(part.split("};", 1)[0])
    return out


@pytest.mark.parametrize("pins, call", [
    ("attention.workers=wgmma_ws;attention.schedule=persistent", "run_ws<"),
    ("attention.workers=wgmma_ws;attention.schedule=grid", "run<"),
    ("attention.workers=wgmma_ws;attention.block_q=192;attention.warps=12;attention.split_kv=2", "run<"),
    ("attention.workers=mma_sync", "run<"),
    ("attention.workers=wgmma;attention.stages=3", "run<"),
])
def test_windowed_kernel_carries_the_window_and_builds(pins, call, tmp_path):
    """WINDOW reaches every main loop (those that start at the window and flash_wgmma's ring,
    which visits the blocks before it): block_masked then tells the blocks inside the window
    and below the diagonal, whose free score has neither the causal nor the window's compare and
    folds the scale (one multiplication, a non-zero fold argument)."""
    from emmy.backend.plan import cuda_source

    d = _model(tmp_path, 100)
    opts = CompileOptions(model=d, layer=0, tokens=500, target="sm_90a", pins=tuple(pins.split(";")),
                          stop_after="cuda")
    src = cuda_source(compile_model(opts).module)
    calls = {ln.split("emmy::attention::")[1].split(">")[0] for ln in src.splitlines() if "emmy::attention::" + call in ln}
    assert calls and all(c.endswith(", 100") for c in calls), calls  # WINDOW, the last template argument
    score, free = _score_lambdas(src)[:2]
    assert score.count(" ? ") == 2 and " ? " not in free and free.count(" * ") == 1, (score, free)
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    cu = tmp_path / "layer.cu"
    cu.write_text(src)
    cmd = ["nvcc", "-c", "-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a",
           f"-I{ROOT / 'emmy' / 'backend' / 'runtime'}", str(cu), "-o", str(tmp_path / "layer.o")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]


def test_the_prior_counts_the_windows_key_blocks(tmp_path):
    """The prior costs a windowed attention by the key blocks its query blocks visit (from
    first_key_block to the causal end): window 16 over 300 tokens in blocks of 64 visits 1 + 4 x 2
    = 9 key blocks of the 15 a causal one does, at most 2 in a query block (not 5)."""
    from emmy.analysis.classify import classify
    from emmy.dialects.tile import KernelOp
    from emmy.prior.features import features
    from emmy.targets import get_target
    from emmy.tuning.knobs import knob_space_for
    from emmy.tuning.legality import check
    from emmy.tuning.rules import decide

    target = get_target("sm_90a")
    pins = {"workers": "wgmma", "stages": 3, "block_q": 64, "block_kv": 64, "warps": 4}
    f = {}
    for name, window in (("windowed", 16), ("causal", None)):
        d = write_tiny_model(tmp_path / name, "mistral", sliding_window=window)
        module = compile_model(CompileOptions(model=d, layer=0, tokens=300, target="sm_90a", stop_after="tile")).module
        (att,) = [op for op in module.walk() if isinstance(op, KernelOp) and op.kernel_name == "attention"]
        info = classify(att)
        values = {**{k: c.value for k, c in decide(info, target, knob_space_for(info, target)).items()}, **pins}
        assert not check(info, values, target)
        f[name] = features(info, values, target)
    assert f["windowed"]["flops"] == pytest.approx(f["causal"]["flops"] * 9 / (5 * 5 * (0.5 + 0.5 / 5)))
    assert f["windowed"]["softmax_steps"] * 5 == f["causal"]["softmax_steps"] * 2
