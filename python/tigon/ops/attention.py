"""Attention (flash style) as torch ops: tigon::attention_fwd (o and the fp32 log-sum-exp) and tigon::attention_bwd.

The ops are registered with torch.library (with fake implementations, so torch.compile(fullgraph=True) traces them);
autograd lives outside them in an autograd.Function, which calls the ctypes launchers directly in eager mode and the
registered ops under torch.compile. Outputs and workspaces come from torch's allocator and the kernels run on torch's
current stream, so the ops can be captured in CUDA graphs. include/tigon/attention.h states the math and the masks.
"""

from __future__ import annotations

import ctypes
import math

import torch

from tigon import _lib
from tigon.ops._common import compiling

__all__ = ["flash_attention"]


class AttentionParams(ctypes.Structure):  # tigon_attention_params
    _fields_ = [
        ("scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("max_seqlen_q", ctypes.c_int32),
        ("max_seqlen_k", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
    ]


_T = _lib.TENSOR_P
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_STREAM_ARGS = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]  # workspace, bytes, stream
_fwd_workspace_size = _lib.declare("tigon_attention_fwd_workspace_size", [_T] * 5 + [AttentionParams, _SIZE_P])
_fwd = _lib.declare("tigon_attention_fwd", [_T] * 7 + [AttentionParams, *_STREAM_ARGS])
_bwd_workspace_size = _lib.declare("tigon_attention_bwd_workspace_size", [_T] * 5 + [AttentionParams, _SIZE_P])
_bwd = _lib.declare("tigon_attention_bwd", [_T] * 11 + [AttentionParams, *_STREAM_ARGS])

_INT32_MAX = 2**31 - 1


# ---- launchers: outputs and workspace from torch's allocator, the C API on torch's current stream -----------------


def _lse_shape(q, cu_seqlens_q):
    # dense [batch, heads_q, seqlen_q]; variable length [heads_q, total_q]
    return (q.shape[1], q.shape[0]) if cu_seqlens_q is not None else (q.shape[0], q.shape[2], q.shape[1])


_workspace_bytes_cache: dict = {}


def _workspace(size_fn, q, k, v, cu_q, cu_k, params: tuple):
    """A workspace of the size the C API asks for (none on the CPU); the size depends on shapes, params and device."""
    if q.device.type != "cuda":
        return None, 0
    key = (size_fn is _bwd_workspace_size, q.shape, k.shape, v.shape, q.dtype, q.device, cu_q is None, params)
    key += (None if cu_q is None else cu_q.shape,)
    nbytes = _workspace_bytes_cache.get(key)
    if nbytes is None:
        size = ctypes.c_size_t(0)
        args = (_lib.tensor_arg(t) for t in (q, k, v, cu_q, cu_k))
        _lib.check(size_fn(*args, AttentionParams(*params), ctypes.byref(size)))
        nbytes = _workspace_bytes_cache[key] = size.value
    if nbytes == 0:
        return None, 0
    return torch.empty(nbytes, dtype=torch.uint8, device=q.device), nbytes


_DEFAULT_SCALE = 0.0  # 1 / sqrt(head_dim), resolved where the shapes are concrete (see flash_attention)


def _params(q, scale, softcap, causal, window_left, window_right, max_seqlen_q, max_seqlen_k, deterministic) -> tuple:
    if scale == _DEFAULT_SCALE:
        scale = 1.0 / math.sqrt(max(1, q.shape[-1]))
    return (scale, softcap, int(causal), window_left, window_right, max_seqlen_q, max_seqlen_k, int(deterministic))


def _fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, scale, softcap, causal, window_left, window_right, max_q, max_k):
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(_lse_shape(q, cu_seqlens_q), dtype=torch.float32, device=q.device)
    params = _params(q, scale, softcap, causal, window_left, window_right, max_q, max_k, True)
    ws, nbytes = _workspace(_fwd_workspace_size, q, k, v, cu_seqlens_q, cu_seqlens_k, params)
    tensors = (q, k, v, cu_seqlens_q, cu_seqlens_k, o, lse)
    _lib.check(
        _fwd(
            *(_lib.tensor_arg(t) for t in tensors),
            AttentionParams(*params),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(q),
        )
    )
    return o, lse


def _bwd_impl(
    dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, scale, softcap, causal, wl, wr, max_q, max_k, deterministic
):
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    params = _params(q, scale, softcap, causal, wl, wr, max_q, max_k, deterministic)
    ws, nbytes = _workspace(_bwd_workspace_size, q, k, v, cu_seqlens_q, cu_seqlens_k, params)
    tensors = (dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, dq, dk, dv)
    _lib.check(
        _bwd(
            *(_lib.tensor_arg(t) for t in tensors),
            AttentionParams(*params),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(q),
        )
    )
    return dq, dk, dv


# ---- torch.library registration ----------------------------------------------------------------------------------

_OPTIONS = (
    "float scale, float softcap, bool causal, int window_left, int window_right, int max_seqlen_q, int max_seqlen_k"
)
_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define(
    f"attention_fwd(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, {_OPTIONS}) "
    "-> (Tensor, Tensor)"
)
_LIB.define(
    "attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor? cu_seqlens_q, "
    f"Tensor? cu_seqlens_k, {_OPTIONS}, bool deterministic) -> (Tensor, Tensor, Tensor)"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("attention_fwd", _fwd_impl, _key)
    _LIB.impl("attention_bwd", _bwd_impl, _key)


@torch.library.register_fake("tigon::attention_fwd")
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, scale, softcap, causal, wl, wr, max_q, max_k):
    return q.new_empty(q.shape), q.new_empty(_lse_shape(q, cu_seqlens_q), dtype=torch.float32)


@torch.library.register_fake("tigon::attention_bwd")
def _bwd_fake(dout, q, k, v, o, lse, cu_q, cu_k, scale, softcap, causal, wl, wr, max_q, max_k, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


# ---- autograd -------------------------------------------------------------------------------------------------------


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, options, deterministic):
        if compiling():
            o, lse = torch.ops.tigon.attention_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, *options)
        else:
            o, lse = _fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, *options)
        ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
        ctx.options, ctx.deterministic = options, deterministic
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
        # contiguous(): e.g. a sum()'s stride-0 gradient; free when already contiguous, and traceable (no stride read)
        dout = dout.contiguous()
        args = (dout, q, k, v, o, lse, cu_q, cu_k, *ctx.options, ctx.deterministic)
        dq, dk, dv = torch.ops.tigon.attention_bwd(*args) if compiling() else _bwd_impl(*args)
        return dq, dk, dv, None, None, None, None


# ---- argument checks: what the C API cannot see ----------------------------------------------------------------------


def _int32(value, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"flash_attention: argument '{arg}' must be an int, got {type(value).__name__}")
    if not -_INT32_MAX - 1 <= value <= _INT32_MAX:
        raise ValueError(f"flash_attention: argument '{arg}' must fit in int32, got {value}")
    return value


def _number(value, arg: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"flash_attention: argument '{arg}' must be a float, got {type(value).__name__}")
    return float(value)


def _flag(value, arg: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"flash_attention: argument '{arg}' must be a bool, got {type(value).__name__}")
    return value


def _tensor(t, arg: str, optional: bool = False):
    if t is None and optional:
        return None
    if not isinstance(t, torch.Tensor):
        kind = "a torch.Tensor or None" if optional else "a torch.Tensor"
        raise TypeError(f"flash_attention: argument '{arg}' must be {kind}, got {type(t).__name__}")
    # The kernels take any strides with a contiguous head_dim; only a strided head_dim is copied.
    return t.contiguous() if t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1 else t


def _window(window) -> tuple[int, int]:
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise ValueError(f"flash_attention: argument 'window' must be a (left, right) pair of ints, got {window!r}")
    return _int32(window[0], "window"), _int32(window[1], "window")


def _max_seqlen(value, arg: str, varlen: bool) -> int:
    if not varlen:
        return 0  # dense: the lengths are the tensors'
    if value is None:
        raise ValueError(f"flash_attention: argument '{arg}' is required with cu_seqlens_q / cu_seqlens_k")
    return _int32(value, arg)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    softcap: float = 0.0,
    window: tuple[int, int] = (-1, -1),
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    deterministic: bool = True,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention computed block by block (the score matrix never exists in memory).

    q is (B, Sq, Hq, D), k and v (B, Sk, Hkv, D) with Hq a multiple of Hkv (grouped-query attention, no repeat of k
    and v). Any strides with the last one 1: a (B, H, S, D) tensor is passed as ``x.transpose(1, 2)`` without a copy.
    Variable length (packed sequences): q (Tq, Hq, D), k and v (Tk, Hkv, D), cu_seqlens_q / cu_seqlens_k int32
    (batch + 1,) offsets starting at 0 on q's device, and max_seqlen_q / max_seqlen_k bounding the lengths (on CUDA
    the lengths are not read on the host: a sequence longer than its bound is not computed past it).

    causal hides the keys right of the diagonal, aligned bottom-right (with Sq < Sk, the queries continue a KV prefix);
    window=(left, right) keeps keys within left / right positions of the diagonal (-1: unbounded; right must be -1 or 0
    with causal). scale defaults to 1 / sqrt(D); softcap > 0 passes scores through softcap * tanh(score / softcap). A
    query row that sees no key gets o = 0 and lse = -inf. Returns o shaped like q (a new contiguous tensor) and, with
    return_lse, the fp32 log-sum-exp of each row: (B, Hq, Sq), or (Hq, Tq) packed; it carries no gradient.

    dtypes: bfloat16 or float16 (float32 on the CPU); CUDA head dims 64, 96, 128, 256. deterministic=True makes the
    backward give the same bits on every run; False allows a faster order-dependent accumulation where there is one.
    """
    q, k, v = _tensor(q, "q"), _tensor(k, "k"), _tensor(v, "v")
    cu_seqlens_q = _tensor(cu_seqlens_q, "cu_seqlens_q", optional=True)
    cu_seqlens_k = _tensor(cu_seqlens_k, "cu_seqlens_k", optional=True)
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    wl, wr = _window(window)
    # The default scale is resolved by the launchers, on concrete shapes: under torch.compile's dynamic shapes the
    # square root of a symbolic head dim is a symbolic float that torch < 2.6 cannot guard on.
    if scale is None:
        scale = _DEFAULT_SCALE
    elif not _number(scale, "scale") > 0 or not math.isfinite(scale):
        raise ValueError(f"flash_attention: argument 'scale' must be > 0 and finite, got {scale}")
    options = (
        scale,
        _number(softcap, "softcap"),
        _flag(causal, "causal"),
        wl,
        wr,
        _max_seqlen(max_seqlen_q, "max_seqlen_q", varlen),
        _max_seqlen(max_seqlen_k, "max_seqlen_k", varlen),
    )
    deterministic = _flag(deterministic, "deterministic")
    o, lse = _FlashAttention.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, options, deterministic)
    return (o, lse) if _flag(return_lse, "return_lse") else o
