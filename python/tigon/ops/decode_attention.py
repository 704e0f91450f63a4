"""Decode attention (flash-decoding over a KV cache) as a torch op: tigon::decode_attention.

A few new query tokens per sequence attend to a static KV cache whose valid lengths live on the device
(cache_seqlens), so a decoding step runs without a host synchronisation and can be captured in a CUDA graph. The op
is registered with torch.library (with a fake implementation, so torch.compile(fullgraph=True) traces it); the
outputs and workspace come from torch's allocator and the kernels run on torch's current stream.
include/tigon/decode_attention.h states the math and layouts.

New keys and values go into the cache before the call: append_to_cache writes them at the positions the attention
expects (cache_seqlens[b] - Tq + t, read on the device) in one kernel for both caches; torch's own indexing does the
same (``k_cache[torch.arange(B), positions] = k_new``).
"""

from __future__ import annotations

import ctypes
import math

import torch

from tigon import _lib
from tigon.ops._common import check_tensor, compiling

__all__ = ["append_to_cache", "decode_attention"]


class DecodeAttentionParams(ctypes.Structure):  # tigon_decode_attention_params
    _fields_ = [("scale", ctypes.c_float), ("softcap", ctypes.c_float), ("window_left", ctypes.c_int32)]


_T = _lib.TENSOR_P
_workspace_size = _lib.declare(
    "tigon_decode_attention_workspace_size", [_T, _T, _T, DecodeAttentionParams, ctypes.POINTER(ctypes.c_size_t)]
)
_run = _lib.declare(
    "tigon_decode_attention",
    [_T] * 7 + [DecodeAttentionParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p],
)

_append = _lib.declare("tigon_decode_attention_append", [_T] * 5 + [ctypes.c_void_p])

_INT32_MAX = 2**31 - 1
_workspace_bytes_cache: dict = {}


def _lse_shape(q: torch.Tensor) -> tuple:
    return (q.shape[0], q.shape[2], q.shape[1]) if q.dim() == 4 else (0, 0, 0)


def _params(q, scale: float, softcap: float, window_left: int) -> DecodeAttentionParams:
    if scale <= 0.0:  # the default, 1 / sqrt(head_dim), resolved on concrete shapes
        scale = 1.0 / math.sqrt(max(1, q.shape[-1]))
    return DecodeAttentionParams(scale, softcap, window_left)


def _workspace(q, k, v, params: DecodeAttentionParams):
    if q.device.type != "cuda":
        return None, 0
    key = (q.shape, k.shape, q.dtype, q.device)  # the size depends on the shapes and the device alone
    nbytes = _workspace_bytes_cache.get(key)
    if nbytes is None:
        size = ctypes.c_size_t(0)
        args = (_lib.tensor_arg(t) for t in (q, k, v))
        _lib.check(_workspace_size(*args, params, ctypes.byref(size)))
        nbytes = _workspace_bytes_cache[key] = size.value
    if nbytes == 0:
        return None, 0
    return torch.empty(nbytes, dtype=torch.uint8, device=q.device), nbytes


def _impl(q, k_cache, v_cache, cache_seqlens, cache_starts, scale: float, softcap: float, window_left: int):
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(_lse_shape(q), dtype=torch.float32, device=q.device)
    params = _params(q, scale, softcap, window_left)
    ws, nbytes = _workspace(q, k_cache, v_cache, params)
    tensors = (q, k_cache, v_cache, cache_seqlens, cache_starts, out, lse)
    _lib.check(
        _run(
            *(_lib.tensor_arg(t) for t in tensors),
            params,
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(q),
        )
    )
    return out, lse


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define(
    "decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cache_seqlens, Tensor? cache_starts, "
    "float scale, float softcap, int window_left) -> (Tensor, Tensor)"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("decode_attention", _impl, _key)


@torch.library.register_fake("tigon::decode_attention")
def _fake(q, k_cache, v_cache, cache_seqlens, cache_starts, scale, softcap, window_left):
    return q.new_empty(q.shape), q.new_empty(_lse_shape(q), dtype=torch.float32)


def _append_impl(k_new, v_new, k_cache, v_cache, cache_seqlens) -> None:
    tensors = (k_new, v_new, k_cache, v_cache, cache_seqlens)
    _lib.check(_append(*(_lib.tensor_arg(t) for t in tensors), _lib.stream_of(k_cache)))


_LIB.define(
    "decode_attention_append_(Tensor k_new, Tensor v_new, Tensor(a!) k_cache, Tensor(b!) v_cache, "
    "Tensor cache_seqlens) -> ()"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("decode_attention_append_", _append_impl, _key)


@torch.library.register_fake("tigon::decode_attention_append_")
def _append_fake(k_new, v_new, k_cache, v_cache, cache_seqlens):
    return None


def append_to_cache(
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor,
) -> None:
    """Writes new keys and values into the caches where decode_attention expects them, in place.

    k_new and v_new are (B, Tq, Hkv, D), k_cache and v_cache (B, S_max, Hkv, D) in the same dtype (bfloat16, float16
    or float32), any strides with the last one 1 (a (B, Hkv, S_max, D) cache is passed as ``cache.transpose(1, 2)``).
    Token t of sequence b goes to position cache_seqlens[b] - Tq + t (cache_seqlens: int32 (B,) on the caches' device,
    the lengths the attention call then takes, new tokens included); positions outside [0, S_max) are not written. The
    positions are read on the device only, so a CUDA graph of a decode step replays the write where the step stands.
    """
    for name, t in (
        ("k_new", k_new),
        ("v_new", v_new),
        ("k_cache", k_cache),
        ("v_cache", v_cache),
        ("cache_seqlens", cache_seqlens),
    ):
        check_tensor("append_to_cache", name, t)
    args = (k_new, v_new, k_cache, v_cache, cache_seqlens)
    if compiling():
        torch.ops.tigon.decode_attention_append_(*args)
    else:
        _append_impl(*args)


def _number(value, arg: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"decode_attention: argument '{arg}' must be a float, got {type(value).__name__}")
    return float(value)


def _window_left(window) -> int:
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"decode_attention: argument 'window' must be an int, got {type(window).__name__}")
    if window != -1 and not 1 <= window <= _INT32_MAX:
        raise ValueError(f"decode_attention: argument 'window' must be -1 (unbounded) or in [1, 2^31), got {window}")
    return window - 1 if window > 0 else -1


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor,
    scale: float | None = None,
    softcap: float = 0.0,
    window: int = -1,
    return_lse: bool = False,
    cache_starts: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention of a few new tokens per sequence against a KV cache (flash-decoding).

    q is (B, Tq, Hq, D): Tq new tokens per sequence (1 when decoding; a few for speculative or chunked steps, causal
    among themselves). k_cache and v_cache are (B, S_max, Hkv, D) with Hq a multiple of Hkv; any strides with the last
    one 1, so a (B, Hkv, S_max, D) cache is passed as ``cache.transpose(1, 2)`` without a copy. cache_seqlens is int32
    (B,) on q's device: sequence b's cache holds cache_seqlens[b] valid positions, the new tokens' keys and values
    included (write them first; see the module's docstring), and new token t sits at position
    cache_seqlens[b] - Tq + t. It is never read on the host (on CUDA, values outside [0, S_max] are clamped).
    cache_starts (int32 (B,), optional, likewise on the device) hides the positions before cache_starts[b] from
    sequence b: a left-padded batch's padding (on CUDA clamped to [0, cache_seqlens[b]]).

    scale defaults to 1 / sqrt(D); softcap > 0 passes scores through softcap * tanh(score / softcap) (Gemma 2);
    window > 0 keeps the last `window` positions up to and including each token's own (Mistral's and Gemma's
    sliding_window: key j is visible from position i when i - window < j <= i), -1 keeps all. A token that sees no
    key gets zeros (and lse -inf). Returns out shaped like q (a new contiguous tensor) and, with return_lse, the fp32
    log-sum-exp (B, Hq, Tq).

    dtypes: bfloat16 or float16 (float32 on the CPU); CUDA head dims 64, 80, 96, 128, 256 with 16-byte aligned rows.
    An inference op: it has no backward, and raises a RuntimeError when autograd would need one.
    """
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("cache_seqlens", cache_seqlens)):
        check_tensor("decode_attention", name, t)
    if cache_starts is not None:
        check_tensor("decode_attention", "cache_starts", cache_starts)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k_cache, v_cache)):
        raise RuntimeError(
            "decode_attention: an inference op without a backward, but an input requires grad; call it under "
            "torch.no_grad() / torch.inference_mode(), or detach the inputs (training uses tigon.ops.flash_attention)"
        )
    if scale is None:
        scale = 0.0
    elif not _number(scale, "scale") > 0 or not math.isfinite(scale):
        raise ValueError(f"decode_attention: argument 'scale' must be > 0 and finite, got {scale}")
    softcap = _number(softcap, "softcap")
    window_left = _window_left(window)
    if not isinstance(return_lse, bool):
        raise TypeError(f"decode_attention: argument 'return_lse' must be a bool, got {type(return_lse).__name__}")
    if q.dim() == 4 and q.shape[-1] > 1 and q.stride(-1) != 1:
        q = q.contiguous()  # the queries are small; the cache is never copied (the C API names a bad layout)
    args = (q, k_cache, v_cache, cache_seqlens, cache_starts, float(scale), softcap, window_left)
    out, lse = torch.ops.tigon.decode_attention(*args) if compiling() else _impl(*args)
    return (out, lse) if return_lse else out
