"""Generated CUDA compiles with nvcc for sm_80, sm_90 and sm_90a (no GPU needed).

The SASS checks (HGMMA for wgmma kernels on sm_90a, HMMA for mma.sync on sm_80) need cuobjdump;
they are skipped when it is not installed. The whole-layer test runs the full pipeline on the
Qwen3 decoder layer and compiles it for the three targets (tens of seconds).
"""

from __future__ import annotations

import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from emmy.backend.nvcc import compile_source, cuobjdump_path, nvcc_path, parse_ptxas, ptxas_report, sass
from emmy.backend.plan import launch_plan
from emmy.context import make_context
from emmy.diagnostics import EmmyError
from emmy.ir_io import parse_module, parse_pipeline, run_passes

from tile_examples import (
    LOWER, gate_up, heads_matmul_residual, lower, rms_norm, rmsnorm_matmul, silu_mul, weighted_norm_matmul,
)

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH"),
]

ROOT = Path(__file__).resolve().parents[2]
FRONT = "convert-torch-to-tensor,tensor-merge-siblings,convert-tensor-to-loop,loop-fuse,convert-loop-to-tile"

CASES = {
    "sm_80": [
        rmsnorm_matmul(M=72, N=80, K=512, target="sm_80", workers="mma_sync", split_k=2, stages=3, block_k=64),
        rmsnorm_matmul(M=72, N=80, K=512, target="sm_80", workers="mma_sync", split_k=4, stages=3, block_k=64,
                       combine="last_block"),
        rmsnorm_matmul(M=40, N=48, K=96, target="sm_80", workers="thread", block_m=32, block_n=32, block_k=32, warps=4),
        gate_up(target="sm_80"),
        rmsnorm_matmul(M=72, N=80, K=1024, target="sm_80", workers="mma_sync", stages=8, block_k=32),
        silu_mul(target="sm_80"),
        rms_norm(target="sm_80"),
    ],
    "sm_90": [
        heads_matmul_residual(target="sm_90"),
        rmsnorm_matmul(M=72, N=80, K=192, target="sm_90", workers="mma_sync", fusion="split", block_k=16),
    ],
    "sm_90a": [
        rmsnorm_matmul(M=200, N=136, K=520, target="sm_90a", workers="wgmma", block_m=128, block_n=128, block_k=64, stages=3, warps=8),
        rmsnorm_matmul(M=64, N=64, K=512, target="sm_90a", workers="wgmma", block_k=32, split_k=2, stages=4),
        gate_up(target="sm_90a", workers="wgmma", block_m=64, block_n=64, block_k=64, warps=4),
        rmsnorm_matmul(M=200, N=96, K=448, target="sm_90a", workers="wgmma_ws", block_m=128, block_n=64, warps=8, stages=4),
        gate_up(target="sm_90a", workers="wgmma_ws", block_m=64, block_n=64, block_k=64, warps=4, stages=3),
        gate_up(M=1000, N=200, K=256, target="sm_90a", workers="wgmma_ws", block_m=64, block_n=64, block_k=64,
                warps=4, stages=3, schedule="persistent"),
        weighted_norm_matmul(M=2000, N=512, K=256, schedule="persistent"),
        weighted_norm_matmul(M=200, N=256, K=1024, copy="tma", block_k=128, stages=3),
        weighted_norm_matmul(M=500, N=256, K=1024, copy="tma", cluster=2),
        weighted_norm_matmul(M=900, N=512, K=256, copy="tma", cluster=2, group_m=4),
        weighted_norm_matmul(M=2000, N=512, K=256, schedule="persistent", copy="tma", group_m=8),
        weighted_norm_matmul(M=2000, N=512, K=256, schedule="persistent", copy="tma", cluster=2, group_m=4),
        weighted_norm_matmul(M=1100, N=2048, K=1024, block_n=128, copy="tma", split_tail=4, fusion="split"),
        weighted_norm_matmul(M=2000, N=512, K=256, schedule="persistent", copy="tma"),
        rmsnorm_matmul(M=200, N=96, K=448, target="sm_90a", workers="wgmma_ws", block_m=128, block_n=64, warps=8,
                       stages=4, copy="tma"),
        weighted_norm_matmul(M=200, N=256, K=1024, copy="tma", split_k=4, combine="last_block"),
        weighted_norm_matmul(M=1100, N=1024, K=1024, copy="tma", schedule="stream_k", fusion="split"),
        weighted_norm_matmul(M=300, N=200, K=512, schedule="stream_k", fusion="split"),
        # slices = cols, alone and in pairs along n multicasting halves of A (in planes: 3-D maps)
        heads_matmul_residual(S=300, H=4, D=128, N=256, target="sm_90a", workers="wgmma_ws", block_m=192,
                              block_n=128, block_k=64, warps=8, stages=4, copy="tma", slices="cols"),
        heads_matmul_residual(S=300, H=4, D=128, N=256, target="sm_90a", workers="wgmma_ws", block_m=192,
                              block_n=128, block_k=64, warps=8, stages=4, copy="tma", slices="cols", cluster=2),
        heads_matmul_residual(S=1000, H=4, D=128, N=512, target="sm_90a", workers="wgmma_ws", block_m=128,
                              block_n=128, block_k=64, warps=8, stages=4, copy="tma", slices="cols", cluster=2,
                              schedule="persistent", group_m=2),
    ],
}


def _build(args):
    arch, i, text, tmp = args
    plan = launch_plan(lower(text))
    path = compile_source(plan.source, arch, tmp / f"{arch}_{i}", name="k")
    return arch, i, plan, path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nvcc")
    jobs = [(arch, i, text, tmp) for arch, texts in CASES.items() for i, text in enumerate(texts)]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(_build, jobs))
    return {(arch, i): (plan, path) for arch, i, plan, path in results}


@pytest.mark.parametrize("arch,index", [(a, i) for a, ts in CASES.items() for i in range(len(ts))])
def test_generated_source_compiles(built, arch, index):
    plan, path = built[(arch, index)]
    assert path.exists() and path.stat().st_size > 0
    assert path.suffix == ".cubin"
    assert (path.parent / "k.cu").read_text() == plan.source


def test_sass_has_tensor_core_instructions(built):
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump is not installed")
    text = sass(built[("sm_90a", 0)][1])
    assert "HGMMA" in text, "a wgmma kernel without HGMMA runs on a slower path"
    text = sass(built[("sm_80", 0)][1])
    assert "HMMA" in text and "HGMMA" not in text


def test_no_accumulator_read_before_the_last_wgmma_wait(built):
    """In the SASS of every sm_90a case (slices = cols among them, where CUDA 13.0's ptxas moved
    the epilogue's reads above the wait before emmy::wgmma::settle), nothing touches a wgmma's
    accumulators before the wait that retires its group (tools/kernel_checks/wgmma_hazards.py)."""
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "kernel_checks"))
    from wgmma_hazards import hazards

    for (arch, i), (_, path) in built.items():
        if arch == "sm_90a":
            assert hazards(sass(path)) == [], f"case {i}"


def test_ptxas_report(tmp_path):
    plan = launch_plan(lower(rmsnorm_matmul(target="sm_90a", workers="wgmma", stages=3)))
    report = ptxas_report(plan.source, "sm_90a", tmp_path)
    info = report["rms_norm_qkv_proj"]
    assert 32 <= info.registers <= 255
    assert info.spill_stores == 0 and info.spill_loads == 0


def test_concurrent_builds_of_one_source_do_not_share_files(tmp_path):
    """Two processes (or threads) building the same source at once each write their own `.cu`
    and `.cubin` in the source's build folder (emmy.backend.run.private_name): both get the
    whole cubin, the cache holds one, and the folder keeps the source as `emmy.cu`."""
    import subprocess
    import sys

    from emmy.backend.run import build_cubin, cubin_path

    plan = launch_plan(lower(rmsnorm_matmul(target="sm_80", workers="mma_sync", stages=2)))
    src = tmp_path / "kernel.cu"
    src.write_text(plan.source)
    script = ("import sys; from pathlib import Path; from emmy.backend.run import build_cubin; "
              "sys.stdout.write(str(len(build_cubin(Path(sys.argv[1]).read_text(), 'sm_80', Path(sys.argv[2])))))")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(src), str(tmp_path / "cache")],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        here = list(pool.map(lambda _: len(build_cubin(plan.source, "sm_80", tmp_path / "cache")), range(2)))
    sizes = [int(p.communicate()[0]) for p in procs] + here
    cubin = cubin_path(plan.source, "sm_80", tmp_path / "cache")
    assert sizes == [cubin.stat().st_size] * 5
    folder = cubin.with_name(cubin.stem.rsplit("-", 1)[0])
    assert sorted(p.name for p in folder.iterdir()) == ["emmy.cu"]
    assert (folder / "emmy.cu").read_text() == plan.source


def test_threads_storing_one_cache_file_at_once(tmp_path):
    """Threads of one process writing the same cache file at once (a benchmark's variants that
    build one kernel alike) each finish, leave one whole file and no temporary behind."""
    from emmy.backend.run import store_atomically

    path = tmp_path / "k.cubin"
    payloads = [bytes([i]) * 200_000 for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: [store_atomically(path, payloads[i % 8]) for _ in range(20)], range(16)))
    assert path.read_bytes() in payloads
    assert [p.name for p in tmp_path.iterdir()] == ["k.cubin"]


def test_parse_ptxas_text():
    text = """ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    16 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 72 registers, used 1 barriers, 128 bytes smem
ptxas info    : Compiling entry function 'k2' for 'sm_90'
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers
"""
    text += ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due "
             "to non wgmma instructions defining accumulator registers of a wgmma between start and end of the "
             "pipeline stage in the function 'k2'\n")
    r = parse_ptxas(text)
    assert (r["k1"].registers, r["k1"].smem, r["k1"].stack, r["k1"].spill_stores, r["k1"].spill_loads) == (72, 128, 16, 4, 8)
    assert r["k2"].registers == 8 and r["k2"].spill_loads == 0
    assert r["k2"].wgmma_serialized and not r["k1"].wgmma_serialized


def test_a_deep_ring_builds_without_spills(tmp_path):
    """64 x 64 tiles 12 deep, the ring a small tile needs to keep enough copies in flight
    (12 slots of 16 KB): the whole ring in shared memory, no spills, wgmmas not serialized."""
    plan = launch_plan(lower(weighted_norm_matmul(M=512, N=1024, K=2048, block_m=64, block_n=64, warps=4,
                                                  stages=12, copy="tma")))
    assert plan.launches[0].smem >= 12 * (64 + 64) * 64 * 2
    report = ptxas_report(plan.source, "sm_90a", tmp_path)["norm_proj"]
    assert report.spill_stores == report.spill_loads == 0 and not report.wgmma_serialized


@pytest.mark.parametrize("combine", ["kernel", "last_block"])
def test_split_k_parts_keep_their_wgmmas_in_flight(tmp_path, combine):
    """A split-k part's k loop runs a fixed number of steps (split_k divides them), written so
    ptxas can see it: with bounds it could not prove non-empty, it serialized the wgmmas of
    every split kernel (C7515; the layer's o and down projections at 128 to 512 tokens)."""
    plan = launch_plan(lower(weighted_norm_matmul(M=512, N=1024, K=2048, copy="tma", split_k=4, combine=combine)))
    assert not ptxas_report(plan.source, "sm_90a", tmp_path)["norm_proj"].wgmma_serialized


def test_nvcc_error_names_kernel_and_saved_source(tmp_path):
    plan = launch_plan(lower(silu_mul()))
    broken = plan.source.replace("__float2bfloat16_rn(", "__no_such_function(", 1)
    with pytest.raises(EmmyError) as e:
        compile_source(broken, "sm_90", tmp_path)
    msg = str(e.value)
    assert "nvcc failed in kernel silu_mul" in msg
    assert str(tmp_path / "emmy.cu") in msg
    assert "__no_such_function" in msg
    assert (tmp_path / "emmy.cu").read_text() == broken


def test_unknown_arch(tmp_path):
    with pytest.raises(EmmyError, match="unknown architecture 'sm_70'"):
        compile_source("", "sm_70", tmp_path)


def test_host_entry_encodes_tensor_maps(tmp_path):
    """A launch function whose kernel copies with tensor maps encodes them from the buffers
    (emmy::tensor_map_2d, through the runtime's driver entry point: no libcuda to link)."""
    plan = launch_plan(lower(weighted_norm_matmul(M=200, N=256, K=1024, copy="tma")))
    lib = compile_source(plan.source, "sm_90a", tmp_path, cubin=False)
    assert lib.suffix == ".so" and lib.exists()


def test_shared_library_exports_the_host_entry(tmp_path):
    plan = launch_plan(lower(rms_norm()))
    lib = compile_source(plan.source, "sm_90", tmp_path, cubin=False)
    assert lib.suffix == ".so" and lib.exists()
    import ctypes

    try:
        handle = ctypes.CDLL(str(lib))
    except OSError as e:  # no CUDA runtime to load against on this machine
        pytest.skip(f"cannot load the library here: {e}")
    assert hasattr(handle, plan.entry)


def _layer(target: str, pins: str = "") -> str:
    text = (ROOT / "test/filecheck/inputs/torch-layer.mlir").read_text()
    text = re.sub(r'emmy.target = "sm_[0-9a]+"', f'emmy.target = "{target}"', text)
    ctx = make_context()
    module = parse_module(ctx, text, "torch-layer.mlir")
    decide = f'decide-forks{{pin="{pins}"}}' if pins else "decide-forks"
    run_passes(ctx, module, parse_pipeline(f"{FRONT},{decide},{LOWER}"))
    return launch_plan(module).source


_WGMMA = ";".join(
    f"{k}.workers=wgmma;{k}.block_m=64;{k}.warps=4;{k}.stages=3"
    for k in ("rms_norm_qkv_proj", "o_proj_residual", "rms_norm_gate_up_proj_silu", "down_proj_residual")
)


@pytest.mark.parametrize("target,pins", [("sm_80", ""), ("sm_90", ""), ("sm_90a", _WGMMA)])
def test_whole_layer_compiles(tmp_path, target, pins):
    """The Qwen3 decoder layer through the whole pipeline, then nvcc (slow-ish: ~10 s each)."""
    source = _layer(target, pins)
    cubin = compile_source(source, target, tmp_path)
    assert cubin.exists()
    if target == "sm_90a":
        assert source.count("emmy::wgmma::tile<") >= 4
        if cuobjdump_path() is not None:
            assert "HGMMA" in sass(cubin)


def test_host_entry_encodes_maps_in_planes(tmp_path):
    """The o projection's A side, attention's output head by head, is copied through a map in
    planes; the generated launch function encodes it as a three-dimensional map (its planes and
    plane stride after the box), and the whole layer builds as a shared library for sm_90a."""
    from emmy.driver import CompileOptions, compile_model

    pins = ("o_proj_residual.workers=wgmma_ws", "o_proj_residual.copy=tma", "o_proj_residual.split_k=1",
            "o_proj_residual.block_m=128", "o_proj_residual.block_n=256", "o_proj_residual.warps=8")
    result = compile_model(CompileOptions(model="Qwen/Qwen3-Embedding-0.6B", layer=0, tokens=300, target="sm_90a", pins=pins))
    plan = launch_plan(result.module)
    kernel = next(k for k in plan.kernels if k.name == "o_proj_residual")
    maps = [str(t) for t in kernel.arg_types if not isinstance(t, str)]
    assert maps[0] == "tensor_map<rows 300, cols 128, stride 128, offset 0, planes 16 x 38400, box 128 x 64>"
    assert re.search(r"emmy::tensor_map_2d\(\(__nv_bfloat16\*\)\w+ \+ 0, 300, 128, 128, 128, 64, 16, 38400\)", plan.source)
    lib = compile_source(plan.source, "sm_90a", tmp_path, cubin=False)
    assert lib.suffix == ".so" and lib.exists()


@pytest.mark.parametrize("model,tokens,pins", [
    ("mlp_block", 512, ()), ("clamp_abs_sum", 512, ()), ("residual_norm_proj", 4096, ("*.fusion=fused",)),
    ("residual_norm_proj", 4096, ()),
], ids=["mlp_block", "clamp_abs_sum", "residual_norm_fused", "residual_norm_split"])
def test_generated_source_declares_nothing_it_does_not_use(model, tokens, pins, tmp_path):
    """No value the kernels compute goes unused (nvcc's warning 177): the row statistics in
    particular are loaded only where A or the stores read them (a LayerNorm's statistics,
    which A uses, are not loaded again for an epilogue that does not; a sum of squares that
    only the epilogue uses is not loaded while A is computed)."""
    import subprocess

    from emmy.backend.nvcc import base_flags
    from emmy.driver import CompileOptions, compile_model

    factory = str(ROOT / "test" / "pytest" / "models" / f"{model}.py") + ":make"
    plan = launch_plan(compile_model(CompileOptions(model=factory, tokens=tokens, pins=pins, target="sm_90a")).module)
    src = tmp_path / "k.cu"
    src.write_text(plan.source)
    done = subprocess.run([nvcc_path(), *base_flags("sm_90a"), "-cubin", "-o", str(tmp_path / "k.cubin"), str(src)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "#177-D" not in done.stderr, done.stderr


_MASKED = """
builtin.module {
  kernel.func @masked(%a: !kernel.ptr<i1>, %b: !kernel.ptr<i8>, %c: !kernel.ptr<f64>, %d: !kernel.ptr<bf16>,
                      %e: !kernel.ptr<f32>, %o1: !kernel.ptr<i1>, %o8: !kernel.ptr<i8>, %o64: !kernel.ptr<f64>,
                      %ob: !kernel.ptr<bf16>, %of: !kernel.ptr<f32>) grid [1, 1, 1] block [32, 1, 1] smem 0 {
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %t = kernel.thread_id x
    %ok = arith.cmpi ult, %t, %c4 : index
    %i = arith.muli %t, %c8 : index
    %j = arith.muli %t, %c4 : index
    %va = kernel.load %a[%t] if %ok : !kernel.ptr<i1> -> i1
    %vb = kernel.load %b[%t] if %ok : !kernel.ptr<i8> -> i8
    %vc = kernel.load %c[%t] if %ok : !kernel.ptr<f64> -> f64
    %vd = kernel.load %d[%i] if %ok : !kernel.ptr<bf16> -> vector<8xbf16>
    %ve = kernel.load %e[%j] if %ok : !kernel.ptr<f32> -> vector<4xf32>
    %vs = kernel.load %d[%t] if %ok : !kernel.ptr<bf16> -> bf16
    %vf = kernel.load %e[%t] if %ok : !kernel.ptr<f32> -> f32
    kernel.store %va, %o1[%t] if %ok : i1, !kernel.ptr<i1>
    kernel.store %vb, %o8[%t] if %ok : i8, !kernel.ptr<i8>
    kernel.store %vc, %o64[%t] if %ok : f64, !kernel.ptr<f64>
    kernel.store %vd, %ob[%i] if %ok : vector<8xbf16>, !kernel.ptr<bf16>
    kernel.store %ve, %of[%j] if %ok : vector<4xf32>, !kernel.ptr<f32>
    kernel.store %vs, %ob[%t] if %ok : bf16, !kernel.ptr<bf16>
    kernel.store %vf, %of[%t] if %ok : f32, !kernel.ptr<f32>
  }
  func.func @f(%a: tensor<32xi1>, %b: tensor<32xi8>, %c: tensor<32xf64>, %d: tensor<256xbf16>, %e: tensor<128xf32>)
      -> (tensor<32xi1>, tensor<32xi8>, tensor<32xf64>, tensor<256xbf16>, tensor<128xf32>) {
    %o1 = kernel.empty : tensor<32xi1>
    %o8 = kernel.empty : tensor<32xi8>
    %o64 = kernel.empty : tensor<32xf64>
    %ob = kernel.empty : tensor<256xbf16>
    %of = kernel.empty : tensor<128xf32>
    kernel.launch @masked(%a, %b, %c, %d, %e, %o1, %o8, %o64, %ob, %of) : tensor<32xi1>, tensor<32xi8>, tensor<32xf64>,
        tensor<256xbf16>, tensor<128xf32>, tensor<32xi1>, tensor<32xi8>, tensor<32xf64>, tensor<256xbf16>, tensor<128xf32>
    func.return %o1, %o8, %o64, %ob, %of : tensor<32xi1>, tensor<32xi8>, tensor<32xf64>, tensor<256xbf16>, tensor<128xf32>
  }
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_masked_accesses_of_every_width_compile(tmp_path, arch):
    """Masked loads and stores of 1 to 16 bytes (bool, i8, f64, bf16 and f32, scalar and vector)
    as convert-kernel-to-cuda writes them (emmy::load_or, emmy::store_if: a predicated store for 2
    to 16 bytes, the guarded store for one byte) build for both architectures."""
    ctx = make_context()
    module = parse_module(ctx, _MASKED, "masked.mlir")
    run_passes(ctx, module, parse_pipeline("convert-kernel-to-cuda"))
    source = launch_plan(module).source
    assert source.count("emmy::store_if<") == 7 and source.count("emmy::load_or<") == 7
    assert compile_source(source, arch, tmp_path).exists()
