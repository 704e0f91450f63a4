"""Dynamic Tanh as a torch op: ``gamma * tanh(alpha * x) + beta`` (tigon::dyt_fwd / dyt_bwd), the normalization-free
layer of "Transformers without Normalization". alpha is one learned scalar, gamma and beta per channel; every
gradient (x, alpha, gamma, beta) comes from one backward pass with deterministic fp32 sums."""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import check_tensor, compiling, rows_ok, scratch

__all__ = ["dyt"]

_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_dyt_fwd", [_T, _T, _T, _T, _T, ctypes.c_void_p])
_ws = _lib.declare("tigon_dyt_bwd_workspace_size", [_T, ctypes.POINTER(ctypes.c_size_t)])
_bwd = _lib.declare("tigon_dyt_bwd", [_T] * 8 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t if rows_ok(t) else t.contiguous()


def _fwd_impl(x, alpha, gamma, beta):
    x = _rows(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    arg = _lib.tensor_arg
    _lib.check(_fwd(arg(x), arg(alpha), arg(gamma), arg(beta), arg(y), _lib.stream_of(x)))
    return y


def _bwd_impl(dy, x, alpha, gamma, need_dx: bool, need_dalpha: bool, need_dgamma: bool, need_dbeta: bool):
    x, dy = _rows(x), _rows(dy)
    c = x.shape[-1]
    dx = torch.empty(x.shape if need_dx else (0,), dtype=x.dtype, device=x.device)
    dalpha = torch.empty((1,) if need_dalpha else (0,), dtype=torch.float32, device=x.device)
    dgamma = torch.empty((c,) if need_dgamma else (0,), dtype=gamma.dtype, device=x.device)
    dbeta = torch.empty((c,) if need_dbeta else (0,), dtype=gamma.dtype, device=x.device)
    ws, ws_bytes = scratch(_ws, x.device, x)
    arg = _lib.tensor_arg
    _lib.check(
        _bwd(
            arg(dy),
            arg(x),
            arg(alpha),
            arg(gamma),
            arg(dx) if need_dx else None,
            arg(dalpha) if need_dalpha else None,
            arg(dgamma) if need_dgamma else None,
            arg(dbeta) if need_dbeta else None,
            ws.data_ptr() if ws is not None else None,
            ws_bytes,
            _lib.stream_of(x),
        )
    )
    return dx, dalpha, dgamma, dbeta


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("dyt_fwd(Tensor x, Tensor alpha, Tensor gamma, Tensor? beta) -> Tensor")
_LIB.define(
    "dyt_bwd(Tensor dy, Tensor x, Tensor alpha, Tensor gamma, bool need_dx, bool need_dalpha, bool need_dgamma, "
    "bool need_dbeta) -> (Tensor, Tensor, Tensor, Tensor)"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("dyt_fwd", _fwd_impl, _key)
    _LIB.impl("dyt_bwd", _bwd_impl, _key)


@torch.library.register_fake("tigon::dyt_fwd")
def _fwd_fake(x, alpha, gamma, beta):
    return x.new_empty(x.shape)


@torch.library.register_fake("tigon::dyt_bwd")
def _bwd_fake(dy, x, alpha, gamma, need_dx, need_dalpha, need_dgamma, need_dbeta):
    c = x.shape[-1]
    return (
        x.new_empty(x.shape if need_dx else (0,)),
        x.new_empty((1,) if need_dalpha else (0,), dtype=torch.float32),
        gamma.new_empty((c,) if need_dgamma else (0,)),
        gamma.new_empty((c,) if need_dbeta else (0,)),
    )


class _DyT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha, gamma, beta):
        # The kernels take alpha as one fp32 value and gamma, beta in x's dtype or fp32.
        a32 = alpha.reshape(1).float()
        pdt = gamma.dtype if gamma.dtype in (x.dtype, torch.float32) else torch.float32
        g, b = gamma.to(pdt).contiguous(), None if beta is None else beta.to(pdt).contiguous()
        y = torch.ops.tigon.dyt_fwd(x, a32, g, b) if compiling() else _fwd_impl(x, a32, g, b)
        ctx.save_for_backward(x, a32, g)
        ctx.dtypes = (alpha.dtype, alpha.shape, gamma.dtype, None if beta is None else beta.dtype)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x, a32, g = ctx.saved_tensors
        need = ctx.needs_input_grad
        if dy.dtype != x.dtype:
            dy = dy.to(x.dtype)
        dy = dy.contiguous()  # a sum()'s gradient is a stride-0 expansion, which the kernels do not read
        args = (dy, x, a32, g, need[0], need[1], need[2], need[3])
        dx, dalpha, dgamma, dbeta = torch.ops.tigon.dyt_bwd(*args) if compiling() else _bwd_impl(*args)
        alpha_dtype, alpha_shape, gamma_dtype, beta_dtype = ctx.dtypes
        return (
            dx.view(x.shape) if need[0] else None,
            dalpha.to(alpha_dtype).view(alpha_shape) if need[1] else None,
            dgamma.to(gamma_dtype) if need[2] else None,
            dbeta.to(beta_dtype) if need[3] else None,
        )


def dyt(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None = None) -> torch.Tensor:
    """``gamma * tanh(alpha * x) + beta`` over the last dimension of x (fp32, fp16 or bf16; CPU or CUDA). alpha has
    one element; gamma and beta (None: none) have x.shape[-1]. Gradients for all four."""
    check_tensor("dyt", "x", x)
    check_tensor("dyt", "alpha", alpha)
    check_tensor("dyt", "gamma", gamma)
    check_tensor("dyt", "beta", beta, optional=True)
    if x.dim() == 0:
        raise ValueError("dyt: argument 'x' must have a last (channel) dimension, got a 0-d tensor")
    if alpha.numel() != 1:
        raise ValueError(f"dyt: argument 'alpha' must have one element, got shape {tuple(alpha.shape)}")
    for name, t in (("gamma", gamma), ("beta", beta)):
        if t is not None and tuple(t.shape) != (x.shape[-1],):
            raise ValueError(
                f"dyt: argument '{name}' must have shape ({x.shape[-1]},) like x's last dimension, got {tuple(t.shape)}"
            )
    return _DyT.apply(x, alpha, gamma, beta)
