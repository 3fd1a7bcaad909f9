"""Side-by-side benchmark: Emmy against PyTorch eager and torch.compile, on one GPU, in one run.

    python tools/bench.py                      # running example at M = 1..32768, layer at T = 32..4096
    python tools/bench.py --cases example --example-sizes 512,4096 --json $OUT/bench.json
    python tools/bench.py --cases layer --layer-sizes 32 --contenders emmy,compile \
        --variant fused=attention.fusion=fused      # the rules' Emmy against a pinned one
    python tools/bench.py --cases layer --model path/to/hf-dir # another Llama-family model's layer
    python tools/bench.py --cases attention --attention-sizes 1000,3000,4096,8192   # attention alone

For every case: correctness first (relative error against a float32 PyTorch reference on the same
weights and inputs; a contender over `--tolerance`, or 1.5x PyTorch's own bf16 error where that is
larger, is reported with its error and not timed; `emmy.measure.layer`, which builds Emmy's
contenders and which `emmy tune`'s layer check uses too), then each contender is captured in a CUDA graph
and timed by replay with CUDA events (median of many replays; `emmy.measure.timing`, the tuner's
timing too), next to the floor: max(bytes / measured copy bandwidth,
FLOPs / measured bf16 matrix rate). The contenders are timed round-robin, so the card's warming
(its clocks under the power limit) does not favour the one timed first. Contenders: Emmy, eager,
torch.compile (default), and torch.compile(mode="max-autotune-no-cudagraphs"), plus any number of
Emmy variants (`--variant NAME=PINS`: the same compile with knobs pinned), so that a schedule and
the rules' choice are compared in the same rounds on the same card.

`--cases attention`: causal grouped-query attention alone (`--attention-heads QUERY/KV[/HEAD_DIM]`,
default Qwen3's 16 query / 8 key-value heads and 32 / 8, head dim 128 unless a third number
says otherwise, e.g. 32/8/64 for Llama-3.2-1B's) at `--attention-sizes` tokens. Emmy's
attention kernel, compiled from a torch module that calls F.scaled_dot_product_attention on
q, k, v in the layout of the projections' outputs ([1, T, heads, D], transposed in the
module), against torch's SDPA on the same tensors with the cuDNN back-end and with the flash
back-end (torch.nn.attention.sdpa_kernel), timed alike; TFLOP/s count the causal half of
4 * T^2 * heads * D.

`--cases projections`: each projection of the layer (`--model`, `--layer-sizes` tokens) alone:
every contraction kernel of Emmy's compile (q/k/v, o, gate/up, down, with what its prologue and
epilogue fuse) launched alone on its own inputs, against cuBLAS on the same product
(`cublas`: F.linear in bf16) and the same fused job as a small torch function under
torch.compile (`compile`, `max-autotune`) or eager; one row per (size, kernel) with TFLOP/s and
Emmy's time over cuBLAS's and torch.compile's (tools/bench_projections.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from emmy.measure.layer import (  # noqa: E402  (a layer's build, check and timing: the tuner's layer check too)
    EmmyBuild,
    ModelCase,
    allowed_error,
    build_emmy,
    checked_replays,
    emmy_layer,
    emmy_plan,
    reference,
    results_error,
)
from emmy.measure.timing import kernel_times, replayable, time_fn, time_replays  # noqa: E402  (the tuner times alike)
from bench_projections import (  # noqa: E402  (--cases projections; a row's contender parts)
    build_projections,
    contender_parts,
    format_projection_row,
    format_projection_table,
    profiled,
    ratio_cell,
    time_projections,
)

CASES = ("example", "layer", "model", "attention", "projections")
QWEN3 = "Qwen/Qwen3-Embedding-0.6B"


def measure_ceilings() -> dict:
    """Copy bandwidth (bytes read + written per second) and bf16 matmul rate, measured here."""
    n = 1 << 28  # 512 MiB of bf16
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    t = time_fn(lambda: b.copy_(a), graph=False, reps=20)
    bandwidth = 2 * a.numel() * 2 / t
    m = 8192
    x = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    t = time_fn(lambda: x @ y, graph=False, reps=10)
    rate = 2 * m**3 / t
    return {"bandwidth_Bps": bandwidth, "bf16_flops": rate}


def run_case(name, traced, flops, bytes_, ceilings, target, cache, contenders, builds, profile=False,
             tolerance=1e-2):
    """Time every contender on one traced module; returns a result row. `builds` (see
    emmy_builds) are Emmy's contenders and how each compiles, timed in the same rounds as the others."""
    ref = reference(traced)
    module, args = ref.module, ref.args
    row = {"case": name, "flops": flops, "bytes": bytes_}
    row["floor_s"] = max(bytes_ / ceilings["bandwidth_Bps"], flops / ceilings["bf16_flops"])
    fns = {}
    with torch.no_grad():
        if "eager" in contenders:
            fns["eager"] = ref.eager
        if "compile" in contenders:
            compiled = torch.compile(module)
            fns["compile"] = lambda: compiled(*args)
        if "max-autotune" in contenders:
            tuned = torch.compile(module, mode="max-autotune-no-cudagraphs")
            fns["max-autotune"] = lambda: tuned(*args)
        for key, how in builds.items():
            try:
                emmy_fn, cs = build_emmy(traced, target, cache, how)
                row[f"{key}_compile_s"] = cs
                fns[key] = emmy_fn
            except Exception as e:  # report and carry on with the others
                row[f"{key}_error"] = f"{type(e).__name__}: {e}"[:500]
        # correctness first: a contender that fails, or whose error is over the allowed one, is
        # reported with its error and not timed (emmy.measure.layer, as the tuner's layer check).
        # Allowed: the tolerance, or 1.5x PyTorch's own bf16 error where that is larger
        row["allowed_err"] = allowed_error(ref, tolerance)
        timed = checked_replays(fns, ref, row["allowed_err"], row)
        for key, t in time_replays(timed).items():
            row[f"{key}_s"] = t
        for key in (k for k in builds if k in timed and profile):
            # each kernel on its own: no launch overlaps the one before it (with overlapping
            # launches a kernel's time would include waiting for its predecessor's tail); the
            # layer captured and replayed as when timed, so the kernels run back to back
            _profile(row, key, lambda: replayable(lambda: fns[key](overlap=False)), serial=True)
        if profile and "compile" in timed:
            _profile(row, "compile", lambda: timed["compile"])
    return row


def _profile(row, key, replay, serial=False) -> None:
    """`<key>_kernels_us` of one contender's replay (`replay()` makes it); with `serial` also
    `<key>_serial_s`, that replay's time (launched without overlap). A failed profile leaves
    `<key>_profile_error` (`profiled`)."""
    def run():
        r = replay()
        kernels = kernel_times(r)
        if serial:
            row[f"{key}_serial_s"] = time_fn(r, graph=False)
        return kernels

    kernels = profiled(row, key, run)
    if kernels:
        row[f"{key}_kernels_us"] = kernels


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def example_case(tokens: int):
    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer
    from running_example import HIDDEN, KV_OUT, Q_OUT, make

    src = ModelSource(spec="tools/running_example.py:make", kind="factory", model_id="running-example",
                      factory=lambda: make(tokens))
    traced = trace_layer(src, 0, tokens)
    n = Q_OUT + 2 * KV_OUT
    flops = 2 * tokens * n * HIDDEN
    bytes_ = 2 * (tokens * HIDDEN + HIDDEN + n * HIDDEN + tokens * n)
    return traced, flops, bytes_


def layer_case(tokens: int, model: str = QWEN3):
    from emmy.frontend import trace_layer

    source = _source(model)
    traced = trace_layer(source, 0, tokens)
    return (traced, *_layer_costs(source.config, tokens))


def projection_layer(tokens: int, model: str = QWEN3):
    """The traced layer whose projections `--cases projections` times: any model Emmy compiles,
    a factory included (each projection counts its own FLOPs, no config needed)."""
    from emmy.frontend import resolve_model, trace_layer

    return trace_layer(resolve_model(model), 0, tokens)


def _source(model: str):
    from emmy.frontend import resolve_model

    source = resolve_model(model)
    if source.config is None:
        raise SystemExit(f"--model {model}: the layer and model cases need a Hugging Face config (a known id "
                         "or a local model directory), to count the layer's FLOPs and bytes")
    return source


def _layer_costs(config, tokens: int) -> tuple[int, int]:
    """FLOPs and the fewest bytes moved of one decoder layer of a Llama-family model (its
    Hugging Face config, read as Emmy's own decoder reads it): every weight read once, the hidden
    states read and written once, the rotary tables read once; projections plus causal QK^T and PV."""
    from emmy.frontend.decoder import LayerConfig

    c = LayerConfig.from_hf(config)
    h, inter, heads, kv, d = c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim
    matrices = h * (heads * d + 2 * kv * d) + heads * d * h + 3 * h * inter
    vectors = 2 * h + (2 * d if c.qk_norm else 0) + (heads * d + 2 * kv * d if c.qkv_bias else 0)
    vectors += (h if c.o_bias else 0) + (2 * inter + h if c.mlp_bias else 0)
    flops = 2 * tokens * matrices + 2 * heads * d * tokens * tokens
    bytes_ = 2 * (matrices + vectors + 2 * tokens * h + 2 * tokens * d)
    return flops, bytes_


def model_case(tokens: int, model: str = QWEN3):
    """A whole model (embedding, every layer, final norm), random weights unless the model has
    its own. The same weights for every contender: Emmy's compile traces the same model with
    the same seed."""
    from emmy.frontend.whole_model import trace_model

    source = _source(model)
    traced = trace_model(source, tokens)
    flops, bytes_ = _layer_costs(source.config, tokens)
    layers = len(traced.layers)
    return ModelCase(traced), layers * flops, layers * bytes_ + 2 * tokens * source.config["hidden_size"] * 2


def main() -> None:
    from emmy.diagnostics import EmmyError

    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="example,layer", help=f"comma-separated, of: {', '.join(CASES)}")
    ap.add_argument("--example-sizes", default="1,32,512,4096,32768")
    ap.add_argument("--layer-sizes", default="32,512,4096")
    ap.add_argument("--model", default=QWEN3,
                    help="the model of the layer, model and projections cases: a known id, a local Hugging Face "
                         "directory (config.json; random weights without safetensors), or path.py:fn (projections "
                         "only: the layer and model cases count FLOPs from a config)")
    ap.add_argument("--model-sizes", default="512,4096", help="tokens for the whole-model case (--cases model)")
    ap.add_argument("--attention-sizes", default="1000,3000,4096,8192", help="tokens for the attention case (--cases attention)")
    ap.add_argument("--attention-heads", default="16/8,32/8", metavar="QUERY/KV[/HEAD_DIM][,...]",
                    help="query / key-value heads (and head dim, 128 where left out) of the attention case (causal)")
    ap.add_argument("--contenders", default=None,
                    help="emmy[-tuned,-rules,-prior], eager, compile, max-autotune; for --cases attention "
                         "emmy... and sdpa-cudnn, sdpa-flash; for --cases projections also cublas (default: "
                         "emmy,eager,compile,max-autotune, and sdpa-cudnn,sdpa-flash with --cases attention, "
                         "cublas with --cases projections; emmy,cublas,compile for --cases projections alone)")
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", action="store_true", help="also print the time of each of Emmy's kernels (launched without overlap, "
                    "so each time is the kernel's own) and of torch.compile's, in the captured layer's replay; with "
                    "--cases projections, every contender's time inside its kernels, launch gaps left out")
    ap.add_argument("--knob", action="append", default=[], metavar="KERNEL.KNOB=VALUE",
                    help="pin a schedule knob of Emmy's kernels, as emmy compile --knob (repeatable)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=KERNEL.KNOB=VALUE[,...]",
                    help="one more Emmy contender, 'emmy:NAME', with these pins (added to --knob's), "
                         "timed in the same rounds as the others (repeatable)")
    ap.add_argument("--tolerance", type=float, default=1e-2,
                    help="largest relative error against float32 PyTorch a contender may have to be timed "
                         "(or 1.5x PyTorch's own bf16 error, where larger)")
    ap.add_argument("--storage", default=None, metavar="URL",
                    help="the tuning store of the emmy-tuned contender (default: records.db under EMMY_HOME)")
    ap.add_argument("--build-only", action="store_true",
                    help="compile every case and build its cubin into EMMY_HOME (no GPU needed)")
    args = ap.parse_args()
    cache = Path(os.environ.get("EMMY_HOME", "/tmp/emmy-home"))
    cases = parse_cases(args.cases)
    default = ("emmy,eager,compile,max-autotune" + (",sdpa-cudnn,sdpa-flash" if "attention" in cases else "")
               + (",cublas" if "projections" in cases else ""))
    if cases == ["projections"]:  # (max-autotune would tune every projection's GEMMs for minutes)
        default = "emmy,cublas,compile"
    contenders = (args.contenders or default).split(",")
    variants = parse_variants(args.variant)
    if args.build_only:
        return build_only(args, cache, emmy_builds(contenders, args.knob, variants, storage_url(args.storage, cache)))
    if not torch.cuda.is_available():
        raise EmmyError("tools/bench.py times on a CUDA GPU and PyTorch finds none here "
                        f"(torch {torch.__version__}, CUDA {torch.version.cuda or 'not compiled in'}); "
                        "--build-only builds the kernels without one")
    builds = emmy_builds(contenders, args.knob, variants, storage_url(args.storage, cache))
    shown = contenders + [key for key in builds if key not in contenders]
    from emmy.measure.gpu import device_id, gpu_lock

    # the tuner's per-GPU lock, held while a case runs: a bench and an `emmy tune` on one GPU take turns
    # (neither times while the other's kernels run); each case's compiles and builds run under it too
    hold = partial(gpu_lock, cache, device_id())
    with hold():
        ceilings = measure_ceilings()
    print(f"# {torch.cuda.get_device_name()}  copy {ceilings['bandwidth_Bps'] / 1e12:.2f} TB/s  "
          f"bf16 matmul {ceilings['bf16_flops'] / 1e12:.0f} TFLOP/s  torch {torch.__version__}", flush=True)
    rows = []
    for name, make in _cases(args):
        traced, flops, bytes_ = make()
        with hold():
            if is_attention_case(name):
                row = run_attention_case(name, traced, flops, bytes_, ceilings, args.target, cache, contenders,
                                         builds, args.tolerance)
            else:
                row = run_case(name, traced, flops, bytes_, ceilings, args.target, cache, contenders, builds,
                               args.profile, args.tolerance)
        if args.knob:
            row["pins"] = list(args.knob)
        rows.append(row)
        print(format_row(row, shown), flush=True)
        for who in [c for c in shown if c.startswith("emmy")] + ["compile"]:
            kernels = row.get(f"{who}_kernels_us", {})
            if f"{who}_profile_error" in row:
                print(f"  {who}: no profile: {row[f'{who}_profile_error'][:200]}", flush=True)
            if kernels:
                serial = (f", {row[f'{who}_serial_s'] * 1e6:.1f} us replayed without overlapping launches"
                          if f"{who}_serial_s" in row else "")
                print(f"  {who}'s kernels in the replayed layer (sum {sum(kernels.values()):.1f} us{serial}):", flush=True)
            for kernel, us in kernels.items():
                print(f"    {us:9.2f} us  {kernel[:100]}", flush=True)
        write_json(args.json, ceilings, rows, [])  # after every case, so a crash keeps what was measured
        torch._dynamo.reset()
    projection_rows = []
    proj_shown = [c for c in shown if c.startswith("emmy") or c in ("cublas", "compile", "max-autotune", "eager")]
    for name, make in _projection_cases(args):
        with hold():
            for row in time_projections(name, make(), args.target, cache, builds, contenders, args.tolerance,
                                        profile=args.profile):
                projection_rows.append(row)
                print(format_projection_row(row, proj_shown), flush=True)
        write_json(args.json, ceilings, rows, projection_rows)
        torch._dynamo.reset()
    print()
    others = [r for r in rows if not is_attention_case(r["case"])]
    if others:
        print(format_table(others, [c for c in shown if not c.startswith("sdpa-") and c != "cublas"]))
    if len(others) < len(rows):
        print(format_attention_table([r for r in rows if is_attention_case(r["case"])],
                                     [c for c in shown if c.startswith(("emmy", "sdpa-"))]))
    if projection_rows:
        print(format_projection_table(projection_rows, proj_shown))
    write_json(args.json, ceilings, rows, projection_rows)


def write_json(path: str | None, ceilings: dict, rows: list, projections: list) -> None:
    """The run so far into `--json`'s file (nothing without one)."""
    if path:
        out = {"ceilings": ceilings, "device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
        Path(path).write_text(json.dumps({**out, **({"projections": projections} if projections else {})}, indent=2))


# --------------------------------------------------------------------------------------------
# Attention alone
# --------------------------------------------------------------------------------------------

ATTENTION_HEAD_DIM = 128
SDPA_BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION"}


class SdpaAttention(torch.nn.Module):
    """Causal grouped-query attention alone: q [1, T, heads, D], k and v [1, T, kv_heads, D] (the
    layout of the q/k/v projections' outputs) to [1, T, heads, D] (the o projection's input),
    through one F.scaled_dot_product_attention (enable_gqa where the heads differ)."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int = ATTENTION_HEAD_DIM):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim

    def forward(self, q, k, v):
        return sdpa(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)


def sdpa(q, k, v):
    """Causal SDPA on [1, heads, T, D] views, grouped-query where the heads differ."""
    gqa = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)


def make_attention(tokens: int, heads: int = 16, kv_heads: int = 8, head_dim: int = ATTENTION_HEAD_DIM,
                   seed: int = 0):
    """The SdpaAttention module and random bf16 q, k, v of `tokens` tokens (a model factory)."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(1, tokens, heads, head_dim), (1, tokens, kv_heads, head_dim), (1, tokens, kv_heads, head_dim)]
    inputs = tuple(torch.randn(sh, generator=g).to(torch.bfloat16) for sh in shapes)
    return SdpaAttention(heads, kv_heads, head_dim), inputs


@torch.no_grad()
def attention_reference(q, k, v):
    """Causal grouped-query attention in f32, one query head at a time, so that its T x T scores
    fit in memory at long sequences (all heads at once needs 64 GiB at 32768 tokens): q [1, T,
    heads, D], k and v [1, T, kv_heads, D] to [1, T, heads, D]."""
    heads, kv_heads = q.shape[2], k.shape[2]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for h in range(heads):
        j = h // (heads // kv_heads)
        one = [x[:, :, i : i + 1].float().transpose(1, 2) for x, i in ((q, h), (k, j), (v, j))]
        out[:, :, h : h + 1] = sdpa(*one).transpose(1, 2)
    return out


def attention_flops(tokens: int, heads: int, head_dim: int = ATTENTION_HEAD_DIM) -> int:
    """QK^T and PV of causal attention: half of 2 * 2 * T^2 * heads * D (the diagonal's other
    half-blocks not counted)."""
    return 2 * tokens * tokens * heads * head_dim


def attention_case(tokens: int, heads: int, kv_heads: int, head_dim: int = ATTENTION_HEAD_DIM):
    from emmy.frontend.models import ModelSource
    from emmy.frontend.trace import trace_layer

    src = ModelSource(spec="tools/bench.py:make_attention", kind="factory", model_id="sdpa-attention",
                      factory=lambda: make_attention(tokens, heads, kv_heads, head_dim))
    traced = trace_layer(src, 0, tokens)
    bytes_ = 2 * tokens * head_dim * (2 * heads + 2 * kv_heads)  # q, k, v read and the output written once
    return traced, attention_flops(tokens, heads, head_dim), bytes_


def run_attention_case(name, traced, flops, bytes_, ceilings, target, cache, contenders, builds, tolerance=1e-2):
    """One attention case: Emmy's contenders (`builds`) and torch SDPA with each back-end of
    `contenders` (sdpa-cudnn, sdpa-flash) on the same q, k, v, timed in the same rounds."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (x.cuda() for x in traced.inputs.values())
    views = [x.transpose(1, 2) for x in (q, k, v)]
    ref = attention_reference(q, k, v)
    row = {"case": name, "flops": flops, "bytes": bytes_}
    row["floor_s"] = max(bytes_ / ceilings["bandwidth_Bps"], flops / ceilings["bf16_flops"])
    fns = {}
    for who in contenders:
        backend = SDPA_BACKENDS.get(who.removeprefix("sdpa-")) if who.startswith("sdpa-") else None
        if backend is None:
            continue

        def run(backend=getattr(SDPBackend, backend)):
            with sdpa_kernel(backend):
                return sdpa(*views)

        fns[who] = (run, lambda o: o.transpose(1, 2).reshape(ref.shape))
    for key, how in builds.items():
        try:
            emmy_fn, cs = emmy_layer(traced, target, cache, how)
            row[f"{key}_compile_s"] = cs
            fns[key] = (lambda f=emmy_fn: _first(f()), lambda o: o.reshape(ref.shape))
        except Exception as e:  # report and carry on with the others
            row[f"{key}_error"] = f"{type(e).__name__}: {e}"[:500]
    row["allowed_err"] = tolerance
    timed = {}
    with torch.no_grad():
        for key, (fn, shape) in fns.items():
            try:
                row[f"{key}_err"] = results_error([shape(fn())], [ref])
                if not row[f"{key}_err"] <= tolerance:
                    row[f"{key}_error"] = f"relative error {row[f'{key}_err']:.2e} over {tolerance:.1e}: not timed"
                    continue
                timed[key] = replayable(fn)
            except Exception as e:
                row[f"{key}_error"] = f"{type(e).__name__}: {e}"[:500]
        for key, t in time_replays(timed).items():
            row[f"{key}_s"] = t
    return row


def format_attention_table(rows, contenders) -> str:
    """Times (us), TFLOP/s (causal) and Emmy's time over each SDPA back-end's."""
    emmys = [c for c in contenders if c.startswith("emmy")]
    sdpas = [c for c in contenders if c.startswith("sdpa-")]
    head = (["case"] + [f"{c} us" for c in contenders] + [f"{c} TFLOP/s" for c in contenders]
            + [f"{e}/{o}" for e in emmys for o in sdpas])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["case"]]
        cells += [f"{r[f'{c}_s'] * 1e6:.1f}" if f"{c}_s" in r else "fail" for c in contenders]
        cells += [f"{r['flops'] / r[f'{c}_s'] / 1e12:.0f}" if f"{c}_s" in r else "-" for c in contenders]
        cells += [ratio_cell(r, e, o) for e in emmys for o in sdpas]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_cases(spec: str) -> list[str]:
    """`--cases example,layer` as a list; an unknown name is an EmmyError naming the known ones."""
    from emmy.diagnostics import EmmyError

    cases = [c for c in spec.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        raise EmmyError(f"--cases '{spec}': unknown case {', '.join(unknown) or '(none given)'}; "
                        f"the cases are {', '.join(CASES)}")
    return cases


def _projection_cases(args):
    """(name, a function tracing the layer) per size of `--cases projections`."""
    if "projections" not in parse_cases(args.cases):
        return []
    prefix = "" if args.model == QWEN3 else f"{Path(args.model).name} "
    return [(f"{prefix}T={t}", lambda t=t: projection_layer(t, args.model)) for t in map(int, args.layer_sizes.split(","))]


def _cases(args):
    cases = []
    prefix = "" if args.model == QWEN3 else f"{Path(args.model).name} "
    args_cases = parse_cases(args.cases)
    if "example" in args_cases:
        cases += [(f"example M={m}", lambda m=m: example_case(m)) for m in map(int, args.example_sizes.split(","))]
    if "layer" in args_cases:
        cases += [(f"{prefix}layer T={t}", lambda t=t: layer_case(t, args.model))
                  for t in map(int, args.layer_sizes.split(","))]
    if "model" in args_cases:
        cases += [(f"{prefix}model T={t}", lambda t=t: model_case(t, args.model))
                  for t in map(int, args.model_sizes.split(","))]
    if "attention" in args_cases:
        cases += [(f"attention {h}/{kv}{'' if d == ATTENTION_HEAD_DIM else f'/{d}'} T={t}",
                   lambda t=t, h=h, kv=kv, d=d: attention_case(t, h, kv, d))
                  for h, kv, d in parse_heads(args.attention_heads) for t in map(int, args.attention_sizes.split(","))]
    return cases


def is_attention_case(name: str) -> bool:
    return name.startswith("attention ")


def parse_heads(spec: str) -> list[tuple[int, int, int]]:
    """`--attention-heads 16/8,32/8/64` as [(16, 8, 128), (32, 8, 64)]: query heads / key-value
    heads / head dim (ATTENTION_HEAD_DIM where left out)."""
    from emmy.diagnostics import EmmyError

    out = []
    for part in spec.split(","):
        fields = part.split("/")
        ok = len(fields) in (2, 3) and all(f.isdigit() and int(f) > 0 for f in fields)
        if not ok or int(fields[0]) % int(fields[1]) != 0 or (len(fields) == 3 and int(fields[2]) % 8 != 0):
            raise EmmyError(f"--attention-heads '{spec}': expected QUERY/KV[/HEAD_DIM][,...] with the key-value "
                            f"heads dividing the query heads and the head dim a multiple of 8, got '{part}'")
        h, kv = int(fields[0]), int(fields[1])
        out.append((h, kv, int(fields[2]) if len(fields) == 3 else ATTENTION_HEAD_DIM))
    return out


def build_only(args, cache, builds: dict[str, EmmyBuild]) -> None:
    """nvcc every case ahead of time (the cubins are cached by source hash, so a GPU run of the
    same cases reuses them)."""
    from concurrent.futures import ThreadPoolExecutor

    from emmy.backend.run import build_cubin

    from emmy.backend.plan import launch_plan

    plans = []
    for name, make in _cases(args):
        traced, _, _ = make()
        for key, how in builds.items():
            label = "" if key == "emmy" else f" {key}"
            if isinstance(traced, ModelCase):
                for part in traced.compile(args.target, how).parts:
                    plans.append((f"{name}{label} {part.name}", launch_plan(part.result.module)))
                continue
            plan, _ = emmy_plan(traced, args.target, how)
            plans.append((f"{name}{label}", plan))
    for name, make in _projection_cases(args):
        plans += [(f"{name} {label}", plan) for label, plan in build_projections(make(), args.target, builds)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = [(name, pool.submit(build_cubin, plan.source, args.target, cache)) for name, plan in plans]
        for name, f in futures:
            f.result()
            print(f"built {name}", flush=True)


# Emmy's contenders besides the variants: how each compiles (`records`: True = the local store).
#   emmy        as a user's compile with no tuning store: shipped evidence (golden, nearest), the prior, the rules
#   emmy-tuned  the same with the local tuning store (`emmy tune`'s records)
#   emmy-rules  the hand-written rules alone (and pins)
#   emmy-prior  the prior alone (and pins)
EMMY_CONTENDERS = {
    "emmy": (False, ""),
    "emmy-tuned": (True, ""),
    "emmy-rules": (False, "pinned,rule"),
    "emmy-prior": (False, "pinned,prior"),
}


def emmy_builds(contenders, knob, variants: dict[str, tuple[str, ...]], records: str) -> dict[str, EmmyBuild]:
    """Emmy's contenders and how each compiles (EMMY_CONTENDERS, with --knob's pins), and
    `emmy:NAME` for each --variant (--knob's pins, then the variant's)."""
    builds = {c: EmmyBuild(tuple(knob), records if local else "", tiers)
              for c, (local, tiers) in EMMY_CONTENDERS.items() if c in contenders}
    builds.update({f"emmy:{v}": EmmyBuild((*knob, *extra)) for v, extra in variants.items()})
    return builds


def storage_url(storage: str | None, home: Path) -> str:
    """The tuning store emmy-tuned reads: --storage, else records.db under EMMY_HOME."""
    from emmy.records.store import default_url

    return storage or default_url(home)


def parse_variants(specs: list[str]) -> dict[str, tuple[str, ...]]:
    """`--variant NAME=PIN,PIN` values as {NAME: (PIN, ...)}."""
    from emmy.diagnostics import EmmyError

    out: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        name, sep, pins = spec.partition("=")
        if not sep or not name or not pins or "." in name:
            raise EmmyError(f"--variant '{spec}': expected NAME=KERNEL.KNOB=VALUE[,KERNEL.KNOB=VALUE...]")
        if name in out:
            raise EmmyError(f"--variant '{spec}': the name '{name}' is used twice")
        out[name] = tuple(p for p in pins.split(",") if p)
    return out


def format_row(row, contenders) -> str:
    return " | ".join([f"{row['case']:<18} floor {row['floor_s'] * 1e6:8.1f} us", *contender_parts(row, contenders)])


def format_table(rows, contenders) -> str:
    """Times in microseconds, each with its relative error; a contender not timed shows why in
    short ("fail", or its error when that was over the allowed one)."""
    emmys = [c for c in contenders if c.startswith("emmy")]
    ratios = [(e, other) for e in emmys for other in ("eager", "compile")]
    head = (["case", "floor us"] + [f"{c} us (err)" for c in contenders] + [f"{e}/{o}" for e, o in ratios]
            + [f"{e}/floor" for e in emmys])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["case"], f"{r['floor_s'] * 1e6:.1f}"]
        for c in contenders:
            err = f" ({r[f'{c}_err']:.1e})" if f"{c}_err" in r else ""
            cells.append(f"{r[f'{c}_s'] * 1e6:.1f}{err}" if f"{c}_s" in r else f"fail{err}")
        for e, other in ratios:
            cells.append(ratio_cell(r, e, other))
        cells.extend(f"{r[f'{e}_s'] / r['floor_s']:.2f}" if f"{e}_s" in r else "-" for e in emmys)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    from emmy.diagnostics import EmmyError

    try:
        main()
    except EmmyError as e:  # a bad --knob, an unknown case: the message, not a traceback
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
