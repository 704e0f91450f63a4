"""Embedding lookup as a torch op (tigon::embedding_fwd / embedding_bwd): ``F.embedding(indices, weight,
padding_idx)`` with a deterministic weight gradient (each row's gradients summed in fp32 in index order; no
atomics)."""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import FLOAT_DTYPES, check_tensor, compiling, scratch

__all__ = ["embedding"]


class EmbeddingParams(ctypes.Structure):
    _fields_ = [("padding_idx", ctypes.c_int64)]


_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_embedding_fwd", [_T, _T, _T, ctypes.c_void_p])
_ws = _lib.declare("tigon_embedding_bwd_workspace_size", [_T, _T, ctypes.POINTER(ctypes.c_size_t)])
_bwd = _lib.declare(
    "tigon_embedding_bwd", [_T, _T, _T, EmbeddingParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
)


def _fwd_impl(indices, weight):
    indices = indices.contiguous()
    if weight.stride(-1) != 1:
        weight = weight.contiguous()
    y = torch.empty(indices.numel(), weight.shape[1], dtype=weight.dtype, device=weight.device)
    _lib.check(_fwd(_lib.tensor_arg(indices), _lib.tensor_arg(weight), _lib.tensor_arg(y), _lib.stream_of(weight)))
    return y.view(*indices.shape, weight.shape[1])


def _bwd_impl(indices, dy, num_weights: int, padding_idx: int):
    indices = indices.contiguous()
    dy = dy.reshape(-1, dy.shape[-1])
    if dy.stride(-1) != 1:
        dy = dy.contiguous()
    dw = torch.empty(num_weights, dy.shape[1], dtype=dy.dtype, device=dy.device)
    ws, ws_bytes = scratch(_ws, dy.device, indices, dw)
    _lib.check(
        _bwd(
            _lib.tensor_arg(indices),
            _lib.tensor_arg(dy),
            _lib.tensor_arg(dw),
            EmbeddingParams(padding_idx),
            ws.data_ptr() if ws is not None else None,
            ws_bytes,
            _lib.stream_of(dy),
        )
    )
    return dw


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("embedding_fwd(Tensor indices, Tensor weight) -> Tensor")
_LIB.define("embedding_bwd(Tensor indices, Tensor dy, int num_weights, int padding_idx) -> Tensor")
for _key in ("CPU", "CUDA"):
    _LIB.impl("embedding_fwd", _fwd_impl, _key)
    _LIB.impl("embedding_bwd", _bwd_impl, _key)


@torch.library.register_fake("tigon::embedding_fwd")
def _fwd_fake(indices, weight):
    return weight.new_empty((*indices.shape, weight.shape[1]))


@torch.library.register_fake("tigon::embedding_bwd")
def _bwd_fake(indices, dy, num_weights, padding_idx):
    return dy.new_empty((num_weights, dy.shape[-1]))


class _Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, indices, weight, padding_idx):
        y = torch.ops.tigon.embedding_fwd(indices, weight) if compiling() else _fwd_impl(indices, weight)
        ctx.save_for_backward(indices)
        ctx.num_weights, ctx.padding_idx = weight.shape[0], padding_idx
        return y

    @staticmethod
    def backward(ctx, dy):
        (indices,) = ctx.saved_tensors
        args = (indices, dy.contiguous(), ctx.num_weights, ctx.padding_idx)
        dw = torch.ops.tigon.embedding_bwd(*args) if compiling() else _bwd_impl(*args)
        return None, dw, None


def embedding(
    indices: torch.Tensor, weight: torch.Tensor, padding_idx: int | None = None, check_indices: bool = False
) -> torch.Tensor:
    """``F.embedding(indices, weight, padding_idx)``: rows of weight [V, H] (fp32, fp16 or bf16) picked by indices
    (int32 or int64, any shape); the result is [*indices.shape, H]. weight's gradient is deterministic, and the row at
    padding_idx (negative: counted from the end) gets none. An index outside [0, V) raises on the CPU; on a GPU it
    gives a row of NaN (raising would synchronise), unless check_indices=True checks first and raises."""
    check_tensor("embedding", "indices", indices)
    check_tensor("embedding", "weight", weight)
    if indices.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"embedding: argument 'indices' must be int32 or int64, got {indices.dtype}")
    if weight.dim() != 2 or weight.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"embedding: argument 'weight' must be a [V, H] float32, float16 or bfloat16 tensor, got "
            f"{tuple(weight.shape)} {weight.dtype}"
        )
    if indices.device != weight.device:
        raise ValueError(f"embedding: argument 'indices' is on {indices.device} but 'weight' is on {weight.device}")
    v = weight.shape[0]
    if padding_idx is None:
        pad = -1
    elif isinstance(padding_idx, bool) or not isinstance(padding_idx, int) or not -v <= padding_idx < v:
        raise ValueError(f"embedding: argument 'padding_idx' must be an int in [-{v}, {v}), got {padding_idx!r}")
    else:
        pad = padding_idx % v
    if (check_indices or indices.device.type == "cpu") and indices.numel() and not compiling():
        lo, hi = (int(v) for v in torch.aminmax(indices))
        if lo < 0 or hi >= v:
            raise ValueError(f"embedding: argument 'indices' holds {lo if lo < 0 else hi}, outside [0, {v})")
    return _Embedding.apply(indices, weight, pad)
