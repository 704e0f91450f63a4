"""Loads libtigon with ctypes and turns torch tensors into tigon_tensor descriptors (DLPack's DLTensor layout).

Search order for the library: $TIGON_LIBRARY, the copy installed inside this package (tigon/lib/), then a CMake build
tree next to the sources (build/), so tests run straight from a checkout after `cmake --build build`.
"""

from __future__ import annotations

import ctypes
import os
import struct
import warnings
from pathlib import Path

import torch

__all__ = [
    "TigonError",
    "TigonArgumentError",
    "TigonDTypeError",
    "TigonCPUWarning",
    "CPU_PATH_NOTE",
    "TigonTensor",
    "TENSOR_P",
    "lib",
    "library_path",
    "declare",
    "tensor_arg",
    "check",
    "stream_of",
]


class TigonError(RuntimeError):
    """A failure reported by the C library; the message names the function and the argument."""


class TigonArgumentError(TigonError, ValueError):
    """Invalid input (shape, stride, device or option), reported by the C library."""


class TigonDTypeError(TigonArgumentError, TypeError):
    """An argument of a dtype the op does not take: a TypeError, as torch's own ops raise for one."""


class TigonCPUWarning(UserWarning):
    """Issued once per process, the first time an op runs on CPU tensors (filter it with this category)."""


CPU_PATH_NOTE = (
    "Tigon's CPU path is a float64-accumulating reference implementation meant for checking "
    "correctness, not for speed (patched training on a CPU is several times slower than plain PyTorch); "
    "the fast kernels need a CUDA device"
)

_STATUS_INVALID_ARGUMENT = 1
_cpu_warned = False


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class TigonTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DTYPE_CODES = {
    torch.float32: (2, 32),
    torch.float16: (2, 16),
    torch.bfloat16: (4, 16),
    torch.int32: (0, 32),
    torch.int64: (0, 64),
    torch.int8: (0, 8),
    torch.uint8: (1, 8),
}
_DEVICE_TYPES = {"cpu": 1, "cuda": 2}


def _candidates() -> list[Path]:
    here = Path(__file__).resolve().parent
    paths = []
    if os.environ.get("TIGON_LIBRARY"):
        paths.append(Path(os.environ["TIGON_LIBRARY"]))
    paths.append(here / "lib" / "libtigon.so")
    paths.append(here.parent.parent / "build" / "libtigon.so")
    return paths


def _load() -> tuple[ctypes.CDLL, Path]:
    tried = []
    for path in _candidates():
        if path.is_file():
            return ctypes.CDLL(str(path)), path
        tried.append(str(path))
    raise ImportError(
        "tigon: libtigon.so not found (looked in: " + ", ".join(tried) + "). Install the package with "
        "`pip install .`, or build it with `cmake -S . -B build -G Ninja && cmake --build build`."
    )


lib, library_path = _load()

TENSOR_P = ctypes.POINTER(TigonTensor)
lib.tigon_version.restype = ctypes.c_char_p
lib.tigon_last_error.restype = ctypes.c_char_p
lib.tigon_has_cuda.restype = ctypes.c_int


def declare(name: str, argtypes: list) -> ctypes._CFuncPtr:
    """Declares a C API function of libtigon (each op module declares its own) and returns it; status return."""
    fn = getattr(lib, name)
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def version() -> str:
    return lib.tigon_version().decode()


def has_cuda() -> bool:
    return bool(lib.tigon_has_cuda())


def check(status: int) -> None:
    """Raises the C library's error for a non-zero status."""
    if status != 0:
        msg = lib.tigon_last_error().decode()
        if status != _STATUS_INVALID_ARGUMENT:
            raise TigonError(msg)
        # The C API's convention for a dtype error (src/common/error.h, fail_dtype): "argument '<name>': dtype ...".
        raise (TigonDTypeError if "': dtype " in msg else TigonArgumentError)(msg)


# Per layout (shape, strides, dtype, device): everything of a descriptor but the data pointer, packed once. Building
# a ctypes structure field by field costs several microseconds; copying 48 prepared bytes costs well under one.
_layouts: dict = {}
_pack_ptr = struct.Struct("<Q").pack


def _dlpack_code(t: torch.Tensor) -> tuple[int, int]:
    # A dtype no op takes (float64, bool, complex, ...): described faithfully, so the C API refuses it by name.
    code = 6 if t.dtype == torch.bool else 5 if t.is_complex() else 2 if t.is_floating_point() else 0
    return code, 8 * t.element_size()


def _layout(t: torch.Tensor, key):
    nd = t.dim()
    dims = (ctypes.c_int64 * max(1, 2 * nd))(*t.shape, *t.stride())
    addr = ctypes.addressof(dims)
    code, bits = _DTYPE_CODES.get(t.dtype) or _dlpack_code(t)
    tail = struct.pack(
        "<iiiBBHQQQ", _DEVICE_TYPES[t.device.type], t.device.index or 0, nd, code, bits, 1, addr, addr + 8 * nd, 0
    )
    if len(_layouts) > 4096:  # bounded; descriptors already built keep their own arrays alive (_keep)
        _layouts.clear()
    _layouts[key] = (tail, dims)
    return tail, dims


def tensor_arg(t: torch.Tensor | None):
    """A tigon_tensor describing `t` (None -> NULL), passed by pointer to the C API."""
    if t is None:
        return None
    key = (t.shape, t.stride(), t.dtype, t.device)
    tail, dims = _layouts.get(key) or _layout(t, key)
    desc = TigonTensor.from_buffer_copy(_pack_ptr(t.data_ptr()) + tail)
    desc._keep = dims
    return desc


def stream_of(t: torch.Tensor):
    """The current torch stream of t's device as a cudaStream_t (None on CPU). Every op launch asks, so the CPU
    branch is where the one-time CPU warning is given (the CUDA path pays nothing for it)."""
    if t.device.type != "cuda":
        _warn_cpu()
        return None
    return torch._C._cuda_getCurrentRawStream(t.device.index)


def _warn_cpu() -> None:
    # A module flag rather than the warnings registry: once per process whatever the active filters say.
    global _cpu_warned
    if not _cpu_warned:
        _cpu_warned = True
        warnings.warn(CPU_PATH_NOTE, TigonCPUWarning, stacklevel=3)
