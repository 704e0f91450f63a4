"""RMSNorm as torch ops: tigon::rms_norm_fwd / rms_norm_bwd / rms_norm_bwd_ (dx written over dy), and with the
residual add fused in front: tigon::add_rms_norm_fwd / add_rms_norm_bwd.

The ops are registered with torch.library (with fake implementations, so torch.compile(fullgraph=True) traces them);
autograd lives outside them in an autograd.Function. In eager mode the Function calls the ctypes launchers directly,
skipping the dispatcher; under torch.compile it calls the registered ops.
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import compiling, in_place_bwd

__all__ = ["rms_norm", "add_rms_norm", "CASTING_MODES"]

CASTING_MODES = {"llama": 0, "gemma": 1, "none": 2}


class RMSNormParams(ctypes.Structure):  # tigon_rms_norm_params
    _fields_ = [("eps", ctypes.c_float), ("offset", ctypes.c_float), ("casting_mode", ctypes.c_int32)]


_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_rms_norm_fwd", [_T, _T, _T, _T, RMSNormParams, ctypes.c_void_p])
_bwd_workspace_size = _lib.declare("tigon_rms_norm_bwd_workspace_size", [_T, _T, ctypes.POINTER(ctypes.c_size_t)])
_bwd = _lib.declare(
    "tigon_rms_norm_bwd", [_T, _T, _T, _T, _T, _T, RMSNormParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
)
_add_fwd = _lib.declare("tigon_add_rms_norm_fwd", [_T, _T, _T, _T, _T, _T, RMSNormParams, ctypes.c_void_p])
_add_bwd = _lib.declare(
    "tigon_add_rms_norm_bwd",
    [_T, _T, _T, _T, _T, _T, _T, RMSNormParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p],
)


def _out_dtype(x_dtype: torch.dtype, w_dtype: torch.dtype | None, mode: int) -> torch.dtype:
    # Hugging Face's LlamaRMSNorm returns `weight * x.to(input_dtype)`: promoted to the weight's dtype.
    if mode == CASTING_MODES["llama"] and w_dtype is not None:
        return torch.promote_types(x_dtype, w_dtype)
    return x_dtype


def _check_args(x, weight, casting_mode) -> int:
    """What the C API cannot see: Python types and the casting mode's name. It checks dtypes, shapes, strides,
    devices and the numeric options itself, naming the argument (a dtype error arrives as a TypeError)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"rms_norm: argument 'x' must be a torch.Tensor, got {type(x).__name__}")
    if weight is not None and not isinstance(weight, torch.Tensor):
        raise TypeError(f"rms_norm: argument 'weight' must be a torch.Tensor or None, got {type(weight).__name__}")
    mode = CASTING_MODES.get(casting_mode) if isinstance(casting_mode, str) else None
    if mode is None:
        raise ValueError(
            f"rms_norm: argument 'casting_mode' must be one of {sorted(CASTING_MODES)}, got {casting_mode!r}"
        )
    return mode


# ---- launchers: allocate outputs with torch's allocator, call the C API on torch's current stream -------------------

_CONTIGUOUS = torch.contiguous_format


def _fwd_impl(x, weight, eps: float, offset: float, mode: int):
    y = torch.empty_like(
        x, dtype=_out_dtype(x.dtype, None if weight is None else weight.dtype, mode), memory_format=_CONTIGUOUS
    )
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    _lib.check(
        _fwd(
            _lib.tensor_arg(x),
            _lib.tensor_arg(weight),
            _lib.tensor_arg(y),
            _lib.tensor_arg(rstd),
            RMSNormParams(eps, offset, mode),
            _lib.stream_of(x),
        )
    )
    return y, rstd


_workspace_bytes_cache: dict = {}


def _workspace(x: torch.Tensor, weight: torch.Tensor | None) -> tuple[torch.Tensor | None, int]:
    if x.device.type != "cuda" or weight is None:
        return None, 0
    # Saves the size query's C call (two descriptors) on every backward; the size depends on these alone.
    key = (x.shape.numel() // x.shape[-1], x.shape[-1], x.dtype, x.device)
    nbytes = _workspace_bytes_cache.get(key)
    if nbytes is None:
        size = ctypes.c_size_t(0)
        _lib.check(_bwd_workspace_size(_lib.tensor_arg(x), _lib.tensor_arg(weight), ctypes.byref(size)))
        nbytes = _workspace_bytes_cache[key] = size.value
    if nbytes == 0:
        return None, 0
    return torch.empty(nbytes, dtype=torch.uint8, device=x.device), nbytes


def _bwd_launch(dy, x, weight, rstd, dx, dw, offset: float, mode: int) -> None:
    ws, nbytes = _workspace(x, weight if dw is not None else None)
    _lib.check(
        _bwd(
            _lib.tensor_arg(dy),
            _lib.tensor_arg(x),
            _lib.tensor_arg(weight),
            _lib.tensor_arg(rstd),
            _lib.tensor_arg(dx),
            _lib.tensor_arg(dw),
            RMSNormParams(0.0, offset, mode),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(x),
        )
    )


def _empty_dw(x, weight, need_dw):
    if weight is None or not need_dw:
        return torch.empty(0, dtype=x.dtype, device=x.device)
    return torch.empty_like(weight, memory_format=_CONTIGUOUS)


def _bwd_impl(dy, x, weight, rstd, offset: float, mode: int, need_dw: bool):
    dx = torch.empty_like(x, memory_format=_CONTIGUOUS)
    dw = _empty_dw(x, weight, need_dw)
    _bwd_launch(dy, x, weight, rstd, dx, dw if dw.numel() else None, offset, mode)
    return dx, dw


def _bwd_inplace_impl(dy, x, weight, rstd, offset: float, mode: int, need_dw: bool):
    dw = _empty_dw(x, weight, need_dw)
    _bwd_launch(dy, x, weight, rstd, dy, dw if dw.numel() else None, offset, mode)
    return dw


def _add_fwd_impl(x, residual, weight, eps: float, offset: float, mode: int):
    y = torch.empty_like(
        x, dtype=_out_dtype(x.dtype, None if weight is None else weight.dtype, mode), memory_format=_CONTIGUOUS
    )
    h = torch.empty_like(x, memory_format=_CONTIGUOUS)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    _lib.check(
        _add_fwd(
            _lib.tensor_arg(x),
            _lib.tensor_arg(residual),
            _lib.tensor_arg(weight),
            _lib.tensor_arg(y),
            _lib.tensor_arg(h),
            _lib.tensor_arg(rstd),
            RMSNormParams(eps, offset, mode),
            _lib.stream_of(x),
        )
    )
    return y, h, rstd


def _add_bwd_impl(dy, dh, h, weight, rstd, offset: float, mode: int, need_dw: bool):
    dx = torch.empty_like(h, memory_format=_CONTIGUOUS)
    dw = _empty_dw(h, weight, need_dw)
    ws, nbytes = _workspace(h, weight if need_dw else None)
    _lib.check(
        _add_bwd(
            _lib.tensor_arg(dy),
            _lib.tensor_arg(dh),
            _lib.tensor_arg(h),
            _lib.tensor_arg(weight),
            _lib.tensor_arg(rstd),
            _lib.tensor_arg(dx),
            _lib.tensor_arg(dw if dw.numel() else None),
            RMSNormParams(0.0, offset, mode),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(h),
        )
    )
    return dx, dw


# ---- torch.library registration ----------------------------------------------------------------------------------

_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("rms_norm_fwd(Tensor x, Tensor? weight, float eps, float offset, int casting_mode) -> (Tensor, Tensor)")
_LIB.define(
    "rms_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor rstd, float offset, int casting_mode, "
    "bool need_dw) -> (Tensor, Tensor)"
)
_LIB.define(
    "rms_norm_bwd_(Tensor(a!) dy, Tensor x, Tensor? weight, Tensor rstd, float offset, int casting_mode, "
    "bool need_dw) -> Tensor"
)
_LIB.define(
    "add_rms_norm_fwd(Tensor x, Tensor residual, Tensor? weight, float eps, float offset, int casting_mode) "
    "-> (Tensor, Tensor, Tensor)"
)
_LIB.define(
    "add_rms_norm_bwd(Tensor dy, Tensor? dh, Tensor h, Tensor? weight, Tensor rstd, float offset, int casting_mode, "
    "bool need_dw) -> (Tensor, Tensor)"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("rms_norm_fwd", _fwd_impl, _key)
    _LIB.impl("rms_norm_bwd", _bwd_impl, _key)
    _LIB.impl("rms_norm_bwd_", _bwd_inplace_impl, _key)
    _LIB.impl("add_rms_norm_fwd", _add_fwd_impl, _key)
    _LIB.impl("add_rms_norm_bwd", _add_bwd_impl, _key)


@torch.library.register_fake("tigon::rms_norm_fwd")
def _fwd_fake(x, weight, eps, offset, casting_mode):
    y = x.new_empty(x.shape, dtype=_out_dtype(x.dtype, None if weight is None else weight.dtype, casting_mode))
    return y, x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.register_fake("tigon::rms_norm_bwd")
def _bwd_fake(dy, x, weight, rstd, offset, casting_mode, need_dw):
    return torch.empty_like(x, memory_format=torch.contiguous_format), _empty_dw(x, weight, need_dw)


@torch.library.register_fake("tigon::rms_norm_bwd_")
def _bwd_inplace_fake(dy, x, weight, rstd, offset, casting_mode, need_dw):
    return _empty_dw(x, weight, need_dw)


@torch.library.register_fake("tigon::add_rms_norm_fwd")
def _add_fwd_fake(x, residual, weight, eps, offset, casting_mode):
    y, rstd = _fwd_fake(x, weight, eps, offset, casting_mode)
    return y, torch.empty_like(x, memory_format=torch.contiguous_format), rstd


@torch.library.register_fake("tigon::add_rms_norm_bwd")
def _add_bwd_fake(dy, dh, h, weight, rstd, offset, casting_mode, need_dw):
    return _bwd_fake(dy, h, weight, rstd, offset, casting_mode, need_dw)


# ---- autograd -------------------------------------------------------------------------------------------------------


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, offset, mode, in_place):
        if compiling():
            y, rstd = torch.ops.tigon.rms_norm_fwd(x, weight, eps, offset, mode)
        else:
            y, rstd = _fwd_impl(x, weight, eps, offset, mode)
        ctx.save_for_backward(x, weight, rstd)
        ctx.offset, ctx.mode, ctx.in_place = offset, mode, in_place
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        need_dw = weight is not None and ctx.needs_input_grad[1]
        dy = dy.contiguous()  # e.g. a sum()'s stride-0 gradient; free when contiguous, and traceable (no stride read)
        if in_place_bwd(ctx.in_place, dy) and dy.dtype == x.dtype:
            dw = _bwd_inplace_impl(dy, x, weight, rstd, ctx.offset, ctx.mode, need_dw)
            torch.autograd.graph.increment_version(dy)  # dy now holds dx: a saver of dy raises
            dx = dy
        elif compiling():
            dx, dw = torch.ops.tigon.rms_norm_bwd(dy, x, weight, rstd, ctx.offset, ctx.mode, need_dw)
        else:
            dx, dw = _bwd_impl(dy, x, weight, rstd, ctx.offset, ctx.mode, need_dw)
        return dx, (dw if need_dw else None), None, None, None, None


class _AddRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, eps, offset, mode):
        if compiling():
            y, h, rstd = torch.ops.tigon.add_rms_norm_fwd(x, residual, weight, eps, offset, mode)
        else:
            y, h, rstd = _add_fwd_impl(x, residual, weight, eps, offset, mode)
        ctx.save_for_backward(h, weight, rstd)
        ctx.offset, ctx.mode = offset, mode
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None: no zeros to read
        return y, h

    @staticmethod
    def backward(ctx, dy, dh):
        h, weight, rstd = ctx.saved_tensors
        need_dw = weight is not None and ctx.needs_input_grad[2]
        if dy is None:  # only h was used: its gradient passes to x and residual, the weight gets none
            dx = torch.zeros_like(h) if dh is None else dh.to(h.dtype)
            return dx, dx, (torch.zeros_like(weight) if need_dw else None), None, None, None
        dy = dy.contiguous()
        dh = None if dh is None else dh.contiguous()
        if compiling():
            dx, dw = torch.ops.tigon.add_rms_norm_bwd(dy, dh, h, weight, rstd, ctx.offset, ctx.mode, need_dw)
        else:
            dx, dw = _add_bwd_impl(dy, dh, h, weight, rstd, ctx.offset, ctx.mode, need_dw)
        # x and residual get the same gradient (one tensor: autograd copies it before anyone writes over it)
        return dx, dx, (dw if need_dw else None), None, None, None


try:
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
except ImportError:  # torch built without torch.distributed
    DTensor = type("NoDTensor", (), {})


def _rms_norm_dtensor(x, weight, eps, offset, casting_mode, in_place):
    """Rows are independent, so a DTensor x sharded over leading dimensions (or replicated) is normalised rank by rank
    on its local rows with a replicated weight; the weight's gradient is then a partial sum over the ranks that hold
    different rows. Anything else is refused with what to do instead."""
    if not isinstance(x, DTensor):
        raise TypeError(
            "rms_norm: argument 'weight' is a DTensor but x is a plain tensor: pass x as a DTensor on "
            "weight's mesh, or weight.full_tensor()"
        )
    if weight is not None and not isinstance(weight, DTensor):
        raise TypeError(
            "rms_norm: argument 'x' is a DTensor but weight is a plain tensor: distribute weight "
            "replicated on x's mesh (distribute_tensor(weight, mesh, [Replicate()])), or pass x.full_tensor()"
        )
    last = x.dim() - 1
    for p in x.placements:
        if isinstance(p, Partial) or (isinstance(p, Shard) and p.dim % x.dim() == last):
            raise TypeError(
                f"rms_norm: argument 'x' is a DTensor placed {x.placements}: the norm needs whole rows "
                "(the last dimension on one rank, no pending partial sums); redistribute x to Shard a "
                "leading dimension or Replicate, or pass x.full_tensor()"
            )
    if weight is not None:
        if weight.device_mesh != x.device_mesh or not all(isinstance(p, Replicate) for p in weight.placements):
            raise TypeError(
                f"rms_norm: argument 'weight' is a DTensor placed {weight.placements}: every rank needs "
                "the whole weight, replicated on x's mesh (an FSDP2 parameter is only whole inside its "
                "module's forward); pass weight.full_tensor() or redistribute it to Replicate()"
            )
        grad = [Partial() if isinstance(p, Shard) else Replicate() for p in x.placements]
        weight = weight.to_local(grad_placements=grad)
    y = rms_norm(x.to_local(), weight, eps, offset, casting_mode, in_place)
    strides = [1] * x.dim()  # y is contiguous: its global strides, given so uneven shards need no gather
    for d in range(x.dim() - 2, -1, -1):
        strides[d] = strides[d + 1] * x.shape[d + 1]
    return DTensor.from_local(y, x.device_mesh, x.placements, shape=x.shape, stride=tuple(strides))


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    """RMSNorm over the last dimension: ``x * rsqrt(mean(x**2) + eps) * (offset + weight)``.

    casting_mode follows Hugging Face: "llama" (LlamaRMSNorm: only rstd in fp32, x*rstd cast back to x's dtype before
    the weight; the result has dtype promote(x, weight)), "gemma" (GemmaRMSNorm: all fp32, use offset=1.0) or "none"
    (every step in x's dtype). weight may be x's dtype or float32, or None for no scale. in_place=True writes the
    input gradient over the output gradient in backward (saves one activation-sized buffer; leave it off when the
    output gradient is used elsewhere). x may have any row stride (its leading dimensions must flatten to rows);
    CPU and CUDA tensors. DTensors: x sharded over leading dimensions or replicated, with a replicated weight, runs
    on each rank's rows and comes back a DTensor placed as x; other placements raise a TypeError that says why.
    """
    if isinstance(x, DTensor) or isinstance(weight, DTensor):
        return _rms_norm_dtensor(x, weight, eps, offset, casting_mode, in_place)
    mode = _check_args(x, weight, casting_mode)
    return _RMSNorm.apply(x, weight, float(eps), float(offset), mode, bool(in_place))


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
) -> tuple[torch.Tensor, torch.Tensor]:
    """A pre-norm decoder layer's ``h = residual + x; y = rms_norm(h)`` in one pass: returns ``(y, h)``.

    h is rounded to x's dtype as the add in the activations' dtype is, and y is :func:`rms_norm` of h (same options).
    The backward sums the norm's input gradient and h's own gradient in fp32 and rounds once; x and residual receive
    that gradient. x and residual have one shape and dtype; any row strides. CPU and CUDA tensors.
    """
    mode = _check_args(x, weight, casting_mode)
    if not isinstance(residual, torch.Tensor):
        raise TypeError(f"add_rms_norm: argument 'residual' must be a torch.Tensor, got {type(residual).__name__}")
    return _AddRMSNorm.apply(x, residual, weight, float(eps), float(offset), mode)
