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

__all__ = ["gemv", "gemv_parts"]

_T = _lib.TENSOR_P
_workspace_size = _lib.declare("tigon_gemv_workspace_size", [_T, _T, ctypes.POINTER(ctypes.c_size_t)])
_gemv = _lib.declare("tigon_gemv", [_T, _T, _T, _T, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])
_T_ARRAY = ctypes.POINTER(_T)
_parts_size = _lib.declare(
    "tigon_gemv_parts_workspace_size", [_T, _T_ARRAY, ctypes.c_int32, ctypes.POINTER(ctypes.c_size_t)]
)
_gemv_parts = _lib.declare(
    "tigon_gemv_parts",
    [_T, _T_ARRAY, _T_ARRAY, ctypes.c_int32, _T, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p],
)
MAX_PARTS = 4

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


def _pointers(descs: list):
    """A C array of tigon_tensor pointers (NULL for None); descs must outlive the call."""
    return (_T * len(descs))(*[None if d is None else ctypes.pointer(d) for d in descs])


def _parts_impl(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]) -> torch.Tensor:
    y = torch.empty((*x.shape[:-1], sum(w.shape[0] for w in weights)), dtype=x.dtype, device=x.device)
    w_descs, b_descs = [_lib.tensor_arg(w) for w in weights], [_lib.tensor_arg(b) for b in biases]
    w_arr, b_arr = _pointers(w_descs), _pointers(b_descs)
    ws, nbytes = None, 0
    if x.device.type == "cuda":
        size = ctypes.c_size_t(0)
        _lib.check(_parts_size(_lib.tensor_arg(x), w_arr, len(weights), ctypes.byref(size)))
        nbytes = size.value
        ws = torch.empty(nbytes, dtype=torch.uint8, device=x.device) if nbytes else None
    _lib.check(
        _gemv_parts(
            _lib.tensor_arg(x),
            w_arr,
            b_arr,
            len(weights),
            _lib.tensor_arg(y),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(x),
        )
    )
    return y


_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("gemv(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
_LIB.define("gemv_parts(Tensor x, Tensor[] weights, Tensor?[] biases) -> Tensor")
for _key in ("CPU", "CUDA"):
    _LIB.impl("gemv", _impl, _key)
    _LIB.impl("gemv_parts", _parts_impl, _key)


@torch.library.register_fake("tigon::gemv")
def _fake(x, weight, bias):
    return x.new_empty(_out_shape(x, weight))


@torch.library.register_fake("tigon::gemv_parts")
def _parts_fake(x, weights, biases):
    return x.new_empty((*x.shape[:-1], sum(w.shape[0] for w in weights)))


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


def gemv_parts(
    x: torch.Tensor, weights: list[torch.Tensor] | tuple, biases: list[torch.Tensor | None] | tuple | None = None
) -> torch.Tensor:
    """:func:`gemv` against several weights in one pass over x, their outputs side by side:
    ``torch.cat([F.linear(x, w, b) for w, b in zip(weights, biases)], -1)`` without concatenating the weights (the
    projections of one input: q, k and v, or gate and up, as one launch). weights: 1 to 4 tensors (N_i, K) in x's
    dtype; biases: None, or one entry per weight (each None or (N_i,)). Returns (..., N_0 + N_1 + ...). An inference
    op like gemv: when autograd would need a backward it runs F.linear per weight and concatenates."""
    weights = list(weights)
    biases = [None] * len(weights) if biases is None else list(biases)
    if not 1 <= len(weights) <= MAX_PARTS:
        raise ValueError(f"gemv_parts: argument 'weights' must hold 1 to {MAX_PARTS} tensors, got {len(weights)}")
    if len(biases) != len(weights):
        raise ValueError(
            f"gemv_parts: argument 'biases' must be None or have one entry per weight ({len(weights)}), got "
            f"{len(biases)}"
        )
    check_tensor("gemv_parts", "x", x)
    for i, (w, b) in enumerate(zip(weights, biases)):
        check_tensor("gemv_parts", f"weights[{i}]", w)
        check_tensor("gemv_parts", f"biases[{i}]", b, optional=True)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, *weights, *biases)):
        return torch.cat([torch.nn.functional.linear(x, w, b) for w, b in zip(weights, biases)], dim=-1)
    if not rows_ok(x):
        x = x.contiguous()
    if compiling():
        return torch.ops.tigon.gemv_parts(x, weights, biases)
    return _parts_impl(x, weights, biases)
