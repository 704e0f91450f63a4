"""Int8 inference as torch ops: per-row activation quantization (tigon::quantize_rows), the int8 x int8 linear layer
(tigon::int8_linear: cuBLASLt's int8 GEMM into int32, then one dequantize + bias + activation pass) and the
weight-only int8 GEMV for decoding (tigon::gemv_int8: the GEMV kernel streaming an int8 weight).

The math, shapes and cuBLASLt's layout rules are stated in include/tigon/int8.h. The ops are registered with
torch.library (with fake implementations, so torch.compile(fullgraph=True) traces them); outputs and workspaces come
from torch's allocator and the kernels run on torch's current stream (CUDA-graph capturable). They are inference
ops: a call that autograd would need a backward for (grad mode on and an input that requires grad) raises.
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import check_tensor, compiling, rows_ok
from tigon.ops.activation import activation_code

__all__ = ["quantize_rows", "int8_linear", "gemv_int8"]


class Int8LinearParams(ctypes.Structure):  # tigon_int8_linear_params
    _fields_ = [("activation", ctypes.c_int32)]


_T = _lib.TENSOR_P
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_quantize = _lib.declare("tigon_quantize_rows", [_T, _T, _T, ctypes.c_void_p])
_linear_ws = _lib.declare("tigon_int8_linear_workspace_size", [_T, _T, _SIZE_P])
_linear = _lib.declare(
    "tigon_int8_linear", [_T] * 6 + [Int8LinearParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
)
_gemv_ws = _lib.declare("tigon_gemv_int8_workspace_size", [_T, _T, _SIZE_P])
_gemv = _lib.declare("tigon_gemv_int8", [_T] * 5 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])

_ws_cache: dict = {}


def _workspace(fn, a: torch.Tensor, b: torch.Tensor, key) -> tuple[torch.Tensor | None, int]:
    if a.device.type != "cuda":
        return None, 0
    nbytes = _ws_cache.get(key)
    if nbytes is None:
        size = ctypes.c_size_t(0)
        _lib.check(fn(_lib.tensor_arg(a), _lib.tensor_arg(b), ctypes.byref(size)))
        nbytes = _ws_cache[key] = size.value
    if nbytes == 0:
        return None, 0
    return torch.empty(nbytes, dtype=torch.uint8, device=a.device), nbytes


def _no_backward(op: str, *tensors) -> None:
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError(
            f"{op} is an inference op and has no backward, but an input requires grad: call it under "
            "torch.no_grad() or torch.inference_mode() (or detach the inputs)"
        )


# ---- launchers -------------------------------------------------------------------------------------------------------


def _quantize_impl(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    _lib.check(_quantize(_lib.tensor_arg(x), _lib.tensor_arg(q), _lib.tensor_arg(scale), _lib.stream_of(x)))
    return q, scale


def _linear_impl(q_x, scale_x, q_w, scale_w, bias, activation: int, out_dtype: torch.dtype) -> torch.Tensor:
    m, n = q_x.shape[0], q_w.shape[0] if q_w.dim() == 2 else 0
    out = torch.empty((m, n), dtype=out_dtype, device=q_x.device)
    ws, nbytes = _workspace(_linear_ws, q_x, q_w, ("linear", m, n, q_x.device))
    arg = _lib.tensor_arg
    _lib.check(
        _linear(
            arg(q_x),
            arg(scale_x),
            arg(q_w),
            arg(scale_w),
            arg(bias),
            arg(out),
            Int8LinearParams(activation),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(q_x),
        )
    )
    return out


def _gemv_out_shape(x, q_w) -> tuple:
    return (*x.shape[:-1], q_w.shape[0] if q_w.dim() == 2 else 0)


def _gemv_impl(x, q_w, scale_w, bias) -> torch.Tensor:
    y = torch.empty(_gemv_out_shape(x, q_w), dtype=x.dtype, device=x.device)
    key = ("gemv", x.numel() // max(1, x.shape[-1]), q_w.shape, x.dtype, x.device)
    ws, nbytes = _workspace(_gemv_ws, x, q_w, key)
    arg = _lib.tensor_arg
    _lib.check(
        _gemv(
            arg(x),
            arg(q_w),
            arg(scale_w),
            arg(bias),
            arg(y),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(x),
        )
    )
    return y


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("quantize_rows(Tensor x) -> (Tensor, Tensor)")
_LIB.define(
    "int8_linear(Tensor q_x, Tensor scale_x, Tensor q_w, Tensor scale_w, Tensor? bias, int activation, "
    "ScalarType out_dtype) -> Tensor"
)
_LIB.define("gemv_int8(Tensor x, Tensor q_w, Tensor scale_w, Tensor? bias) -> Tensor")
for _key in ("CPU", "CUDA"):
    _LIB.impl("quantize_rows", _quantize_impl, _key)
    _LIB.impl("int8_linear", _linear_impl, _key)
    _LIB.impl("gemv_int8", _gemv_impl, _key)


@torch.library.register_fake("tigon::quantize_rows")
def _quantize_fake(x):
    return x.new_empty(x.shape, dtype=torch.int8), x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.register_fake("tigon::int8_linear")
def _linear_fake(q_x, scale_x, q_w, scale_w, bias, activation, out_dtype):
    return q_x.new_empty((q_x.shape[0], q_w.shape[0]), dtype=out_dtype)


@torch.library.register_fake("tigon::gemv_int8")
def _gemv_fake(x, q_w, scale_w, bias):
    return x.new_empty(_gemv_out_shape(x, q_w))


# ---- public functions ------------------------------------------------------------------------------------------------


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row (per-token) int8 quantization of x (..., K) in bfloat16, float16 or float32: returns
    (q, scale), q int8 of x's shape and scale float32 of shape x.shape[:-1], with scale = max|x_row| / 127 and
    q = round-half-even(x / scale) clamped to [-127, 127] (a zero row: scale 0, q 0), so |x - q * scale| <= scale / 2.
    An inference op (no backward)."""
    check_tensor("quantize_rows", "x", x)
    _no_backward("tigon.ops.quantize_rows", x)
    if not rows_ok(x):
        x = x.contiguous()
    if compiling():
        return torch.ops.tigon.quantize_rows(x)
    return _quantize_impl(x)


def int8_linear(
    q_x: torch.Tensor,
    scale_x: torch.Tensor,
    q_w: torch.Tensor,
    scale_w: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``act(scale_x[m] * scale_w[n] * (q_x[m] . q_w[n]) + bias[n])``: the int8 x int8 linear layer (W8A8).

    q_x int8 (..., K) with its float32 row scales scale_x (...) (``quantize_rows``), q_w int8 (N, K) as nn.Linear
    stores the weight, quantized per output channel with float32 scales scale_w (N,), bias (N,) or None, activation
    None / "relu" / "gelu" / "gelu_tanh" / "silu". Returns (..., N) in out_dtype (default: bias's dtype, else
    bfloat16): bfloat16 or float16 (float32 too). The dot products are exact int32 sums (cuBLASLt's int8 GEMM on the
    GPU), the rest fp32 with one rounding. cuBLASLt's int8 kernels want K and N multiples of 4 and rows of q_x and q_w
    4-byte aligned; the C API refuses anything else, naming the argument. An inference op (no backward)."""
    for name, t in (("q_x", q_x), ("scale_x", scale_x), ("q_w", q_w), ("scale_w", scale_w)):
        check_tensor("int8_linear", name, t)
    check_tensor("int8_linear", "bias", bias, optional=True)
    act = activation_code(activation, "int8_linear")
    _no_backward("tigon.ops.int8_linear", scale_x, scale_w, bias)
    if out_dtype is None:
        out_dtype = bias.dtype if bias is not None else torch.bfloat16
    lead = q_x.shape[:-1]
    q2 = q_x.reshape(-1, q_x.shape[-1]) if q_x.dim() != 2 else q_x
    if not q2.is_contiguous() and not rows_ok(q2):
        q2 = q2.contiguous()
    s2 = scale_x.reshape(-1) if scale_x.dim() != 1 else scale_x
    if compiling():
        out = torch.ops.tigon.int8_linear(q2, s2, q_w, scale_w, bias, act, out_dtype)
    else:
        out = _linear_impl(q2, s2, q_w, scale_w, bias, act, out_dtype)
    return out.reshape(*lead, out.shape[-1]) if q_x.dim() != 2 else out


def gemv_int8(
    x: torch.Tensor, q_w: torch.Tensor, scale_w: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Weight-only int8 for decoding: ``(x @ q_w.T) * scale_w + bias`` with x (..., K) in bfloat16 / float16 /
    float32 (1 to 16 rows is what the CUDA kernel is built for; any number is right), q_w int8 (N, K) quantized per
    output channel, scale_w float32 (N,), bias (N,) in x's dtype or None. fp32 accumulation, one rounding; the int8
    weight is streamed once (half the bytes of a bf16 weight). An inference op (no backward)."""
    for name, t in (("x", x), ("q_w", q_w), ("scale_w", scale_w)):
        check_tensor("gemv_int8", name, t)
    check_tensor("gemv_int8", "bias", bias, optional=True)
    _no_backward("tigon.ops.gemv_int8", x, scale_w, bias)
    if not rows_ok(x):
        x = x.contiguous()
    if compiling():
        return torch.ops.tigon.gemv_int8(x, q_w, scale_w, bias)
    return _gemv_impl(x, q_w, scale_w, bias)
