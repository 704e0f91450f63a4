"""PolyNorm (PolyCom) as a torch op: ``w0 * norm(x**3) + w1 * norm(x**2) + w2 * norm(x) + b`` over the last
dimension, norm(u) = u / sqrt(mean(u**2) + eps) (tigon::poly_norm_fwd / poly_norm_bwd). Every gradient (x, the three
weights, the bias) from one backward pass with deterministic fp32 sums."""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import check_tensor, compiling, rows_ok, scratch

__all__ = ["poly_norm"]


class PolyNormParams(ctypes.Structure):  # tigon_poly_norm_params
    _fields_ = [("eps", ctypes.c_float)]


_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_poly_norm_fwd", [_T] * 5 + [PolyNormParams, ctypes.c_void_p])
_ws = _lib.declare("tigon_poly_norm_bwd_workspace_size", [_T, ctypes.POINTER(ctypes.c_size_t)])
_bwd = _lib.declare("tigon_poly_norm_bwd", [_T] * 7 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t if rows_ok(t) else t.contiguous()


def _fwd_impl(x, weight, bias, eps: float):
    x = _rows(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    rstd = torch.empty((rows, 3), dtype=torch.float32, device=x.device)
    arg = _lib.tensor_arg
    _lib.check(_fwd(arg(x), arg(weight), arg(bias), arg(y), arg(rstd), PolyNormParams(eps), _lib.stream_of(x)))
    return y, rstd


def _bwd_impl(dy, x, weight, rstd, need_dx: bool, need_dw: bool, need_db: bool):
    x, dy = _rows(x), _rows(dy)
    dx = torch.empty(x.shape if need_dx else (0,), dtype=x.dtype, device=x.device)
    dw = torch.empty((3,) if need_dw else (0,), dtype=torch.float32, device=x.device)
    db = torch.empty((1,) if need_db else (0,), dtype=torch.float32, device=x.device)
    ws, ws_bytes = scratch(_ws, x.device, x)
    arg = _lib.tensor_arg
    _lib.check(
        _bwd(
            arg(dy),
            arg(x),
            arg(weight),
            arg(rstd),
            arg(dx) if need_dx else None,
            arg(dw) if need_dw else None,
            arg(db) if need_db else None,
            ws.data_ptr() if ws is not None else None,
            ws_bytes,
            _lib.stream_of(x),
        )
    )
    return dx, dw, db


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("poly_norm_fwd(Tensor x, Tensor weight, Tensor bias, float eps) -> (Tensor, Tensor)")
_LIB.define(
    "poly_norm_bwd(Tensor dy, Tensor x, Tensor weight, Tensor rstd, bool need_dx, bool need_dw, bool need_db) "
    "-> (Tensor, Tensor, Tensor)"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("poly_norm_fwd", _fwd_impl, _key)
    _LIB.impl("poly_norm_bwd", _bwd_impl, _key)


@torch.library.register_fake("tigon::poly_norm_fwd")
def _fwd_fake(x, weight, bias, eps):
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return x.new_empty(x.shape), x.new_empty((rows, 3), dtype=torch.float32)


@torch.library.register_fake("tigon::poly_norm_bwd")
def _bwd_fake(dy, x, weight, rstd, need_dx, need_dw, need_db):
    return (
        x.new_empty(x.shape if need_dx else (0,)),
        x.new_empty((3,) if need_dw else (0,), dtype=torch.float32),
        x.new_empty((1,) if need_db else (0,), dtype=torch.float32),
    )


class _PolyNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        w32, b32 = weight.float().contiguous(), bias.reshape(1).float().contiguous()
        y, rstd = torch.ops.tigon.poly_norm_fwd(x, w32, b32, eps) if compiling() else _fwd_impl(x, w32, b32, eps)
        ctx.save_for_backward(x, w32, rstd)
        ctx.dtypes = (weight.dtype, bias.dtype, bias.shape)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x, w32, rstd = ctx.saved_tensors
        need = ctx.needs_input_grad
        dy = dy.to(x.dtype).contiguous()  # a sum()'s gradient is a stride-0 expansion, which the kernels do not read
        args = (dy, x, w32, rstd, need[0], need[1], need[2])
        dx, dw, db = torch.ops.tigon.poly_norm_bwd(*args) if compiling() else _bwd_impl(*args)
        weight_dtype, bias_dtype, bias_shape = ctx.dtypes
        return (
            dx.view(x.shape) if need[0] else None,
            dw.to(weight_dtype) if need[1] else None,
            db.to(bias_dtype).view(bias_shape) if need[2] else None,
            None,
        )


def poly_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``w0 * norm(x**3) + w1 * norm(x**2) + w2 * norm(x) + b`` over the last dimension of x (fp32, fp16 or bf16; CPU
    or CUDA), norm(u) = u / sqrt(mean(u**2) + eps); weight has 3 elements, bias 1. Gradients for all three."""
    check_tensor("poly_norm", "x", x)
    check_tensor("poly_norm", "weight", weight)
    check_tensor("poly_norm", "bias", bias)
    if x.dim() == 0:
        raise ValueError("poly_norm: argument 'x' must have a last dimension, got a 0-d tensor")
    if weight.numel() != 3:
        raise ValueError(f"poly_norm: argument 'weight' must have 3 elements, got shape {tuple(weight.shape)}")
    if bias.numel() != 1:
        raise ValueError(f"poly_norm: argument 'bias' must have one element, got shape {tuple(bias.shape)}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"poly_norm: argument 'eps' must be a float, got {type(eps).__name__}")
    return _PolyNorm.apply(x, weight, bias, float(eps))
