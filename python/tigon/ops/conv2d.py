"""2-D convolution with its epilogue fused, as a torch op (tigon::conv2d_fwd): ``act(F.conv2d(x, weight, bias,
stride, padding, dilation) + residual)`` with act None or "relu", groups = 1, channels-last tensors. Forward only
(inference): a ResNet block's convolution, folded BatchNorm, shortcut add and ReLU in one kernel."""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import FLOAT_DTYPES, check_tensor, compiling

__all__ = ["conv2d"]

_ACTIVATIONS = {None: 0, "relu": 1}


class Conv2dParams(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_int32)
        for name in ("stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w", "activation")
    ]


_T = _lib.TENSOR_P
_fwd_workspace_size = _lib.declare(
    "tigon_conv2d_fwd_workspace_size", [_T] * 5 + [Conv2dParams, ctypes.POINTER(ctypes.c_size_t)]
)
_fwd = _lib.declare("tigon_conv2d_fwd", [_T] * 5 + [Conv2dParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])
_workspace_bytes: dict = {}  # problem -> bytes (cuDNN's plan for it may want a workspace; it is kept for the process)


def _out_extent(size: int, pad: int, dil: int, taps: int, stride: int) -> int:
    return (size + 2 * pad - dil * (taps - 1) - 1) // stride + 1


def _fwd_impl(x, weight, bias, residual, stride: list[int], padding: list[int], dilation: list[int], act: int):
    cl = torch.channels_last
    x, weight = x.contiguous(memory_format=cl), weight.contiguous(memory_format=cl)
    residual = residual.contiguous(memory_format=cl) if residual is not None else None
    bias = bias.contiguous() if bias is not None else None
    p = _out_extent(x.shape[2], padding[0], dilation[0], weight.shape[2], stride[0])
    q = _out_extent(x.shape[3], padding[1], dilation[1], weight.shape[3], stride[1])
    y = torch.empty(x.shape[0], weight.shape[0], p, q, dtype=x.dtype, device=x.device, memory_format=cl)
    params = Conv2dParams(stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], act)
    arg = _lib.tensor_arg
    tensors = (arg(x), arg(weight), arg(bias), arg(residual), arg(y))
    nbytes = 0
    if x.device.type == "cuda":
        key = (
            x.shape,
            weight.shape,
            x.dtype,
            x.device,
            bias is None,
            residual is None,
            *stride,
            *padding,
            *dilation,
            act,
        )
        nbytes = _workspace_bytes.get(key)
        if nbytes is None:
            size = ctypes.c_size_t(0)
            _lib.check(_fwd_workspace_size(*tensors, params, ctypes.byref(size)))
            nbytes = _workspace_bytes[key] = size.value
    ws = torch.empty(nbytes, dtype=torch.uint8, device=x.device) if nbytes else None
    _lib.check(_fwd(*tensors, params, ws.data_ptr() if ws is not None else None, nbytes, _lib.stream_of(x)))
    return y


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define(
    "conv2d_fwd(Tensor x, Tensor weight, Tensor? bias, Tensor? residual, int[] stride, int[] padding, "
    "int[] dilation, int activation) -> Tensor"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("conv2d_fwd", _fwd_impl, _key)


@torch.library.register_fake("tigon::conv2d_fwd")
def _fwd_fake(x, weight, bias, residual, stride, padding, dilation, activation):
    p = _out_extent(x.shape[2], padding[0], dilation[0], weight.shape[2], stride[0])
    q = _out_extent(x.shape[3], padding[1], dilation[1], weight.shape[3], stride[1])
    out = x.new_empty((x.shape[0], weight.shape[0], p, q))
    return out.contiguous(memory_format=torch.channels_last)


def _pair(name: str, v, low: int) -> list[int]:
    vals = [v, v] if isinstance(v, int) and not isinstance(v, bool) else list(v) if isinstance(v, (tuple, list)) else []
    if len(vals) != 2 or any(isinstance(i, bool) or not isinstance(i, int) or i < low for i in vals):
        raise ValueError(f"conv2d: argument '{name}' must be an int >= {low} or a pair of them, got {v!r}")
    return vals


def conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    activation: str | None = None,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """``act(F.conv2d(x, weight, bias, stride, padding, dilation) + residual)``: x [N, C, H, W], weight [K, C, R, S]
    (groups = 1), bias [K], residual [N, K, P, Q] (added before the activation, as a ResNet block's shortcut is),
    activation None or "relu"; fp16 or bf16 on a GPU (sm_90, C and K multiples of 8), fp32 too on the CPU. Inputs
    are taken in channels-last memory (converted if they are not) and the result is channels-last. padding is an int
    or a pair (no "same"/"valid" strings). Forward only: inputs that need a gradient are refused."""
    check_tensor("conv2d", "x", x)
    check_tensor("conv2d", "weight", weight)
    check_tensor("conv2d", "bias", bias, optional=True)
    check_tensor("conv2d", "residual", residual, optional=True)
    if activation not in _ACTIVATIONS:
        raise ValueError(f"conv2d: argument 'activation' must be None or 'relu', got {activation!r}")
    for name, t in (("x", x), ("weight", weight)):
        if t.dim() != 4 or t.dtype not in FLOAT_DTYPES:
            raise ValueError(
                f"conv2d: argument '{name}' must be a 4-D float32, float16 or bfloat16 tensor, got "
                f"{tuple(t.shape)} {t.dtype}"
            )
    stride, padding, dilation = _pair("stride", stride, 1), _pair("padding", padding, 0), _pair("dilation", dilation, 1)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, residual)):
        raise RuntimeError(
            "conv2d: forward only (inference); call it under torch.no_grad() or torch.inference_mode(), or use "
            "torch.nn.functional.conv2d where a gradient is needed"
        )
    args = (x, weight, bias, residual, stride, padding, dilation, _ACTIVATIONS[activation])
    return torch.ops.tigon.conv2d_fwd(*args) if compiling() else _fwd_impl(*args)
