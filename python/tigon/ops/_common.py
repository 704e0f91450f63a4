"""Helpers shared by the op modules."""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def compiling() -> bool:
    """True while torch.compile traces: then ops go through the dispatcher instead of the direct eager path."""
    return torch.compiler.is_compiling()


_TORCH = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])


# Before torch 2.15, AOTAutograd traced a forward that writes over an intermediate another op saved (exp's output, then
# cross entropy in place) into a silently wrong gradient (seen on 2.11; 2.15 raises torch's in-place error): there the
# in-place forward runs out of place under torch.compile.
_COMPILED_FWD_MAY_MUTATE = _TORCH >= (2, 15)


def in_place_fwd(in_place: bool) -> bool:
    """Whether a forward may write over its input (in_place=True, and safely traceable)."""
    return in_place and (_COMPILED_FWD_MAY_MUTATE or not compiling())


def in_place_bwd(in_place: bool, *grads: torch.Tensor) -> bool:
    """Whether backward may write the input gradient over the incoming ones (in_place=True, and safe).

    Autograd hands one gradient tensor to several consumers (an add gives both operands the same one), so writing over
    it would change what another consumer reads: only a gradient nobody else holds is written over. Under
    torch.compile nothing tells who else holds it, so compiled backwards run out of place."""
    return in_place and not compiling() and all(_private(g) for g in grads)


def _private(t: torch.Tensor) -> bool:
    # As many references as a gradient autograd hands one backward alone, and not a view of a tensor others may hold.
    return t._base is None and _ALONE is not None and t._use_count() <= _ALONE


def _alone_use_count() -> int | None:
    """The use count of a gradient that only the receiving backward holds: 1 on recent torch, more where the engine
    keeps references of its own during the call. Measured once on a tiny CPU graph; None (never in place) where
    torch cannot count."""
    if not hasattr(torch.Tensor, "_use_count"):
        return None
    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            seen.append(g._use_count())
            return g

    try:
        with torch.inference_mode(False), torch.enable_grad():
            x = torch.zeros(2, requires_grad=True)
            (Probe.apply(x) * 2).sum().backward()  # mul's backward makes a fresh gradient, as a next layer's would
    except Exception:  # noqa: BLE001  (no count, no in-place backward)
        return None
    return seen[0] if seen else None


_ALONE = _alone_use_count()


def rows_ok(t: torch.Tensor) -> bool:
    """Whether the kernels read t as rows without a copy ([..., cols], last stride 1, leading dimensions that flatten
    to one row stride >= cols; as_rows in src/common/tensor.cpp). Not a validation (the C API validates): callers
    use it to choose a path, e.g. a permuted view or transformers' own code."""
    return t.dim() > 0 and (t.is_contiguous() or _rows_ok(t.shape, t.stride()))


def _rows_ok(shape, strides) -> bool:
    if len(shape) == 0:
        return False
    cols = shape[-1]
    if cols > 1 and strides[-1] != 1:
        return False
    row_stride, inner_rows = None, 1
    for size, stride in zip(reversed(shape[:-1]), reversed(strides[:-1])):
        if size != 1:
            if row_stride is None:
                row_stride = stride
            elif stride != row_stride * inner_rows:
                return False
        inner_rows *= size
    rows = 1
    for size in shape[:-1]:
        rows *= size
    return row_stride is None or rows <= 1 or row_stride >= cols


def refuse_leaf(t: torch.Tensor, arg: str, op: str) -> None:
    """in_place=True writes a gradient over t: a leaf that requires grad (a parameter, a user's input) would lose its
    values and receive itself as its .grad."""
    if t.requires_grad and t.is_leaf and torch.is_grad_enabled():  # without grad nothing is written
        raise ValueError(
            f"{op}: argument '{arg}' is a leaf tensor that requires grad, and in_place=True would write "
            f"its gradient over it; pass in_place=False, or an intermediate (e.g. {arg} * 1)"
        )


def check_tensor(op: str, name: str, t, optional: bool = False) -> None:
    """A TypeError naming the argument unless t is a tensor (or None, when optional)."""
    if t is None and optional:
        return
    if not isinstance(t, torch.Tensor):
        kind = "a torch.Tensor or None" if optional else "a torch.Tensor"
        raise TypeError(f"{op}: argument '{name}' must be {kind}, got {type(t).__name__}")


def autocast_linear(x, weight, bias, *others):
    """Under torch.autocast, x, weight and bias (and any further tensors: a residual) in the autocast dtype, as
    F.linear would take them (the casts are autograd's, so an fp32 weight gets an fp32 gradient); as they are
    otherwise."""
    if not (
        isinstance(x, torch.Tensor) and x.device.type in ("cpu", "cuda") and torch.is_autocast_enabled(x.device.type)
    ):
        return (x, weight, bias, *others)
    dtype = torch.get_autocast_dtype(x.device.type)
    cast = lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
    return (cast(x), cast(weight), cast(bias), *(cast(t) for t in others))


def scratch(size_fn, device: torch.device, *args) -> tuple[torch.Tensor | None, int]:
    """A workspace of the bytes size_fn(*args, &bytes) reports (a C API *_workspace_size entry), on device: the
    tensor (None when no bytes are needed) and its size. Tensor arguments (and None) pass as descriptors, others (a
    params struct) as they are."""
    import ctypes

    from tigon import _lib

    size = ctypes.c_size_t(0)
    arg = lambda a: _lib.tensor_arg(a) if a is None or isinstance(a, torch.Tensor) else a  # noqa: E731
    _lib.check(size_fn(*(arg(a) for a in args), ctypes.byref(size)))
    return (torch.empty(size.value, dtype=torch.uint8, device=device) if size.value else None), size.value
