"""Kernel keys (emmy/schedule/key.py): stable across layers, models, names and decisions; another
body, shape, dtype or target gives another key."""

from __future__ import annotations

import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import FloatAttr, StringAttr

import loop_examples as L
from emmy.context import make_context
from emmy.dialects.tile import KernelOp
from emmy.driver import CompileOptions, compile_model
from emmy.ir_io import parse_module, parse_pipeline, run_passes
from emmy.schedule.key import SPACE_VERSION, KernelKey, canonical_structure, describe, kernel_key
from emmy.targets import get_target
from tiny_models import write_tiny_model

QWEN3 = "Qwen/Qwen3-Embedding-0.6B"
SM90A = get_target("sm_90a")


def kernels(model: str, layer: int = 0, tokens: int = 32, target: str = "sm_90a", keep_undecided: list | None = None):
    """The tile.kernel ops of one compiled layer (after decide-forks), by name."""

    def hook(name, module):
        if name == "convert-loop-to-tile" and keep_undecided is not None:
            keep_undecided.append(module.clone())

    result = compile_model(CompileOptions(model=model, layer=layer, tokens=tokens, target=target, stop_after="tile"), hook)
    return {k.kernel_name: k for k in result.module.walk() if isinstance(k, KernelOp)}


def keys(ops: dict[str, KernelOp], target=SM90A) -> dict[str, KernelKey]:
    return {name: kernel_key(op, target) for name, op in ops.items()}


@pytest.fixture(scope="module")
def qwen3_32():
    undecided: list = []
    ops = kernels(QWEN3, keep_undecided=undecided)
    return ops, {k.kernel_name: k for k in undecided[0].walk() if isinstance(k, KernelOp)}


def test_key_parts(qwen3_32):
    ops, _ = qwen3_32
    key = kernel_key(ops["down_proj_residual"], SM90A)
    assert key.target == "sm_90a" and key.version == SPACE_VERSION
    assert len(key.structure) == 64 and int(key.structure, 16) >= 0
    assert key.shape == "m=32 n=1024 k=3072; 1x32x1024xbf16,1024x3072xbf16,1x32x3072xbf16->1x32x1024xbf16"
    assert key.extents() == {"m": 32, "n": 1024, "k": 3072}
    head, shape, target, version = key.id.split(":")
    assert head == key.structure[:12] and len(shape) == 8 and target == "sm_90a" and version == f"v{SPACE_VERSION}"
    assert key.structure_id == f"{key.structure[:12]}:sm_90a:v{SPACE_VERSION}"
    assert str(key) == key.id


def test_same_key_in_other_layers(qwen3_32):
    ops, _ = qwen3_32
    assert keys(kernels(QWEN3, layer=5)) == keys(ops)


def test_decided_knobs_do_not_change_the_key(qwen3_32):
    ops, undecided = qwen3_32
    assert not any(k.is_decided for k in undecided.values()) and all(k.is_decided for k in ops.values())
    assert keys(undecided) == keys(ops)


def test_names_do_not_change_the_key(qwen3_32):
    ops, _ = qwen3_32
    op = ops["o_proj_residual"]
    before = kernel_key(op, SM90A)
    copy = op.clone()
    copy.properties["sym_name"] = StringAttr("renamed")
    for inner in copy.walk():
        for r in inner.results:
            r.name_hint = "v"
    for arg in copy.body.block.args:
        arg.name_hint = "arg"
    assert kernel_key(copy, SM90A) == before
    copy.erase(safe_erase=False)


def test_another_body_gives_another_structure(qwen3_32):
    ops, _ = qwen3_32
    op = ops["rms_norm_gate_up_proj_silu"]
    copy = op.clone()
    eps = next(c for c in copy.walk() if isinstance(c, arith.ConstantOp) and isinstance(c.value, FloatAttr)
               and c.value.value.data == pytest.approx(1e-6))
    eps.properties["value"] = FloatAttr(1e-5, eps.value.type)
    changed, original = kernel_key(copy, SM90A), kernel_key(op, SM90A)
    assert changed.structure != original.structure and changed.shape == original.shape
    copy.erase(safe_erase=False)


def test_distinct_kernels_have_distinct_keys(qwen3_32):
    ops, _ = qwen3_32
    found = keys(ops)
    # the two weight products of gate and up are one body on one shape: one key
    assert found["rms_norm_gate_up_proj_silu_weights"] == found["rms_norm_gate_up_proj_silu_weights_1"]
    distinct = {k for name, k in found.items() if name != "rms_norm_gate_up_proj_silu_weights_1"}
    assert len(distinct) == len(found) - 1


def test_another_shape_same_structure(qwen3_32):
    ops, _ = qwen3_32
    small, large = keys(ops), keys(kernels(QWEN3, tokens=64))
    for name in small:
        if name.endswith("_weights") or name.endswith("_weights_1"):
            assert small[name] == large[name]  # weights only: no token axis
            continue
        assert small[name].structure_id == large[name].structure_id, name
        assert small[name].id != large[name].id and small[name].shape != large[name].shape
    assert large["down_proj_residual"].extents()["m"] == 64


def test_another_target_another_key(qwen3_32):
    ops, _ = qwen3_32
    op = ops["down_proj_residual"]
    a, b = kernel_key(op, SM90A), kernel_key(op, get_target("sm_80"))
    assert a.structure == b.structure and a.id != b.id and a.structure_id != b.structure_id
    # compiled for sm_80, the knob domains differ (no wgmma): another structure
    assert kernel_key(kernels(QWEN3, target="sm_80")["down_proj_residual"], get_target("sm_80")).structure != a.structure


def test_same_body_in_other_families(tmp_path):
    """Llama and Mistral layers of one size are the same kernels; Qwen2's and Qwen3's projections
    are the same as Llama's, their attention kernels (which add Qwen2's q/k/v biases, and apply
    Qwen3's q/k norms) are not."""
    llama = keys(kernels(write_tiny_model(tmp_path / "llama", "llama")))
    mistral = keys(kernels(write_tiny_model(tmp_path / "mistral", "mistral")))
    qwen2 = keys(kernels(write_tiny_model(tmp_path / "qwen2", "qwen2")))
    qwen3 = keys(kernels(write_tiny_model(tmp_path / "qwen3", "qwen3")))
    assert llama == mistral
    for name in ("rms_norm_qkv_proj", "o_proj_residual", "down_proj_residual", "rms_norm_gate_up_proj_silu"):
        assert qwen2[name] == llama[name], name
    for name in ("o_proj_residual", "down_proj_residual", "rms_norm_gate_up_proj_silu"):
        assert qwen3[name] == llama[name], name
    assert len({qwen2["attention"].structure, qwen3["attention"].structure, llama["attention"].structure}) == 3


def tile_kernel(text: str) -> KernelOp:
    """The tile.kernel of a loop-stage example (convert-loop-to-tile, knobs undecided)."""
    ctx = make_context()
    module = parse_module(ctx, text, "example")
    run_passes(ctx, module, parse_pipeline("convert-loop-to-tile"))
    return next(op for op in module.walk() if isinstance(op, KernelOp))


def test_another_dtype_another_key():
    text, _ = L.matmul(64, 96, 128, target="sm_90a")
    bf16, f16 = kernel_key(tile_kernel(text), SM90A), kernel_key(tile_kernel(text.replace("bf16", "f16")), SM90A)
    assert bf16.shape == "m=64 n=96 k=128; 64x128xbf16,96x128xbf16->64x96xbf16"
    assert f16.shape == "m=64 n=96 k=128; 64x128xf16,96x128xf16->64x96xf16"
    assert f16.structure != bf16.structure and f16.id != bf16.id
    # the kernel's and the loop's names are not part of it
    assert kernel_key(tile_kernel(L.matmul(64, 96, 128, target="sm_90a", name="other")[0]), SM90A) == bf16


def test_canonical_structure_strips_names_and_sizes(qwen3_32):
    ops, _ = qwen3_32
    text = canonical_structure(ops["o_proj_residual"])
    assert "tile.kernel @kernel kind \"contraction\" axes [m, n, k]" in text
    assert "o_proj" not in text and "emmy.origin" not in text and "emmy.fused_from" not in text
    assert "emmy.phase" not in canonical_structure(ops["rms_norm_qkv_proj_weights"])
    assert ops["rms_norm_qkv_proj_weights"].attributes["emmy.phase"].data == "prepare"
    assert "tensor<?x?x?xbf16>" in text and "1024" not in text and '"rule"' not in text
    # the original is left as it was
    assert ops["o_proj_residual"].kernel_name == "o_proj_residual" and ops["o_proj_residual"].is_decided


def test_describe(qwen3_32):
    ops, _ = qwen3_32
    text = describe(ops["down_proj_residual"])
    assert text.startswith("contraction m=32 n=1024 k=3072; 1x32x1024xbf16, 1024x3072xbf16, 1x32x3072xbf16 -> 1x32x1024xbf16; ")
    assert "3 loop.load" in text and "1 loop.reduce sum[k]" in text and "1 loop.store" in text
