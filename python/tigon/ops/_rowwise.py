"""Row-wise ops over the last dimension whose backward reads only the forward's output and dy (softmax, sparsemax):
one C entry each way, y = f(x) and dx = g(dy, y), registered as torch ops with fake implementations, an autograd
Function that saves y, and the public call's any-dim handling."""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import check_tensor, compiling, rows_ok

_T = _lib.TENSOR_P


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t if rows_ok(t) else t.contiguous()


def rowwise_op(name: str) -> type[torch.autograd.Function]:
    """Registers tigon::<name>_fwd / <name>_bwd over the C API's tigon_<name>_fwd(x, y, stream) and
    tigon_<name>_bwd(dy, y, dx, stream); returns the autograd Function (apply(x) over the last dimension)."""
    fwd_c = _lib.declare(f"tigon_{name}_fwd", [_T, _T, ctypes.c_void_p])
    bwd_c = _lib.declare(f"tigon_{name}_bwd", [_T, _T, _T, ctypes.c_void_p])

    def fwd_impl(x):
        x = _rows(x)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if x.numel():  # empty in, empty out (as torch)
            _lib.check(fwd_c(_lib.tensor_arg(x), _lib.tensor_arg(y), _lib.stream_of(x)))
        return y

    def bwd_impl(dy, y):
        dy, y = _rows(dy), _rows(y)
        dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
        if y.numel():
            _lib.check(bwd_c(_lib.tensor_arg(dy), _lib.tensor_arg(y), _lib.tensor_arg(dx), _lib.stream_of(y)))
        return dx

    lib = torch.library.Library("tigon", "FRAGMENT")
    lib.define(f"{name}_fwd(Tensor x) -> Tensor")
    lib.define(f"{name}_bwd(Tensor dy, Tensor y) -> Tensor")
    for key in ("CPU", "CUDA"):
        lib.impl(f"{name}_fwd", fwd_impl, key)
        lib.impl(f"{name}_bwd", bwd_impl, key)
    torch.library.register_fake(f"tigon::{name}_fwd", lambda x: x.new_empty(x.shape), lib=lib)
    torch.library.register_fake(f"tigon::{name}_bwd", lambda dy, y: y.new_empty(y.shape), lib=lib)
    fwd_op, bwd_op = getattr(torch.ops.tigon, f"{name}_fwd"), getattr(torch.ops.tigon, f"{name}_bwd")

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = fwd_op(x) if compiling() else fwd_impl(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):
            (y,) = ctx.saved_tensors
            dy = dy.to(y.dtype).contiguous()  # a sum()'s gradient is a stride-0 expansion, which kernels do not read
            return bwd_op(dy, y) if compiling() else bwd_impl(dy, y)

    Op.__name__ = Op.__qualname__ = f"_{name.capitalize()}"
    Op._keep = lib  # the registrations live as long as the Function
    return Op


def along_dim(op: type[torch.autograd.Function], name: str, x: torch.Tensor, dim: int) -> torch.Tensor:
    """op applied along dim of x: the kernels work on the last dimension, so another dim is moved there (a copy) and
    back; a 0-d x is one row of one element. Bad arguments raise naming them."""
    check_tensor(name, "x", x)
    n = max(x.dim(), 1)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -n <= dim < n:
        raise ValueError(f"{name}: argument 'dim' must be an int in [-{n}, {n}), got {dim!r}")
    if x.dim() == 0:
        return op.apply(x.reshape(1)).reshape(())
    if dim % x.dim() == x.dim() - 1:
        return op.apply(x)
    return op.apply(x.movedim(dim, -1)).movedim(-1, dim)
