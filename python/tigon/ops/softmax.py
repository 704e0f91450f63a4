"""Softmax as a torch op (tigon::softmax_fwd / softmax_bwd): ``torch.softmax(x, dim)`` with a backward from the saved
output, a row held in registers where it fits (one read and one write each way)."""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import check_tensor, compiling, rows_ok

__all__ = ["softmax"]

_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_softmax_fwd", [_T, _T, ctypes.c_void_p])
_bwd = _lib.declare("tigon_softmax_bwd", [_T, _T, _T, ctypes.c_void_p])


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t if rows_ok(t) else t.contiguous()


def _fwd_impl(x):
    x = _rows(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel():  # empty in, empty out (as torch)
        _lib.check(_fwd(_lib.tensor_arg(x), _lib.tensor_arg(y), _lib.stream_of(x)))
    return y


def _bwd_impl(dy, y):
    dy, y = _rows(dy), _rows(y)
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    if y.numel():
        _lib.check(_bwd(_lib.tensor_arg(dy), _lib.tensor_arg(y), _lib.tensor_arg(dx), _lib.stream_of(y)))
    return dx


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("softmax_fwd(Tensor x) -> Tensor")
_LIB.define("softmax_bwd(Tensor dy, Tensor y) -> Tensor")
for _key in ("CPU", "CUDA"):
    _LIB.impl("softmax_fwd", _fwd_impl, _key)
    _LIB.impl("softmax_bwd", _bwd_impl, _key)


@torch.library.register_fake("tigon::softmax_fwd")
def _fwd_fake(x):
    return x.new_empty(x.shape)


@torch.library.register_fake("tigon::softmax_bwd")
def _bwd_fake(dy, y):
    return y.new_empty(y.shape)


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.ops.tigon.softmax_fwd(x) if compiling() else _fwd_impl(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dy = dy.to(y.dtype).contiguous()  # a sum()'s gradient is a stride-0 expansion, which the kernels do not read
        return torch.ops.tigon.softmax_bwd(dy, y) if compiling() else _bwd_impl(dy, y)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``torch.softmax(x, dim)`` for fp32, fp16 and bf16 tensors on the CPU or CUDA, with its gradient. Any dim: the
    kernels work on the last one, so another dim is moved there (a copy) and back."""
    check_tensor("softmax", "x", x)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -max(x.dim(), 1) <= dim < max(x.dim(), 1):
        raise ValueError(
            f"softmax: argument 'dim' must be an int in [-{max(x.dim(), 1)}, {max(x.dim(), 1)}), got {dim!r}"
        )
    if x.dim() == 0:
        return _Softmax.apply(x.reshape(1)).reshape(())
    last = dim % x.dim() == x.dim() - 1
    if last:
        return _Softmax.apply(x)
    return _Softmax.apply(x.movedim(dim, -1)).movedim(-1, dim)
