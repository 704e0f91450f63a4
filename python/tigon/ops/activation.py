"""Pointwise activations as torch ops: relu, gelu, silu and the squared ReLU (tigon::activation_fwd / activation_fwd_ /
activation_bwd), each with an ``in_place`` option that is safe under autograd.

In place, the output is written over x and x is marked modified: an op that saved x for its own backward then raises
torch's in-place error instead of computing a wrong gradient, and a leaf that requires grad is refused. ReLU keeps
only its output for the backward (its derivative is the output's sign), so in place it needs no memory beyond x; so
does the squared ReLU (its derivative is 2 sqrt(y)), which in an MLP shares that output with the down projection.
GELU and SiLU cannot be differentiated from their output (neither is monotonic), so when a gradient is needed their
in-place forms keep a copy of the input, as torch's own in-place silu and gelu do; the memory then matches the
out-of-place form, and in place saves memory only without autograd (inference). Under torch.compile with torch < 2.15
the in-place forms run out of place (_common.in_place_fwd).
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import compiling, in_place_fwd, refuse_leaf, rows_ok

__all__ = ["relu", "gelu", "silu", "relu_squared", "ACTIVATIONS", "activation_code"]

# tigon_activation_t ("gelu": erf form): the ones linear + activation and int8 take in their epilogues too
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
_NONE, _RELU = ACTIVATIONS["none"], ACTIVATIONS["relu"]
_RELU2 = 5  # TIGON_ACT_RELU2: pointwise only


def activation_code(activation, op: str) -> int:
    """The tigon_activation_t of a name (None: "none"), or a ValueError naming the argument."""
    name = "none" if activation is None else activation
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise ValueError(
            f"{op}: argument 'activation' must be None or one of {sorted(ACTIVATIONS)}, got {activation!r}"
        )
    return ACTIVATIONS[name]


class ActivationParams(ctypes.Structure):  # tigon_activation_params
    _fields_ = [("activation", ctypes.c_int32), ("saved_output", ctypes.c_int32)]


_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_activation_fwd", [_T, _T, ActivationParams, ctypes.c_void_p])
_bwd = _lib.declare("tigon_activation_bwd", [_T, _T, _T, ActivationParams, ctypes.c_void_p])


# ---- launchers -----------------------------------------------------------------------------------------------------


def _rows(t: torch.Tensor) -> torch.Tensor:
    # The kernels read rows ([..., C]); a scalar is one row of one element, any other layout is copied.
    if t.dim() == 0:
        return t.view(1)
    return t if rows_ok(t) else t.contiguous()


def _fwd_impl(x, act: int):
    x = _rows(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        _lib.check(_fwd(_lib.tensor_arg(x), _lib.tensor_arg(y), ActivationParams(act, 0), _lib.stream_of(x)))
    return y


def _fwd_inplace_impl(x, act: int) -> None:
    if x.numel() == 0:
        return
    rows = x.view(1) if x.dim() == 0 else x if rows_ok(x) else x.contiguous()  # else: computed in a copy
    _lib.check(_fwd(_lib.tensor_arg(rows), _lib.tensor_arg(rows), ActivationParams(act, 0), _lib.stream_of(x)))
    if x.dim() and rows is not x:
        x.copy_(rows)


def _bwd_impl(dy, saved, act: int, saved_output: bool):
    dy, saved = _rows(dy), _rows(saved)
    dx = torch.empty(dy.shape, dtype=dy.dtype, device=dy.device)
    if dy.numel():
        params = ActivationParams(act, int(saved_output))
        _lib.check(_bwd(_lib.tensor_arg(dy), _lib.tensor_arg(saved), _lib.tensor_arg(dx), params, _lib.stream_of(dy)))
    return dx


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("activation_fwd(Tensor x, int activation) -> Tensor")
_LIB.define("activation_fwd_(Tensor(a!) x, int activation) -> ()")
_LIB.define("activation_bwd(Tensor dy, Tensor saved, int activation, bool saved_output) -> Tensor")
for _key in ("CPU", "CUDA"):
    _LIB.impl("activation_fwd", _fwd_impl, _key)
    _LIB.impl("activation_fwd_", _fwd_inplace_impl, _key)
    _LIB.impl("activation_bwd", _bwd_impl, _key)


@torch.library.register_fake("tigon::activation_fwd")
def _fwd_fake(x, activation):
    return x.new_empty(x.shape if x.dim() else (1,))


@torch.library.register_fake("tigon::activation_fwd_")
def _fwd_inplace_fake(x, activation):
    return None


@torch.library.register_fake("tigon::activation_bwd")
def _bwd_fake(dy, saved, activation, saved_output):
    return dy.new_empty(dy.shape if dy.dim() else (1,))


# ---- autograd -------------------------------------------------------------------------------------------------------


class _Activation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, act, in_place):
        # the derivative from the output (ReLU: its sign; the squared ReLU: 2 sqrt(y); NONE: no derivative to take)
        from_output = act in (_RELU, _RELU2, _NONE)
        if in_place:
            keep = x.clone() if ctx.needs_input_grad[0] and not from_output else None
            if compiling():
                torch.ops.tigon.activation_fwd_(x, act)
            else:
                _fwd_inplace_impl(x, act)
            ctx.mark_dirty(x)
            y = x
        else:
            y = torch.ops.tigon.activation_fwd(x, act) if compiling() else _fwd_impl(x, act)
            y = y.view(x.shape)
            keep = x
        ctx.save_for_backward(y if from_output else keep)
        ctx.act, ctx.from_output = act, from_output
        return y

    @staticmethod
    def backward(ctx, dy):
        (saved,) = ctx.saved_tensors
        if dy.dtype != saved.dtype:
            dy = dy.to(saved.dtype)
        dy = dy.contiguous()  # a sum()'s gradient is a stride-0 expansion, which the kernel does not read
        if compiling():
            dx = torch.ops.tigon.activation_bwd(dy, saved, ctx.act, ctx.from_output)
        else:
            dx = _bwd_impl(dy, saved, ctx.act, ctx.from_output)
        return dx.view(saved.shape), None, None


def _apply(x, act: int, in_place, op: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: argument 'x' must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(in_place, bool):
        raise TypeError(f"{op}: argument 'in_place' must be a bool, got {type(in_place).__name__}")
    if in_place:
        refuse_leaf(x, "x", op)
    return _Activation.apply(x, act, in_place_fwd(in_place))


def relu(x: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """``F.relu(x)`` (fp32, fp16 or bf16; any shape, CPU or CUDA). The backward reads only the output's sign, so
    in_place=True (x overwritten, as ``F.relu(x, inplace=True)``) keeps nothing but x itself."""
    return _apply(x, _RELU, in_place, "relu")


def gelu(x: torch.Tensor, approximate: str = "none", in_place: bool = False) -> torch.Tensor:
    """``F.gelu(x, approximate=approximate)`` ("none": the erf form, "tanh"). in_place=True writes over x; with a
    gradient to compute it keeps a copy of the input (see the module's note)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: argument 'approximate' must be 'none' or 'tanh' (as in F.gelu), got {approximate!r}")
    return _apply(x, ACTIVATIONS["gelu" if approximate == "none" else "gelu_tanh"], in_place, "gelu")


def silu(x: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """``F.silu(x)``. in_place=True writes over x; with a gradient to compute it keeps a copy of the input."""
    return _apply(x, ACTIVATIONS["silu"], in_place, "silu")


def relu_squared(x: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """``F.relu(x) ** 2``, the squared ReLU of Primer and Nemotron (transformers' "relu2"), in one pass each way where
    torch takes two. The backward reads only the output (dx = dy * 2 sqrt(y), carrying y's rounding), so in_place=True
    keeps nothing but x itself, and out of place the one tensor kept is the output that the next layer saves anyway."""
    return _apply(x, _RELU2, in_place, "relu_squared")
