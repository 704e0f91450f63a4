"""LayerNorm as torch ops: tigon::layer_norm_fwd / layer_norm_bwd / layer_norm_bwd_ (dx written over dy).

The ops are registered with torch.library (with fake implementations, so torch.compile(fullgraph=True) traces them);
autograd lives outside them in an autograd.Function. In eager mode the Function calls the ctypes launchers directly,
skipping the dispatcher; under torch.compile it calls the registered ops.
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import compiling, in_place_bwd

__all__ = ["layer_norm"]


class LayerNormParams(ctypes.Structure):  # tigon_layer_norm_params
    _fields_ = [("eps", ctypes.c_float)]


_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_layer_norm_fwd", [_T, _T, _T, _T, _T, _T, LayerNormParams, ctypes.c_void_p])
_bwd_workspace_size = _lib.declare("tigon_layer_norm_bwd_workspace_size", [_T, ctypes.POINTER(ctypes.c_size_t)])
_bwd = _lib.declare(
    "tigon_layer_norm_bwd", [_T, _T, _T, _T, _T, _T, _T, _T, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
)


def _check_args(x, weight, bias, eps) -> None:
    """What the C API cannot see: Python types. It checks dtypes, shapes, strides, devices and eps itself, naming
    the argument (a dtype error arrives as a TypeError)."""
    for arg, t in (("x", x), ("weight", weight), ("bias", bias)):
        if not isinstance(t, torch.Tensor) and (t is not None or arg == "x"):
            raise TypeError(
                f"layer_norm: argument '{arg}' must be a torch.Tensor{'' if arg == 'x' else ' or None'}, "
                f"got {type(t).__name__}"
            )
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise ValueError(f"layer_norm: argument 'eps' must be a finite number >= 0, got {eps!r}")


# ---- launchers: allocate outputs with torch's allocator, call the C API on torch's current stream -------------------

_CONTIGUOUS = torch.contiguous_format


def _fwd_impl(x, weight, bias, eps: float):
    y = torch.empty_like(x, memory_format=_CONTIGUOUS)
    mean = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    _lib.check(
        _fwd(
            _lib.tensor_arg(x),
            _lib.tensor_arg(weight),
            _lib.tensor_arg(bias),
            _lib.tensor_arg(y),
            _lib.tensor_arg(mean),
            _lib.tensor_arg(rstd),
            LayerNormParams(eps),
            _lib.stream_of(x),
        )
    )
    return y, mean, rstd


_workspace_bytes_cache: dict = {}


def _workspace(x: torch.Tensor) -> tuple[torch.Tensor | None, int]:
    if x.device.type != "cuda":
        return None, 0
    # Saves the size query's C call on every backward; the size depends on these alone.
    key = (x.shape.numel() // x.shape[-1], x.shape[-1], x.dtype, x.device)
    nbytes = _workspace_bytes_cache.get(key)
    if nbytes is None:
        size = ctypes.c_size_t(0)
        _lib.check(_bwd_workspace_size(_lib.tensor_arg(x), ctypes.byref(size)))
        nbytes = _workspace_bytes_cache[key] = size.value
    if nbytes == 0:
        return None, 0
    return torch.empty(nbytes, dtype=torch.uint8, device=x.device), nbytes


def _bwd_launch(dy, x, weight, mean, rstd, dx, dw, db) -> None:
    ws, nbytes = _workspace(x) if (dw is not None or db is not None) else (None, 0)
    _lib.check(
        _bwd(
            _lib.tensor_arg(dy),
            _lib.tensor_arg(x),
            _lib.tensor_arg(weight),
            _lib.tensor_arg(mean),
            _lib.tensor_arg(rstd),
            _lib.tensor_arg(dx),
            _lib.tensor_arg(dw),
            _lib.tensor_arg(db),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(x),
        )
    )


def _empty_grad(x, param, need):
    """The parameter's gradient buffer (its dtype), or an empty placeholder when not wanted."""
    if param is None or not need:
        return torch.empty(0, dtype=x.dtype, device=x.device)
    return torch.empty_like(param, memory_format=_CONTIGUOUS)


def _maybe(t):
    return t if t.numel() else None


def _bwd_impl(dy, x, weight, bias, mean, rstd, need_dw: bool, need_db: bool):
    dx = torch.empty_like(x, memory_format=_CONTIGUOUS)
    dw, db = _empty_grad(x, weight, need_dw), _empty_grad(x, bias, need_db)
    _bwd_launch(dy, x, weight, mean, rstd, dx, _maybe(dw), _maybe(db))
    return dx, dw, db


def _bwd_inplace_impl(dy, x, weight, bias, mean, rstd, need_dw: bool, need_db: bool):
    dw, db = _empty_grad(x, weight, need_dw), _empty_grad(x, bias, need_db)
    _bwd_launch(dy, x, weight, mean, rstd, dy, _maybe(dw), _maybe(db))
    return dw, db


# ---- torch.library registration ----------------------------------------------------------------------------------

_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("layer_norm_fwd(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)")
_LIB.define(
    "layer_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor? bias, Tensor mean, Tensor rstd, "
    "bool need_dw, bool need_db) -> (Tensor, Tensor, Tensor)"
)
_LIB.define(
    "layer_norm_bwd_(Tensor(a!) dy, Tensor x, Tensor? weight, Tensor? bias, Tensor mean, Tensor rstd, "
    "bool need_dw, bool need_db) -> (Tensor, Tensor)"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("layer_norm_fwd", _fwd_impl, _key)
    _LIB.impl("layer_norm_bwd", _bwd_impl, _key)
    _LIB.impl("layer_norm_bwd_", _bwd_inplace_impl, _key)


@torch.library.register_fake("tigon::layer_norm_fwd")
def _fwd_fake(x, weight, bias, eps):
    mean = x.new_empty(x.shape[:-1], dtype=torch.float32)
    return torch.empty_like(x, memory_format=_CONTIGUOUS), mean, torch.empty_like(mean)


@torch.library.register_fake("tigon::layer_norm_bwd")
def _bwd_fake(dy, x, weight, bias, mean, rstd, need_dw, need_db):
    return (
        torch.empty_like(x, memory_format=_CONTIGUOUS),
        _empty_grad(x, weight, need_dw),
        _empty_grad(x, bias, need_db),
    )


@torch.library.register_fake("tigon::layer_norm_bwd_")
def _bwd_inplace_fake(dy, x, weight, bias, mean, rstd, need_dw, need_db):
    return _empty_grad(x, weight, need_dw), _empty_grad(x, bias, need_db)


# ---- autograd -------------------------------------------------------------------------------------------------------


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, in_place):
        if compiling():
            y, mean, rstd = torch.ops.tigon.layer_norm_fwd(x, weight, bias, eps)
        else:
            y, mean, rstd = _fwd_impl(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)  # bias only for its dtype: db is made like it
        ctx.in_place = in_place
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        need_dw = weight is not None and ctx.needs_input_grad[1]
        need_db = bias is not None and ctx.needs_input_grad[2]
        dy = dy.contiguous()  # e.g. a sum()'s stride-0 gradient; free when contiguous, and traceable (no stride read)
        if in_place_bwd(ctx.in_place, dy):
            dw, db = _bwd_inplace_impl(dy, x, weight, bias, mean, rstd, need_dw, need_db)
            torch.autograd.graph.increment_version(dy)  # dy now holds dx: a saver of dy raises
            dx = dy
        elif compiling():
            dx, dw, db = torch.ops.tigon.layer_norm_bwd(dy, x, weight, bias, mean, rstd, need_dw, need_db)
        else:
            dx, dw, db = _bwd_impl(dy, x, weight, bias, mean, rstd, need_dw, need_db)
        return dx, (dw if need_dw else None), (db if need_db else None), None, None


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    in_place: bool = False,
) -> torch.Tensor:
    """LayerNorm over the last dimension: ``(x - mean) * rsqrt(var + eps) * weight + bias`` with the biased variance,
    as torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps).

    weight and bias are each optional, x's dtype or float32 (the same dtype when both are given); y has x's dtype.
    mean and rstd are computed in fp32 and saved for backward; dw and db are accumulated in fp32 and reduced
    deterministically. in_place=True writes the input gradient over the output gradient in backward (saves one
    activation-sized buffer; leave it off when the output gradient is used elsewhere). x may have any row stride
    (its leading dimensions must flatten to rows); CPU and CUDA tensors.
    """
    _check_args(x, weight, bias, eps)
    return _LayerNorm.apply(x, weight, bias, float(eps), bool(in_place))
