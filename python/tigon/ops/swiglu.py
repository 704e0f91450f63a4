"""SwiGLU and GeGLU as torch ops: c = act(a) * b (tigon::swiglu_fwd / swiglu_bwd / swiglu_bwd_), and the fused forms
over one gate_up tensor [..., 2I] with a = gate_up[..., :I], b = gate_up[..., I:] (tigon::swiglu_fused_*).

The forward saves a and b (not c) and the backward recomputes act(a). With in_place=True the backward writes da and
db over a and b (dgate_up over gate_up), so a full pass allocates nothing activation-sized but c: use it when a and b
are used nowhere else (true inside an MLP block). The ops are registered with torch.library (with fake
implementations, so torch.compile(fullgraph=True) traces them); autograd lives outside them in autograd.Functions
that call the ctypes launchers directly in eager mode and the registered ops under torch.compile.
"""

from __future__ import annotations

import ctypes
import math

import torch

from tigon import _lib
from tigon.ops._common import compiling, refuse_leaf

__all__ = ["swiglu", "geglu", "swiglu_fused", "geglu_fused", "ACTIVATIONS"]

ACTIVATIONS = {"silu": 0, "gelu_tanh": 1, "gelu_erf": 2}  # tigon_glu_activation_t
_GELU_APPROXIMATE = {"tanh": "gelu_tanh", "none": "gelu_erf"}  # F.gelu's approximate= to our activation


class SwigluParams(ctypes.Structure):  # tigon_swiglu_params
    _fields_ = [
        ("activation", ctypes.c_int32),
        ("gate_multiplier", ctypes.c_float),
        ("down_multiplier", ctypes.c_float),
    ]


_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_swiglu_fwd", [_T, _T, _T, SwigluParams, ctypes.c_void_p])
_bwd = _lib.declare("tigon_swiglu_bwd", [_T, _T, _T, _T, _T, SwigluParams, ctypes.c_void_p])


# ---- argument checks ----------------------------------------------------------------------------------------------


def _check_tensor(t, arg: str, op: str) -> None:
    # Dtypes, strides and devices: the C API, naming the argument. The shape is read here (and by the fakes).
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: argument '{arg}' must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < 1:
        raise ValueError(f"{op}: argument '{arg}' must have at least one dimension, got a scalar")


def _check_pair(a, b, in_place, op: str) -> None:
    _check_tensor(a, "a", op)
    _check_tensor(b, "b", op)
    if b.shape != a.shape:
        raise ValueError(f"{op}: argument 'b' must have a's shape {tuple(a.shape)}, got {tuple(b.shape)}")
    _check_in_place(in_place, op)
    if in_place:
        refuse_leaf(a, "a", op)
        refuse_leaf(b, "b", op)
    # data pointers are not traceable: under torch.compile only the same tensor object is caught
    if in_place and (a is b or (not compiling() and a.numel() and a.data_ptr() == b.data_ptr())):
        raise ValueError(
            f"{op}: argument 'in_place' needs a and b in separate memory (da and db are written over "
            f"them), but they share their first element"
        )


def _check_gate_up(gate_up, in_place, op: str) -> None:
    _check_tensor(gate_up, "gate_up", op)
    if gate_up.shape[-1] % 2:
        raise ValueError(
            f"{op}: argument 'gate_up' needs an even last dimension (gate and up halves), got shape "
            f"{tuple(gate_up.shape)}"
        )
    _check_in_place(in_place, op)
    if in_place:
        refuse_leaf(gate_up, "gate_up", op)


def _check_in_place(in_place, op: str) -> None:
    if not isinstance(in_place, bool):
        raise TypeError(f"{op}: argument 'in_place' must be a bool, got {type(in_place).__name__}")


def _check_multipliers(gate_multiplier, down_multiplier, op: str):
    """Falcon-H1's MLP multipliers as the (gate, down) floats the op takes."""
    out = []
    for name, v in (("gate_multiplier", gate_multiplier), ("down_multiplier", down_multiplier)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{op}: argument '{name}' must be a float, got {type(v).__name__}")
        if not math.isfinite(v) or v == 0:  # 0 would read as 1 in the C API
            raise ValueError(f"{op}: argument '{name}' must be finite and nonzero, got {v}")
        out.append(float(v))
    return tuple(out)


def _gelu_activation(approximate, op: str) -> int:
    if not isinstance(approximate, str) or approximate not in _GELU_APPROXIMATE:
        raise ValueError(f"{op}: argument 'approximate' must be 'tanh' or 'none' (as in F.gelu), got {approximate!r}")
    return ACTIVATIONS[_GELU_APPROXIMATE[approximate]]


# ---- launchers: allocate outputs with torch's allocator, call the C API on torch's current stream -------------------


def _halves(gate_up: torch.Tensor):
    half = gate_up.shape[-1] // 2
    return gate_up[..., :half], gate_up[..., half:]


def _launch_fwd(a, b, c, act: int, gate: float = 1.0, down: float = 1.0) -> None:
    if a.numel() == 0:  # nothing to do, and empty tensors may carry strides no row view describes
        return
    _lib.check(
        _fwd(
            _lib.tensor_arg(a), _lib.tensor_arg(b), _lib.tensor_arg(c), SwigluParams(act, gate, down), _lib.stream_of(a)
        )
    )


def _launch_bwd(dc, a, b, da, db, act: int, gate: float = 1.0, down: float = 1.0) -> None:
    if a.numel() == 0:
        return
    _lib.check(
        _bwd(
            _lib.tensor_arg(dc),
            _lib.tensor_arg(a),
            _lib.tensor_arg(b),
            _lib.tensor_arg(da),
            _lib.tensor_arg(db),
            SwigluParams(act, gate, down),
            _lib.stream_of(a),
        )
    )


def _fwd_impl(a, b, act: int, gate: float = 1.0, down: float = 1.0):
    c = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    _launch_fwd(a, b, c, act, gate, down)
    return c


def _bwd_impl(dc, a, b, act: int, gate: float = 1.0, down: float = 1.0):
    da, db = torch.empty(a.shape, dtype=a.dtype, device=a.device), torch.empty(a.shape, dtype=a.dtype, device=a.device)
    _launch_bwd(dc, a, b, da, db, act, gate, down)
    return da, db


def _bwd_inplace_impl(dc, a, b, act: int, gate: float = 1.0, down: float = 1.0) -> None:
    _launch_bwd(dc, a, b, a, b, act, gate, down)


def _gate_up_error(e: _lib.TigonArgumentError) -> _lib.TigonArgumentError:
    # The C API sees gate_up as its halves a and b: name the argument the caller passed.
    msg = (
        str(e)
        .replace("argument 'a'", "argument 'gate_up' (gate half)")
        .replace("argument 'b'", "argument 'gate_up' (up half)")
    )
    return type(e)(msg)


def _fused_fwd_impl(gate_up, act: int, gate: float = 1.0, down: float = 1.0):
    try:
        return _fwd_impl(*_halves(gate_up), act, gate, down)
    except _lib.TigonArgumentError as e:
        raise _gate_up_error(e) from None


def _fused_bwd_impl(dc, gate_up, act: int, gate: float = 1.0, down: float = 1.0):
    dgate_up = torch.empty(gate_up.shape, dtype=gate_up.dtype, device=gate_up.device)
    try:
        _launch_bwd(dc, *_halves(gate_up), *_halves(dgate_up), act, gate, down)
    except _lib.TigonArgumentError as e:
        raise _gate_up_error(e) from None
    return dgate_up


def _fused_bwd_inplace_impl(dc, gate_up, act: int, gate: float = 1.0, down: float = 1.0) -> None:
    a, b = _halves(gate_up)
    try:
        _launch_bwd(dc, a, b, a, b, act, gate, down)
    except _lib.TigonArgumentError as e:
        raise _gate_up_error(e) from None


# ---- torch.library registration ----------------------------------------------------------------------------------

_LIB = torch.library.Library("tigon", "FRAGMENT")
_M = "float gate=1.0, float down=1.0"  # the multipliers
_LIB.define(f"swiglu_fwd(Tensor a, Tensor b, int activation, {_M}) -> Tensor")
_LIB.define(f"swiglu_bwd(Tensor dc, Tensor a, Tensor b, int activation, {_M}) -> (Tensor, Tensor)")
_LIB.define(f"swiglu_bwd_(Tensor dc, Tensor(a!) a, Tensor(b!) b, int activation, {_M}) -> ()")
_LIB.define(f"swiglu_fused_fwd(Tensor gate_up, int activation, {_M}) -> Tensor")
_LIB.define(f"swiglu_fused_bwd(Tensor dc, Tensor gate_up, int activation, {_M}) -> Tensor")
_LIB.define(f"swiglu_fused_bwd_(Tensor dc, Tensor(a!) gate_up, int activation, {_M}) -> ()")
for _key in ("CPU", "CUDA"):
    _LIB.impl("swiglu_fwd", _fwd_impl, _key)
    _LIB.impl("swiglu_bwd", _bwd_impl, _key)
    _LIB.impl("swiglu_bwd_", _bwd_inplace_impl, _key)
    _LIB.impl("swiglu_fused_fwd", _fused_fwd_impl, _key)
    _LIB.impl("swiglu_fused_bwd", _fused_bwd_impl, _key)
    _LIB.impl("swiglu_fused_bwd_", _fused_bwd_inplace_impl, _key)


@torch.library.register_fake("tigon::swiglu_fwd")
def _fwd_fake(a, b, activation, gate=1.0, down=1.0):
    return a.new_empty(a.shape)


@torch.library.register_fake("tigon::swiglu_bwd")
def _bwd_fake(dc, a, b, activation, gate=1.0, down=1.0):
    return a.new_empty(a.shape), a.new_empty(a.shape)


@torch.library.register_fake("tigon::swiglu_bwd_")
def _bwd_inplace_fake(dc, a, b, activation, gate=1.0, down=1.0):
    return None


@torch.library.register_fake("tigon::swiglu_fused_fwd")
def _fused_fwd_fake(gate_up, activation, gate=1.0, down=1.0):
    return gate_up.new_empty((*gate_up.shape[:-1], gate_up.shape[-1] // 2))


@torch.library.register_fake("tigon::swiglu_fused_bwd")
def _fused_bwd_fake(dc, gate_up, activation, gate=1.0, down=1.0):
    return gate_up.new_empty(gate_up.shape)


@torch.library.register_fake("tigon::swiglu_fused_bwd_")
def _fused_bwd_inplace_fake(dc, gate_up, activation, gate=1.0, down=1.0):
    return None


# ---- autograd -------------------------------------------------------------------------------------------------------


def _grad_rows(dc: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # The kernel needs real rows in the inputs' dtype: y.sum() hands backward a stride-0 expanded gradient.
    # contiguous() is free when dc is contiguous, and traceable (torch < 2.7 refuses stride reads in backward).
    if dc.dtype != dtype:
        dc = dc.to(dtype)
    return dc.contiguous()


def _overwritten(*ts: torch.Tensor) -> None:
    # New versions for autograd: another op that saved a, b (e.g. exp(x) saves its output) now raises torch's
    # in-place error instead of reading gradients. Under torch.compile the ops' (a!) schemas say it instead.
    torch.autograd.graph.increment_version(ts)


def _in_place(in_place: bool) -> bool:
    # Eagerly, another op that saved a or b raises torch's in-place error (_overwritten); a compiled backward cannot tell,
    # so the public ops run out of place under torch.compile. The nn modules call the Functions with in_place=True
    # directly: their inputs are their own projections' outputs, which nothing else saves.
    return in_place and not compiling()


class _GLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, act, in_place, gate=1.0, down=1.0):
        c = torch.ops.tigon.swiglu_fwd(a, b, act, gate, down) if compiling() else _fwd_impl(a, b, act, gate, down)
        ctx.save_for_backward(a, b)
        ctx.act, ctx.in_place, ctx.mult = act, in_place, (gate, down)
        return c

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        dc = _grad_rows(dc, a.dtype)
        if ctx.in_place:  # da, db written over a, b: no activation-sized allocation
            if compiling():
                torch.ops.tigon.swiglu_bwd_(dc, a, b, ctx.act, *ctx.mult)
            else:
                _bwd_inplace_impl(dc, a, b, ctx.act, *ctx.mult)
                _overwritten(a, b)
            da, db = a, b
        elif compiling():
            da, db = torch.ops.tigon.swiglu_bwd(dc, a, b, ctx.act, *ctx.mult)
        else:
            da, db = _bwd_impl(dc, a, b, ctx.act, *ctx.mult)
        return da, db, None, None, None, None


class _FusedGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate_up, act, in_place, gate=1.0, down=1.0):
        if compiling():
            c = torch.ops.tigon.swiglu_fused_fwd(gate_up, act, gate, down)
        else:
            c = _fused_fwd_impl(gate_up, act, gate, down)
        ctx.save_for_backward(gate_up)
        ctx.act, ctx.in_place, ctx.mult = act, in_place, (gate, down)
        return c

    @staticmethod
    def backward(ctx, dc):
        (gate_up,) = ctx.saved_tensors
        dc = _grad_rows(dc, gate_up.dtype)
        if ctx.in_place:  # dgate_up written over gate_up
            if compiling():
                torch.ops.tigon.swiglu_fused_bwd_(dc, gate_up, ctx.act, *ctx.mult)
            else:
                _fused_bwd_inplace_impl(dc, gate_up, ctx.act, *ctx.mult)
                _overwritten(gate_up)
            dgate_up = gate_up
        elif compiling():
            dgate_up = torch.ops.tigon.swiglu_fused_bwd(dc, gate_up, ctx.act, *ctx.mult)
        else:
            dgate_up = _fused_bwd_impl(dc, gate_up, ctx.act, *ctx.mult)
        return dgate_up, None, None, None, None


# ---- public functions -------------------------------------------------------------------------------------------------


def swiglu(
    a: torch.Tensor, b: torch.Tensor, in_place: bool = False, gate_multiplier: float = 1.0, down_multiplier: float = 1.0
) -> torch.Tensor:
    """SwiGLU: ``F.silu(a) * b`` in one kernel, fp32 math rounded to the dtype where that expression rounds (silu(a),
    then the product), so it matches Hugging Face's MLP bit for bit but for fp32 ulps. a and b: [..., I], same shape
    and dtype (fp32/fp16/bf16), last dimension contiguous, rows of any stride; CPU or CUDA. in_place=True writes the
    gradients over a and b in backward (leave it off when a or b is read after the backward): an op that saved a or b
    for its own backward then raises torch's in-place error, and a leaf that requires grad is refused.
    gate_multiplier g and down_multiplier d (Falcon-H1's mlp_multipliers): ``F.silu(a * g) * b * d``."""
    mult = _check_multipliers(gate_multiplier, down_multiplier, "swiglu")
    _check_pair(a, b, in_place, "swiglu")
    return _GLU.apply(a, b, ACTIVATIONS["silu"], _in_place(in_place), *mult)


def geglu(
    a: torch.Tensor,
    b: torch.Tensor,
    approximate: str = "tanh",
    in_place: bool = False,
    gate_multiplier: float = 1.0,
    down_multiplier: float = 1.0,
) -> torch.Tensor:
    """GeGLU: ``F.gelu(a, approximate=approximate) * b`` ("tanh" as in Gemma, or "none" for the erf form); otherwise
    as swiglu()."""
    act = _gelu_activation(approximate, "geglu")
    mult = _check_multipliers(gate_multiplier, down_multiplier, "geglu")
    _check_pair(a, b, in_place, "geglu")
    return _GLU.apply(a, b, act, _in_place(in_place), *mult)


def swiglu_fused(
    gate_up: torch.Tensor, in_place: bool = False, gate_multiplier: float = 1.0, down_multiplier: float = 1.0
) -> torch.Tensor:
    """SwiGLU over a fused projection [..., 2I]: ``a, b = gate_up.chunk(2, dim=-1); F.silu(a) * b`` (Phi-3's order).
    The backward returns d(gate_up); in_place=True writes it over gate_up. Otherwise as swiglu()."""
    mult = _check_multipliers(gate_multiplier, down_multiplier, "swiglu_fused")
    _check_gate_up(gate_up, in_place, "swiglu_fused")
    return _FusedGLU.apply(gate_up, ACTIVATIONS["silu"], _in_place(in_place), *mult)


def geglu_fused(
    gate_up: torch.Tensor,
    approximate: str = "tanh",
    in_place: bool = False,
    gate_multiplier: float = 1.0,
    down_multiplier: float = 1.0,
) -> torch.Tensor:
    """GeGLU over a fused projection [..., 2I]; otherwise as swiglu_fused()."""
    act = _gelu_activation(approximate, "geglu_fused")
    mult = _check_multipliers(gate_multiplier, down_multiplier, "geglu_fused")
    _check_gate_up(gate_up, in_place, "geglu_fused")
    return _FusedGLU.apply(gate_up, act, _in_place(in_place), *mult)
