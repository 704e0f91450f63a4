"""GEMV (skinny matrix product for decoding) as a torch op: tigon::gemv, y = x weight^T (+ bias).

For a few rows of x (decoding a batch of sequences) the product is bound by reading the weight once; the CUDA kernel
streams it with 16-byte loads and keeps the rows of x on chip (include/tigon/gemv.h). The op is registered with
torch.library (with a fake implementation, so torch.compile(fullgraph=True) traces it); the output and any workspace
come from torch's allocator and the kernel runs on torch's current stream, so it can be captured in CUDA graphs.
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import check_tensor, compiling, rows_ok

__all__ = ["gemv"]

_T = _lib.TENSOR_P
_workspace_size = _lib.declare("tigon_gemv_workspace_size", [_T, _T, ctypes.POINTER(ctypes.c_size_t)])
_gemv = _lib.declare("tigon_gemv", [_T, _T, _T, _T, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])

_workspace_bytes_cache: dict = {}


def _workspace(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor | None, int]:
    if x.device.type != "cuda":
        return None, 0
    key = (x.numel() // max(1, x.shape[-1]), weight.shape, x.dtype, x.device)  # the size depends on these alone
    nbytes = _workspace_bytes_cache.get(key)
    if nbytes is None:
        size = ctypes.c_size_t(0)
        _lib.check(_workspace_size(_lib.tensor_arg(x), _lib.tensor_arg(weight), ctypes.byref(size)))
        nbytes = _workspace_bytes_cache[key] = size.value
    if nbytes == 0:
        return None, 0
    return torch.empty(nbytes, dtype=torch.uint8, device=x.device), nbytes


def _out_shape(x: torch.Tensor, weight: torch.Tensor) -> tuple:
    return (*x.shape[:-1], weight.shape[0] if weight.dim() == 2 else 0)


def _impl(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = torch.empty(_out_shape(x, weight), dtype=x.dtype, device=x.device)
    ws, nbytes = _workspace(x, weight)
    _lib.check(
        _gemv(
            _lib.tensor_arg(x),
            _lib.tensor_arg(weight),
            _lib.tensor_arg(bias),
            _lib.tensor_arg(y),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(x),
        )
    )
    return y


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("gemv(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
for _key in ("CPU", "CUDA"):
    _LIB.impl("gemv", _impl, _key)


@torch.library.register_fake("tigon::gemv")
def _fake(x, weight, bias):
    return x.new_empty(_out_shape(x, weight))


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` (``F.linear``) for decoding: x is (..., K) with a few rows (1 to 16 is what the CUDA
    kernel is built for; any number is right), weight (N, K) as nn.Linear stores it (rows may be padded, the last
    stride must be 1), bias (N,) or None. x, weight, bias share one dtype: bfloat16 or float16 (float32 too).
    Returns (..., N), a new contiguous tensor, with fp32 accumulation and one rounding. Fused projections (QKV, gate
    and up) are one call on the weights concatenated along N.

    An inference op: it has no backward of its own. When autograd would need one (grad mode on and an argument that
    requires grad) the call runs ``torch.nn.functional.linear`` instead, so training code stays correct.
    """
    for name, t in (("x", x), ("weight", weight)):
        check_tensor("gemv", name, t)
    check_tensor("gemv", "bias", bias, optional=True)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return torch.nn.functional.linear(x, weight, bias)
    if not rows_ok(x):
        x = x.contiguous()  # rows of x are cheap to copy; the weight is never copied (the C API names a bad layout)
    if compiling():
        return torch.ops.tigon.gemv(x, weight, bias)
    return _impl(x, weight, bias)
