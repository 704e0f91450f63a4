"""Row-wise ops over the last dimension whose backward reads only the forward's output and dy (softmax, sparsemax):
C entries y = f(x), its causal form over [..., L, L] scores, and dx = g(dy, y), registered as torch ops with fake
implementations, an autograd Function that saves y, and the public call's any-dim handling."""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import check_tensor, compiling, rows_ok

_T = _lib.TENSOR_P


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t if rows_ok(t) else t.contiguous()


def rowwise_op(name: str) -> type[torch.autograd.Function]:
    """Registers tigon::<name>_fwd / <name>_causal_fwd / <name>_bwd over the C API's tigon_<name>_fwd(x, y, stream),
    tigon_<name>_causal_fwd(x, y, stream) and tigon_<name>_bwd(dy, y, dx, stream); returns the autograd Function
    (apply(x, causal) over the last dimension; causal: x is [..., L, L] and entries above the diagonal are masked)."""
    fwd_c = _lib.declare(f"tigon_{name}_fwd", [_T, _T, ctypes.c_void_p])
    causal_c = _lib.declare(f"tigon_{name}_causal_fwd", [_T, _T, ctypes.c_void_p])
    bwd_c = _lib.declare(f"tigon_{name}_bwd", [_T, _T, _T, ctypes.c_void_p])

    def forward_with(entry):
        def impl(x):
            x = _rows(x)
            y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            if x.numel():  # empty in, empty out (as torch)
                _lib.check(entry(_lib.tensor_arg(x), _lib.tensor_arg(y), _lib.stream_of(x)))
            return y

        return impl

    fwd_impl, causal_impl = forward_with(fwd_c), forward_with(causal_c)

    def bwd_impl(dy, y):
        dy, y = _rows(dy), _rows(y)
        dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
        if y.numel():
            _lib.check(bwd_c(_lib.tensor_arg(dy), _lib.tensor_arg(y), _lib.tensor_arg(dx), _lib.stream_of(y)))
        return dx

    lib = torch.library.Library("tigon", "FRAGMENT")
    lib.define(f"{name}_fwd(Tensor x) -> Tensor")
    lib.define(f"{name}_causal_fwd(Tensor x) -> Tensor")
    lib.define(f"{name}_bwd(Tensor dy, Tensor y) -> Tensor")
    for key in ("CPU", "CUDA"):
        lib.impl(f"{name}_fwd", fwd_impl, key)
        lib.impl(f"{name}_causal_fwd", causal_impl, key)
        lib.impl(f"{name}_bwd", bwd_impl, key)
    for fwd in ("fwd", "causal_fwd"):
        torch.library.register_fake(f"tigon::{name}_{fwd}", lambda x: x.new_empty(x.shape), lib=lib)
    torch.library.register_fake(f"tigon::{name}_bwd", lambda dy, y: y.new_empty(y.shape), lib=lib)
    ops = torch.ops.tigon
    fwd_op, causal_op = getattr(ops, f"{name}_fwd"), getattr(ops, f"{name}_causal_fwd")
    bwd_op = getattr(ops, f"{name}_bwd")

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, causal):
            if causal:
                y = causal_op(x) if compiling() else causal_impl(x)
            else:
                y = fwd_op(x) if compiling() else fwd_impl(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):
            # The causal form's backward is the plain one: its y is 0 where masked, so dx is too.
            (y,) = ctx.saved_tensors
            dy = dy.to(y.dtype).contiguous()  # a sum()'s gradient is a stride-0 expansion, which kernels do not read
            return (bwd_op(dy, y) if compiling() else bwd_impl(dy, y)), None

    Op.__name__ = Op.__qualname__ = f"_{name.capitalize()}"
    Op._keep = lib  # the registrations live as long as the Function
    return Op


def along_dim(
    op: type[torch.autograd.Function], name: str, x: torch.Tensor, dim: int, causal: bool = False
) -> torch.Tensor:
    """op applied along dim of x: the kernels work on the last dimension, so another dim is moved there (a copy) and
    back; a 0-d x is one row of one element. causal: x is [..., L, L] scores and dim the last (key) one; entries above
    the diagonal are masked (-inf in, 0 out). Bad arguments raise naming them."""
    check_tensor(name, "x", x)
    n = max(x.dim(), 1)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -n <= dim < n:
        raise ValueError(f"{name}: argument 'dim' must be an int in [-{n}, {n}), got {dim!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"{name}: argument 'causal' must be a bool, got {causal!r}")
    if causal:
        if x.dim() < 2 or x.shape[-2] != x.shape[-1]:
            raise ValueError(f"{name}: argument 'x' must be [..., L, L] scores with causal=True, got {tuple(x.shape)}")
        if dim % x.dim() != x.dim() - 1:
            raise ValueError(f"{name}: causal=True masks along the last dim (the keys), got dim={dim}")
        return op.apply(x, True)
    if x.dim() == 0:
        return op.apply(x.reshape(1), False).reshape(())
    if dim % x.dim() == x.dim() - 1:
        return op.apply(x, False)
    return op.apply(x.movedim(dim, -1), False).movedim(-1, dim)
