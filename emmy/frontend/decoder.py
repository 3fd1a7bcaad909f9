"""Emmy's own copy of the Llama-family decoder layer (Llama, Mistral, Qwen2, Qwen3).

Importing `transformers` costs about 3 s on a small machine, more than `emmy compile` may spend
in total, so the layers of these architectures are rebuilt here from the config alone. The
modules mirror Hugging Face's op for op (same parameter names and order, same dtype casts, the
same `scaled_dot_product_attention` call), so the numbers are bit-identical to transformers'
`Qwen3DecoderLayer` etc.; test/pytest/test_frontend.py checks that. Other architectures go
through transformers itself (see `emmy.frontend.trace`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from emmy.diagnostics import EmmyError

FAMILY = ("llama", "mistral", "qwen2", "qwen3")

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def config_dtype(config: Mapping[str, Any]) -> torch.dtype:
    name = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if name not in _DTYPES:
        raise EmmyError(f"model dtype '{name}' is not supported (use one of {', '.join(_DTYPES)})")
    return _DTYPES[name]


@dataclass(frozen=True)
class LayerConfig:
    """What one Llama-family decoder layer needs from a Hugging Face config.json."""

    model_type: str
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    num_layers: int
    dtype: torch.dtype

    @classmethod
    def supports(cls, config: Mapping[str, Any]) -> bool:
        """True when this module reproduces the config's layer exactly."""
        if config.get("model_type") not in FAMILY:
            return False
        if config.get("hidden_act", "silu") != "silu":
            return False
        return _rope_type(config) == "default"

    @classmethod
    def from_hf(cls, config: Mapping[str, Any], model: str = "the model") -> LayerConfig:
        """The layer of a Hugging Face config; a missing or malformed size is an EmmyError
        naming `model` and the field."""
        mt = config["model_type"]
        heads = config_int(config, "num_attention_heads", model)
        hidden = config_int(config, "hidden_size", model)
        attention_bias = bool(config.get("attention_bias", False))
        return cls(
            model_type=mt,
            hidden_size=hidden,
            intermediate_size=config_int(config, "intermediate_size", model),
            num_heads=heads,
            num_kv_heads=config_int(config, "num_key_value_heads", model, default=heads),
            head_dim=config_int(config, "head_dim", model, default=hidden // heads),
            rms_norm_eps=positive_float(config.get("rms_norm_eps", 1e-6), "rms_norm_eps", model),
            rope_theta=positive_float(_rope_theta(config), "rope_theta", model),
            qkv_bias=True if mt == "qwen2" else attention_bias,
            o_bias=False if mt == "qwen2" else attention_bias,
            mlp_bias=bool(config.get("mlp_bias", False)) if mt == "llama" else False,
            qk_norm=mt == "qwen3",
            num_layers=config_int(config, "num_hidden_layers", model),
            dtype=config_dtype(config),
        )


def config_int(config: Mapping[str, Any], key: str, model: str, default: int | None = None,
               zero: bool = False) -> int:
    """`config[key]` as a positive integer, or with `zero` a whole number (`default` when absent
    or null)."""
    value = config.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
        what = "is missing" if value is None else f"is {value!r}"
        kind = "a whole number" if zero else "a positive integer"
        raise EmmyError(f"{model}: the config's {key} {what}; it must be {kind}")
    return value


def positive_float(value: Any, key: str, model: str) -> float:
    """A config's `key`, already read, as a positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise EmmyError(f"{model}: the config's {key} is {value!r}; it must be a positive number")
    return float(value)


def sliding_window(config: Mapping[str, Any], layer: int, model: str = "the model") -> int | None:
    """The attention window of decoder layer `layer` in tokens, or None where every query sees
    every earlier key. Mistral windows every layer when `sliding_window` is set (null or 0:
    none); Qwen2 and Qwen3 only the layers their `layer_types` (or `use_sliding_window` from
    `max_window_layers` on) mark as sliding. A window that is not a positive integer is an
    EmmyError naming `model` and the field."""
    if not config.get("sliding_window"):
        return None
    window = config_int(config, "sliding_window", model)
    types = config.get("layer_types")
    if isinstance(types, list) and layer < len(types):
        return window if types[layer] == "sliding_attention" else None
    if config.get("model_type") in ("qwen2", "qwen3"):
        if not config.get("use_sliding_window", False):
            return None
        first = config_int(config, "max_window_layers", model, default=0, zero=True)
        return window if layer >= first else None
    return window


def check_positions(config: Mapping[str, Any], model: str, tokens: int) -> None:
    """Refuse a sequence longer than the model's positions (`max_position_embeddings`): past
    it the rotary embedding leaves what the model was trained for, and a sequence of millions
    of tokens would only fail later for want of memory."""
    limit = config.get("max_position_embeddings")
    if isinstance(limit, int) and limit > 0 and tokens > limit:
        raise EmmyError(
            f"--tokens {tokens} is more than {model} has positions for: its config sets "
            f"max_position_embeddings to {limit}",
            hint=f"use --tokens {limit} or fewer",
        )


def layer_window(config: Mapping[str, Any], layer: int, tokens: int, model: str = "the model") -> int | None:
    """The sliding window layer `layer` applies to a sequence of `tokens` tokens: its window
    (`sliding_window`) where the sequence is longer, else None (a window that covers the whole
    sequence changes nothing, and the layer compiles as a plain causal one)."""
    window = sliding_window(config, layer, model)
    return window if window is not None and tokens > window else None


def _rope_params(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return config.get("rope_parameters") or config.get("rope_scaling") or {}


def _rope_type(config: Mapping[str, Any]) -> str:
    params = _rope_params(config)
    return params.get("rope_type") or params.get("type") or "default"


def _rope_theta(config: Mapping[str, Any]) -> float:
    return _rope_params(config).get("rope_theta") or config.get("rope_theta") or 10000.0


class RMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm: normalize in f32, cast back, multiply by the weight."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def meta_linear(n_in: int, n_out: int, bias: bool) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=bias, device="meta")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: LayerConfig):
        super().__init__()
        self.head_dim = c.head_dim
        self.num_key_value_groups = c.num_heads // c.num_kv_heads
        self.scaling = c.head_dim**-0.5
        self.q_proj = meta_linear(c.hidden_size, c.num_heads * c.head_dim, c.qkv_bias)
        self.k_proj = meta_linear(c.hidden_size, c.num_kv_heads * c.head_dim, c.qkv_bias)
        self.v_proj = meta_linear(c.hidden_size, c.num_kv_heads * c.head_dim, c.qkv_bias)
        self.o_proj = meta_linear(c.num_heads * c.head_dim, c.hidden_size, c.o_bias)
        self.qk_norm = c.qk_norm
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(hidden_shape)
        if self.qk_norm:
            q = self.q_norm(q)
        q = q.transpose(1, 2)
        k = self.k_proj(hidden_states).view(hidden_shape)
        if self.qk_norm:
            k = self.k_norm(k)
        k = k.transpose(1, 2)
        v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos = cos.unsqueeze(1)
        sin = sin.unsqueeze(1)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        gqa = {"enable_gqa": True} if self.num_key_value_groups > 1 else {}
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=0.0, scale=self.scaling, is_causal=q.shape[2] > 1, **gqa
        )
        out = out.transpose(1, 2).contiguous()
        out = out.reshape(*input_shape, -1).contiguous()
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, c: LayerConfig):
        super().__init__()
        self.gate_proj = meta_linear(c.hidden_size, c.intermediate_size, c.mlp_bias)
        self.up_proj = meta_linear(c.hidden_size, c.intermediate_size, c.mlp_bias)
        self.down_proj = meta_linear(c.intermediate_size, c.hidden_size, c.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """One pre-norm decoder layer: `forward(hidden_states, cos, sin)`. Built on the meta device;
    the caller gives the parameters storage (`trace.materialize`) and fills them."""

    def __init__(self, c: LayerConfig):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, cos, sin)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


def rotary_cos_sin(
    head_dim: int, theta: float, tokens: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [1, tokens, head_dim] at positions 0..tokens-1, as Hugging Face's default
    rotary embedding computes them (f32, then cast to the model dtype)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    position_ids = torch.arange(tokens)[None]
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)
