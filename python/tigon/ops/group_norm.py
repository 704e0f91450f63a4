"""Group normalization as a torch op (tigon::group_norm_fwd / group_norm_bwd): torch.nn.functional.group_norm's
arguments and results. The forward saves each (sample, group)'s mean and rstd; the backward gives x, weight and bias
their gradients in one pass over the input, with deterministic fp32 sums for weight and bias."""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import FLOAT_DTYPES, check_tensor, compiling, scratch

__all__ = ["group_norm"]


class GroupNormParams(ctypes.Structure):
    _fields_ = [("eps", ctypes.c_float), ("num_groups", ctypes.c_int64)]


_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_group_norm_fwd", [_T] * 6 + [GroupNormParams, ctypes.c_void_p])
_ws = _lib.declare("tigon_group_norm_bwd_workspace_size", [_T, GroupNormParams, ctypes.POINTER(ctypes.c_size_t)])
_bwd = _lib.declare(
    "tigon_group_norm_bwd", [_T] * 8 + [GroupNormParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
)


def _fwd_impl(x, weight, bias, num_groups: int, eps: float):
    x = x.contiguous()
    y = torch.empty_like(x)
    mean = torch.empty(x.shape[0], num_groups, dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    arg = _lib.tensor_arg
    params = GroupNormParams(eps, num_groups)
    _lib.check(_fwd(arg(x), arg(weight), arg(bias), arg(y), arg(mean), arg(rstd), params, _lib.stream_of(x)))
    return y, mean, rstd


def _bwd_impl(dy, x, weight, mean, rstd, num_groups: int, need_dx: bool, need_dw: bool, need_db: bool):
    x, dy = x.contiguous(), dy.contiguous()
    c = x.shape[1]
    gdt = weight.dtype if weight is not None else torch.float32  # the C API's: weight's dtype, else fp32
    dx = torch.empty_like(x) if need_dx else x.new_empty(0)
    dw = torch.empty(c if need_dw else 0, dtype=gdt, device=x.device)
    db = torch.empty(c if need_db else 0, dtype=gdt, device=x.device)
    params = GroupNormParams(0.0, num_groups)
    ws, ws_bytes = scratch(_ws, x.device, x, params) if need_dw or need_db else (None, 0)
    arg = _lib.tensor_arg
    _lib.check(
        _bwd(
            arg(dy),
            arg(x),
            arg(weight),
            arg(mean),
            arg(rstd),
            arg(dx) if need_dx else None,
            arg(dw) if need_dw else None,
            arg(db) if need_db else None,
            params,
            ws.data_ptr() if ws is not None else None,
            ws_bytes,
            _lib.stream_of(x),
        )
    )
    return dx, dw, db


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define(
    "group_norm_fwd(Tensor x, Tensor? weight, Tensor? bias, int num_groups, float eps) -> (Tensor, Tensor, Tensor)"
)
_LIB.define(
    "group_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor mean, Tensor rstd, int num_groups, bool need_dx, "
    "bool need_dw, bool need_db) -> (Tensor, Tensor, Tensor)"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("group_norm_fwd", _fwd_impl, _key)
    _LIB.impl("group_norm_bwd", _bwd_impl, _key)


@torch.library.register_fake("tigon::group_norm_fwd")
def _fwd_fake(x, weight, bias, num_groups, eps):
    stats = x.new_empty((x.shape[0], num_groups), dtype=torch.float32)
    return x.new_empty(x.shape), stats, stats.new_empty(stats.shape)


@torch.library.register_fake("tigon::group_norm_bwd")
def _bwd_fake(dy, x, weight, mean, rstd, num_groups, need_dx, need_dw, need_db):
    c = x.shape[1]
    gdt = weight.dtype if weight is not None else torch.float32
    return (
        x.new_empty(x.shape if need_dx else (0,)),
        x.new_empty((c,) if need_dw else (0,), dtype=gdt),
        x.new_empty((c,) if need_db else (0,), dtype=gdt),
    )


class _GroupNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, num_groups, eps):
        # The kernels take weight and bias in x's dtype or fp32, both the same.
        pdt = weight.dtype if weight is not None else (bias.dtype if bias is not None else x.dtype)
        pdt = pdt if pdt in (x.dtype, torch.float32) else torch.float32
        w = None if weight is None else weight.to(pdt).contiguous()
        b = None if bias is None else bias.to(pdt).contiguous()
        args = (x, w, b, num_groups, eps)
        y, mean, rstd = torch.ops.tigon.group_norm_fwd(*args) if compiling() else _fwd_impl(*args)
        ctx.save_for_backward(x, w, mean, rstd)
        ctx.num_groups = num_groups
        ctx.dtypes = (None if weight is None else weight.dtype, None if bias is None else bias.dtype)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, mean, rstd = ctx.saved_tensors
        need = ctx.needs_input_grad
        if dy.dtype != x.dtype:
            dy = dy.to(x.dtype)
        dy = dy.contiguous()  # a sum()'s gradient is a stride-0 expansion, which the kernels do not read
        need_dw, need_db = need[1], need[2]
        args = (dy, x, w, mean, rstd, ctx.num_groups, need[0], need_dw, need_db)
        dx, dw, db = torch.ops.tigon.group_norm_bwd(*args) if compiling() else _bwd_impl(*args)
        w_dtype, b_dtype = ctx.dtypes
        return (
            dx if need[0] else None,
            dw.to(w_dtype) if need_dw else None,
            db.to(b_dtype) if need_db else None,
            None,
            None,
        )


def group_norm(
    x: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """torch.nn.functional.group_norm: x [N, C, *] (fp32, fp16 or bf16; CPU or CUDA) normalised over each sample's
    groups of C / num_groups channels and all positions, then scaled and shifted per channel by weight and bias
    ([C] each, None: none). Gradients for x, weight and bias."""
    check_tensor("group_norm", "x", x)
    check_tensor("group_norm", "weight", weight, optional=True)
    check_tensor("group_norm", "bias", bias, optional=True)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"group_norm: argument 'x' must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"group_norm: argument 'x' must be [N, C, *], got shape {tuple(x.shape)}")
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups <= 0:
        raise ValueError(f"group_norm: argument 'num_groups' must be a positive int, got {num_groups!r}")
    if x.shape[1] % num_groups:
        raise ValueError(f"group_norm: argument 'num_groups' ({num_groups}) must divide the {x.shape[1]} channels of x")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (x.shape[1],):
            raise ValueError(f"group_norm: argument '{name}' must have shape ({x.shape[1]},), got {tuple(t.shape)}")
    if not (eps >= 0):
        raise ValueError(f"group_norm: argument 'eps' must be >= 0, got {eps}")
    return _GroupNorm.apply(x, weight, bias, num_groups, float(eps))
