"""The compute primitives the inference path calls, each in one function: Tigon's decode kernels where they apply
(a GEMV for the projections of up to 16 rows, split-KV attention over the static cache: 16-bit dtypes on an sm_90
GPU), torch elsewhere (matmul, SDPA: the prompt, the CPU, fp32).

Every body is capturable in a CUDA graph (no host reads of device data, shapes fixed by their arguments).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from tigon.ops._common import rows_ok
from tigon.ops.decode_attention import append_to_cache, decode_attention
from tigon.ops.gemv import MAX_PARTS, gemv, gemv_parts
from tigon.ops.rms_norm import add_rms_norm, rms_norm
from tigon.ops.rope import rope
from tigon.ops.swiglu import geglu, swiglu

GEMV_MAX_ROWS = 16  # the GEMV kernel's design point; more rows are a GEMM's (cuBLAS through F.linear)
# From 5 rows Tigon's GEMV runs on tensor cores, and on one weight cuBLAS was 15-86% faster there on every decode shape
# (docs/performance/decode.md); the fused projections (q, k, v; gate and up) keep one pass over x in gemv_parts.
GEMV_SINGLE_MAX_ROWS = 4
DECODE_HEAD_DIMS = (64, 80, 96, 128, 256)


@functools.lru_cache(maxsize=None)
def _sm90(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device) == (9, 0)


def _tigon_kernels(x: torch.Tensor) -> bool:
    """Whether Tigon's CUDA decode kernels take x's dtype on x's device (built for sm_90a)."""
    return x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and _sm90(x.device)


def _gemv_takes(x: torch.Tensor, weights: list, biases: list) -> bool:
    """Whether Tigon's GEMV computes these projections of x: up to 16 rows, its dtypes, on its GPU."""
    return (
        x.numel() <= GEMV_MAX_ROWS * x.shape[-1]
        and _tigon_kernels(x)
        and all(w.dtype == x.dtype for w in weights)
        and all(b is None or b.dtype == x.dtype for b in biases)
    )


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias): every projection of the model, prompt and decode alike (a GEMV at batch 1 to 4)."""
    if x.numel() <= GEMV_SINGLE_MAX_ROWS * x.shape[-1] and _gemv_takes(x, [weight], [bias]):
        return gemv(x, weight, bias)
    return F.linear(x, weight, bias)


def _projections(x: torch.Tensor, modules: list) -> list[torch.Tensor]:
    """Each nn.Linear of modules applied to x (q, k and v; gate and up): where Tigon's GEMV applies, one pass over x
    for all of them (tigon.ops.gemv_parts) and views of its output, else one _linear each."""
    weights, biases = [m.weight for m in modules], [m.bias for m in modules]
    if len(modules) <= MAX_PARTS and _gemv_takes(x, weights, biases):
        y = gemv_parts(x, weights, biases)
        return list(y.split([w.shape[0] for w in weights], dim=-1))
    return [_linear(x, w, b) for w, b in zip(weights, biases)]


def _eps(norm: torch.nn.Module) -> float:
    eps = getattr(norm, "variance_epsilon", None)
    return getattr(norm, "eps", 1e-6) if eps is None else eps


def _rms_norm(x: torch.Tensor, module: torch.nn.Module, norm: tuple | None) -> torch.Tensor:
    """The model's RMSNorm module applied to x: Tigon's kernel where it applies (norm: the family's (offset, casting
    mode), None for a norm it does not reproduce), the module's own forward elsewhere."""
    if norm is not None and _tigon_kernels(x):
        if not rows_ok(x):  # heads of one projection in a wider buffer (q of q|k|v): rows of more than one stride
            x = x.contiguous()
        return rms_norm(x, module.weight, _eps(module), *norm)
    return module(x)


def _add_rms_norm(branch: torch.Tensor, h: torch.Tensor, module: torch.nn.Module, norm: tuple | None):
    """A pre-norm block's residual step: h + branch, then the norm of it, in one kernel where Tigon's applies.
    Returns (normed, new h)."""
    if norm is not None and _tigon_kernels(h):
        return add_rms_norm(branch, h, module.weight, _eps(module), *norm)
    h = h + branch
    return module(h), h


def _glu(gate: torch.Tensor, up: torch.Tensor, glu: str | None, activation) -> torch.Tensor:
    """activation(gate) * up: one kernel (tigon.ops.swiglu / geglu) where Tigon's applies, glu naming its activation."""
    if glu is not None and _tigon_kernels(gate):
        if glu == "silu":
            return swiglu(gate, up)
        return geglu(gate, up, approximate="tanh" if glu == "gelu_tanh" else "none")
    return activation(gate) * up


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_adjacent(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def _rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairs: str = "halves", fp32=False):
    """RoPE of [B, H, T, D] q and k by [B, T, R] tables, R <= D (the first R dims rotate: Phi-3's partial rotary), in
    transformers' order of operations so the results match it bit for bit. pairs "halves": rotate-half pairs
    (i, i + R/2); "glm": adjacent pairs (2i, 2i + 1), pair i turned by the table's column i (GLM, Helium, ERNIE 4.5
    build their tables that way); "interleaved": adjacent pairs on a table already interleaved (Cohere). fp32: q and k
    rotate in fp32 whatever the tables' dtype (Cohere), as do tables kept in fp32 (OLMo 2's, ERNIE's); one rounding
    back to the input's dtype. Tigon's kernel, where it applies, rotates in fp32 and rounds once."""
    if pairs == "glm":
        half = cos.shape[-1] // 2
        cos, sin = cos[..., :half].repeat_interleave(2, -1), sin[..., :half].repeat_interleave(2, -1)
    if _tigon_kernels(q):
        return rope(q, k, cos, sin, layout="bhtd", interleaved=pairs != "halves")
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    rotary, rotate = cos.shape[-1], _rotate_half if pairs == "halves" else _rotate_adjacent

    def turn(x):
        x_rot, x_pass = x[..., :rotary], x[..., rotary:]
        x_rot = x_rot.float() if fp32 else x_rot
        turned = ((x_rot * cos) + (rotate(x_rot) * sin)).to(x.dtype)
        return turned if x_pass.shape[-1] == 0 else torch.cat([turned, x_pass], dim=-1)

    return turn(q), turn(k)


def _grouped_attention(q, k, v, allowed, scale: float, softcap: float | None) -> torch.Tensor:
    """Attention with the query heads of each KV head folded into one matrix product (no repeated K/V): q [B, H, T, D],
    k and v [B, Hkv, S, D], allowed [B, T, S] (True: attend). Scores in q's dtype, softmax in fp32, as transformers'
    eager attention computes them (softcap: c * tanh(scores / c), Gemma 2's)."""
    b, h, t, d = q.shape
    kv_heads, s = k.shape[1], k.shape[2]
    groups = h // kv_heads
    scores = torch.matmul(q.reshape(b, kv_heads, groups * t, d), k.transpose(-1, -2)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.view(b, kv_heads, groups, t, s).masked_fill(~allowed[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs.view(b, kv_heads, groups * t, s), v).view(b, h, t, d)


def _prefill_attention(q, k, v, allowed, scale: float, softcap: float | None = None) -> torch.Tensor:
    """The prompt's attention: q [B, H, T, D] against k, v [B, Hkv, T, D]; allowed [B, T, T] or None for plain causal
    attention (no padding, no window: SDPA's causal path, flash attention on a GPU). Returns [B, H, T, D]."""
    if softcap is not None:  # SDPA has no logit softcap
        if allowed is None:
            allowed = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()[None]
        return _grouped_attention(q, k, v, allowed, scale, softcap)
    mask = None if allowed is None else allowed[:, None]
    gqa = k.shape[1] != q.shape[1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=gqa)


def _append_token(keys, values, k, v, slot: torch.Tensor, lengths: torch.Tensor) -> None:
    """The step's k and v [B, Hkv, 1, D] into cache views keys, values [B, Hkv, S, D] at the device-side slot
    (lengths = slot + 1 per row, int32 on the device): one Tigon kernel for both where it applies (it reads the
    position on the device and, launched as a programmatic dependent, starts while RoPE drains), torch's index_copy_
    otherwise."""
    if _tigon_kernels(k) and k.dtype == keys.dtype:
        append_to_cache(k.transpose(1, 2), v.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), lengths)
        return
    keys.index_copy_(2, slot, k)
    values.index_copy_(2, slot, v)


def _decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    lengths: torch.Tensor,
    start: torch.Tensor,
    scale: float,
    softcap: float | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """One query token per sequence against its cache: q [B, H, 1, D], k_cache and v_cache [B, Hkv, S, D] (the
    current token already written), lengths int32 [B] on the device (slots filled, the current one included), start
    int32 [B] the first slot each sequence uses (left padding before it). A sliding window keeps the last `window`
    slots. Returns [B, H, 1, D]. Static shapes: the same call serves every step of a CUDA graph."""
    if _tigon_kernels(q) and q.shape[-1] in DECODE_HEAD_DIMS:
        out = decode_attention(
            q.transpose(1, 2),
            k_cache.transpose(1, 2),
            v_cache.transpose(1, 2),
            lengths,
            scale=scale,
            softcap=softcap or 0.0,
            window=-1 if window is None else window,
            cache_starts=start,
        )
        return out.transpose(1, 2)
    slots = torch.arange(k_cache.shape[2], device=q.device)
    allowed = (slots >= start[:, None]) & (slots < lengths[:, None])
    if window is not None:
        allowed &= slots >= lengths[:, None] - window
    return _grouped_attention(q, k_cache, v_cache, allowed[:, None], scale, softcap)
