"""Linear + activation as torch ops: ``act(x @ weight.T + bias) + residual`` (tigon::linear_act_fwd / linear_act_bwd).

The bias and ReLU / GELU-tanh run in cuBLASLt's GEMM epilogue; SiLU, GELU-erf and an activation followed by a
residual take one elementwise pass after the GEMM (include/tigon/linear_act.h). The forward keeps for the backward
only what the activation's derivative reads: nothing for "none", the output for "relu" (its sign), else the
pre-activation z, stored with rows padded to 8 elements so cuBLASLt's epilogue can write it. The backward writes
dZ = dY ∘ act'(z) over z (or, for ReLU, over an output gradient nobody else holds), so a pass allocates nothing
[M, N]-sized beyond what torch's F.linear + activation would hold. The ops are registered with torch.library (fake
implementations for torch.compile); autograd lives outside them.
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import autocast_linear, compiling, in_place_bwd, rows_ok
from tigon.ops.activation import ACTIVATIONS, activation_code

__all__ = ["linear_act"]

_NONE, _RELU = ACTIVATIONS["none"], ACTIVATIONS["relu"]


class LinearActParams(ctypes.Structure):  # tigon_linear_act_params
    _fields_ = [("activation", ctypes.c_int32)]


_T = _lib.TENSOR_P
_P = LinearActParams
_SIZE = [_T, _T, _P, ctypes.POINTER(ctypes.c_size_t)]
_fwd_ws = _lib.declare("tigon_linear_act_fwd_workspace_size", _SIZE)
_bwd_ws = _lib.declare("tigon_linear_act_bwd_workspace_size", _SIZE)
_fwd = _lib.declare("tigon_linear_act_fwd", [_T] * 6 + [_P, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])
_bwd = _lib.declare("tigon_linear_act_bwd", [_T] * 9 + [_P, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])


def _padded(n: int) -> int:
    return (n + 7) // 8 * 8  # z's row stride: a multiple of 8 elements, which cuBLASLt's GELU aux output needs


def _saves_z(act: int, has_residual: bool) -> bool:
    """Whether the backward reads z (else: nothing for NONE, the output for ReLU without a residual)."""
    return act != _NONE and not (act == _RELU and not has_residual)


def _workspace(fn, x, weight, act):
    nbytes = ctypes.c_size_t()
    _lib.check(fn(_lib.tensor_arg(x), _lib.tensor_arg(weight), _P(act), ctypes.byref(nbytes)))
    return torch.empty(nbytes.value, dtype=torch.uint8, device=x.device) if nbytes.value else None


def _ws_args(ws):
    return (None, 0) if ws is None else (ws.data_ptr(), ws.numel())


# ---- launchers: outputs and workspaces from torch's allocator, the C API on torch's current stream -----------------


def _fwd_impl(x, weight, bias, residual, activation: int, save_z: bool):
    """(out [M, N], z [M, padded N] or empty): z is the full padded buffer; its first N columns hold x·Wᵀ + b."""
    m, n = x.shape[0], weight.shape[0]
    out = x.new_empty((m, n))
    z = x.new_empty((m, _padded(n)) if save_z else (0,))
    ws = _workspace(_fwd_ws, x, weight, activation)
    arg = _lib.tensor_arg
    _lib.check(
        _fwd(
            arg(x),
            arg(weight),
            arg(bias),
            arg(residual),
            arg(out),
            arg(z[:, :n]) if save_z else None,
            _P(activation),
            *_ws_args(ws),
            _lib.stream_of(x),
        )
    )
    return out, z


def _bwd_run(dy, x, weight, saved, activation: int, saved_is_output: bool, dz, need_dx, need_dw, need_db):
    m, k = x.shape
    n = weight.shape[0]
    dx = x.new_empty((m, k) if need_dx else (0, k))
    dw = weight.new_empty((n, k) if need_dw else (0, k))
    db = weight.new_empty((n,) if need_db else (0,))
    ws = _workspace(_bwd_ws, x, weight, activation)
    arg = _lib.tensor_arg
    z = None if saved is None or saved_is_output else saved[:, :n]
    y = saved if saved_is_output else None
    _lib.check(
        _bwd(
            arg(dy),
            arg(x),
            arg(weight),
            arg(z),
            arg(y),
            arg(dz) if activation != _NONE else None,
            arg(dx) if need_dx else None,
            arg(dw) if need_dw else None,
            arg(db) if need_db else None,
            _P(activation),
            *_ws_args(ws),
            _lib.stream_of(x),
        )
    )
    return dx, dw, db


def _bwd_impl(dy, x, weight, saved, activation: int, saved_is_output: bool, need_dx, need_dw, need_db):
    dz = torch.empty_like(dy) if activation != _NONE else None  # out of place: dZ in a buffer of its own
    return _bwd_run(dy, x, weight, saved, activation, saved_is_output, dz, need_dx, need_dw, need_db)


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define(
    "linear_act_fwd(Tensor x, Tensor weight, Tensor? bias, Tensor? residual, int activation, bool save_z) "
    "-> (Tensor, Tensor)"
)
_LIB.define(
    "linear_act_bwd(Tensor dy, Tensor x, Tensor weight, Tensor? saved, int activation, bool saved_is_output, "
    "bool need_dx, bool need_dw, bool need_db) -> (Tensor, Tensor, Tensor)"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("linear_act_fwd", _fwd_impl, _key)
    _LIB.impl("linear_act_bwd", _bwd_impl, _key)


@torch.library.register_fake("tigon::linear_act_fwd")
def _fwd_fake(x, weight, bias, residual, activation, save_z):
    m, n = x.shape[0], weight.shape[0]
    return x.new_empty((m, n)), x.new_empty((m, _padded(n)) if save_z else (0,))


@torch.library.register_fake("tigon::linear_act_bwd")
def _bwd_fake(dy, x, weight, saved, activation, saved_is_output, need_dx, need_dw, need_db):
    m, k = x.shape
    n = weight.shape[0]
    return (
        x.new_empty((m, k) if need_dx else (0, k)),
        weight.new_empty((n, k) if need_dw else (0, k)),
        weight.new_empty((n,) if need_db else (0,)),
    )


# ---- autograd -------------------------------------------------------------------------------------------------------


class _LinearAct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, residual, act):
        need_dx, need_dw, need_db, need_dres = ctx.needs_input_grad[:4]
        grad = need_dx or need_dw or need_db
        save_z = grad and _saves_z(act, residual is not None)
        if compiling():
            out, z = torch.ops.tigon.linear_act_fwd(x, weight, bias, residual, act, save_z)
        else:
            out, z = _fwd_impl(x, weight, bias, residual, act, save_z)
        ctx.act, ctx.need = act, (need_dx, need_dw, need_db, need_dres)
        ctx.saved_is_output = act == _RELU and not save_z
        saved = z if save_z else out if grad and ctx.saved_is_output else None
        # x and weight whenever a gradient is wanted: the C API reads their shapes (and dW x, dX weight)
        ctx.save_for_backward(*((x, weight) if grad else (None, None)), saved)
        return out

    @staticmethod
    def backward(ctx, dy):
        need_dx, need_dw, need_db, need_dres = ctx.need
        x, weight, saved = ctx.saved_tensors
        if not (need_dx or need_dw or need_db):
            return None, None, None, dy if need_dres else None, None
        n = weight.shape[0]
        dy = dy.to(x.dtype).contiguous()  # a sum()'s gradient is a stride-0 expansion, which the kernels do not read
        act = ctx.act
        if compiling():
            dx, dw, db = torch.ops.tigon.linear_act_bwd(
                dy, x, weight, saved, act, ctx.saved_is_output, need_dx, need_dw, need_db
            )
        else:
            # dZ over our own z (or over an output gradient nobody else holds); a second backward then raises
            if act == _NONE:
                dz = None
            elif not ctx.saved_is_output:
                dz = saved[:, :n]
            elif not need_dres and in_place_bwd(True, dy):
                dz = dy
            else:
                dz = torch.empty_like(dy)
            dx, dw, db = _bwd_run(dy, x, weight, saved, act, ctx.saved_is_output, dz, need_dx, need_dw, need_db)
            if dz is not None:
                torch.autograd.graph.increment_version(dz)
        return (
            dx if need_dx else None,
            dw if need_dw else None,
            db if need_db else None,
            dy if need_dres else None,
            None,
        )


# ---- public function ------------------------------------------------------------------------------------------------


def _check_args(x, weight, bias, residual, op: str) -> None:
    """Python types and the shapes the fake implementations build outputs from. Dtypes, strides, devices: the C API."""
    for arg, t in (("x", x), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{arg}' must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"{op}: argument 'x' must be [..., K] with K > 0, got shape {tuple(x.shape)}")
    if weight.dim() != 2 or weight.shape[1] != x.shape[-1]:
        raise ValueError(
            f"{op}: argument 'weight' must be [N, K] with K = {x.shape[-1]} (x's last dimension; nn.Linear's "
            f"layout), got shape {tuple(weight.shape)}"
        )
    n = weight.shape[0]
    for arg, t, shape in (("bias", bias, (n,)), ("residual", residual, (*x.shape[:-1], n))):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{arg}' must be a torch.Tensor or None, got {type(t).__name__}")
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{op}: argument '{arg}' must have shape {tuple(shape)}, got {tuple(t.shape)}")


def linear_act(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "gelu_tanh",
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """``act(F.linear(x, weight, bias)) + residual`` in one GEMM (plus, for some activations, one elementwise pass).

    x [..., K]; weight [N, K] as nn.Linear stores it; bias [N] or None; residual [..., N] or None, added after the
    activation. activation: None or "none", "relu", "gelu" (erf form, F.gelu's default), "gelu_tanh"
    (F.gelu(approximate="tanh"), the default) or "silu". One dtype for all (fp32, fp16 or bf16; under torch.autocast
    they are first cast to the autocast dtype, as F.linear casts them); CPU or CUDA. Sums in fp32, the output rounded
    once (a residual is added before that rounding). Any K and N; rows of x and residual with any stride. Gradients
    for x, weight, bias and residual; the bias gradient is summed in a fixed order (the same bits every run).
    """
    x, weight, bias, residual = autocast_linear(x, weight, bias, residual)
    act = activation_code(activation, "linear_act")
    _check_args(x, weight, bias, residual, "linear_act")
    lead, k, n = x.shape[:-1], x.shape[-1], weight.shape[0]
    x2 = x.reshape(-1, k)
    if not rows_ok(x2):
        x2 = x2.contiguous()
    if weight.stride(-1) != 1:
        weight = weight.contiguous()
    if bias is not None and not bias.is_contiguous():
        bias = bias.contiguous()
    r2 = None
    if residual is not None:
        r2 = residual.reshape(-1, n)
        if not rows_ok(r2):
            r2 = r2.contiguous()
    out = _LinearAct.apply(x2, weight, bias, r2, act)
    return out.view(*lead, n)
