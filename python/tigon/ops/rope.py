"""RoPE as torch ops: tigon::rope_fwd / rope_bwd (new output) and rope_fwd_ / rope_bwd_ (written over the input).

q and k go through one C call (one kernel launch over every head of both); they may
differ in heads (GQA) and strides (slices of a fused qkv). A lone gradient (only q's or k's needed) uses the
single-tensor call. The ops are registered
with torch.library (with fake implementations, so torch.compile(fullgraph=True) traces them); autograd lives outside
them in an autograd.Function, which calls the ctypes launchers directly in eager mode and the registered ops under
torch.compile. The backward is the transpose of the rotation (rotation by -theta); cos and sin get no gradient.
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import compiling, in_place_bwd

__all__ = ["rope", "rope_projections", "LAYOUTS"]

LAYOUTS = {"bhtd": 0, "bthd": 1}  # tigon_rope_layout_t


class RopeParams(ctypes.Structure):  # tigon_rope_params
    _fields_ = [("interleaved", ctypes.c_int32), ("layout", ctypes.c_int32)]


_T = _lib.TENSOR_P
_fwd = _lib.declare("tigon_rope_fwd", [_T, _T, _T, _T, RopeParams, ctypes.c_void_p])
_bwd = _lib.declare("tigon_rope_bwd", [_T, _T, _T, _T, RopeParams, ctypes.c_void_p])
_qk_fwd = _lib.declare("tigon_rope_qk_fwd", [_T, _T, _T, _T, _T, _T, RopeParams, ctypes.c_void_p])
_qk_bwd = _lib.declare("tigon_rope_qk_bwd", [_T, _T, _T, _T, _T, _T, RopeParams, ctypes.c_void_p])


# ---- argument checks ----------------------------------------------------------------------------------------------


def _check_tensor(t, arg: str) -> None:
    # Dtypes, strides and devices: the C API, naming the argument. Shapes are read here (and by the fakes).
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"rope: argument '{arg}' must be a torch.Tensor, got {type(t).__name__}")


def _check_args(q, k, cos, sin, layout, interleaved):
    """Checks the Python types and options and the shapes, and returns (cos, sin) as 3-D tables and the layout code."""
    if layout not in LAYOUTS:
        raise ValueError(f"rope: argument 'layout' must be one of {sorted(LAYOUTS)}, got {layout!r}")
    if not isinstance(interleaved, bool):
        raise TypeError(f"rope: argument 'interleaved' must be a bool, got {type(interleaved).__name__}")
    for t, arg in ((q, "q"), (k, "k"), (cos, "cos"), (sin, "sin")):
        _check_tensor(t, arg)
    for t, arg in ((q, "q"), (k, "k")):
        if t.dim() != 4:
            raise ValueError(f"rope: argument '{arg}' must be 4-D ({layout.upper()}), got shape {tuple(t.shape)}")
    t_dim = 2 if layout == "bhtd" else 1
    batch, seq, head_dim = q.shape[0], q.shape[t_dim], q.shape[3]
    if k.shape[0] != batch or k.shape[t_dim] != seq or k.shape[3] != head_dim:
        raise ValueError(
            f"rope: argument 'k' must match q's batch, seq_len and head_dim in layout {layout!r}: q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}"
        )
    if cos.dim() == 2:  # (T, R): one table for the whole batch
        cos = cos.unsqueeze(0)
    if sin.dim() == 2:
        sin = sin.unsqueeze(0)
    if cos.dim() != 3:
        raise ValueError(f"rope: argument 'cos' must be (batch or 1, seq_len, rotary_dim), got {tuple(cos.shape)}")
    if sin.shape != cos.shape:
        raise ValueError(f"rope: argument 'sin' must have cos's shape {tuple(cos.shape)}, got {tuple(sin.shape)}")
    if cos.shape[0] not in (1, batch) or cos.shape[1] != seq:
        raise ValueError(
            f"rope: argument 'cos' must be ({batch} or 1, {seq}, rotary_dim) for q {tuple(q.shape)} in "
            f"layout {layout!r}, got {tuple(cos.shape)}"
        )
    rotary = cos.shape[2]
    if rotary < 2 or rotary % 2 or rotary > head_dim:
        raise ValueError(
            f"rope: argument 'cos' has rotary dim {rotary}; it must be even and in [2, head_dim = {head_dim}]"
        )
    return cos, sin, LAYOUTS[layout]


# ---- launchers: allocate outputs with torch's allocator, call the C API on torch's current stream -------------------


def _launch(fn, x, cos, sin, out, layout: int, interleaved: bool) -> None:
    _lib.check(
        fn(
            _lib.tensor_arg(x),
            _lib.tensor_arg(cos),
            _lib.tensor_arg(sin),
            _lib.tensor_arg(out),
            RopeParams(int(interleaved), layout),
            _lib.stream_of(x),
        )
    )


def _launch_qk(fn, q, k, cos, sin, q_out, k_out, layout: int, interleaved: bool) -> None:
    _lib.check(
        fn(
            _lib.tensor_arg(q),
            _lib.tensor_arg(k),
            _lib.tensor_arg(cos),
            _lib.tensor_arg(sin),
            _lib.tensor_arg(q_out),
            _lib.tensor_arg(k_out),
            RopeParams(int(interleaved), layout),
            _lib.stream_of(q),
        )
    )


def _qk_new(fn, a, b, cos, sin, layout: int, interleaved: bool):
    a_out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    b_out = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    _launch_qk(fn, a, b, cos, sin, a_out, b_out, layout, interleaved)
    return a_out, b_out


def _qk_fwd_impl(q, k, cos, sin, layout: int, interleaved: bool):
    return _qk_new(_qk_fwd, q, k, cos, sin, layout, interleaved)


def _qk_fwd_inplace_impl(q, k, cos, sin, layout: int, interleaved: bool) -> None:
    _launch_qk(_qk_fwd, q, k, cos, sin, q, k, layout, interleaved)


def _qk_bwd_impl(dq, dk, cos, sin, layout: int, interleaved: bool):
    return _qk_new(_qk_bwd, dq, dk, cos, sin, layout, interleaved)


def _qk_bwd_inplace_impl(dq, dk, cos, sin, layout: int, interleaved: bool) -> None:
    _launch_qk(_qk_bwd, dq, dk, cos, sin, dq, dk, layout, interleaved)


def _fwd_impl(x, cos, sin, layout: int, interleaved: bool):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch(_fwd, x, cos, sin, out, layout, interleaved)
    return out


def _fwd_inplace_impl(x, cos, sin, layout: int, interleaved: bool) -> None:
    _launch(_fwd, x, cos, sin, x, layout, interleaved)


def _bwd_impl(dy, cos, sin, layout: int, interleaved: bool):
    dx = torch.empty(dy.shape, dtype=dy.dtype, device=dy.device)
    _launch(_bwd, dy, cos, sin, dx, layout, interleaved)
    return dx


def _bwd_inplace_impl(dy, cos, sin, layout: int, interleaved: bool) -> None:
    _launch(_bwd, dy, cos, sin, dy, layout, interleaved)


# ---- torch.library registration ----------------------------------------------------------------------------------

_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define("rope_fwd(Tensor x, Tensor cos, Tensor sin, int layout, bool interleaved) -> Tensor")
_LIB.define("rope_fwd_(Tensor(a!) x, Tensor cos, Tensor sin, int layout, bool interleaved) -> ()")
_LIB.define("rope_bwd(Tensor dy, Tensor cos, Tensor sin, int layout, bool interleaved) -> Tensor")
_LIB.define("rope_bwd_(Tensor(a!) dy, Tensor cos, Tensor sin, int layout, bool interleaved) -> ()")
_LIB.define("rope_qk_fwd(Tensor q, Tensor k, Tensor cos, Tensor sin, int layout, bool interleaved) -> (Tensor, Tensor)")
_LIB.define("rope_qk_fwd_(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin, int layout, bool interleaved) -> ()")
_LIB.define(
    "rope_qk_bwd(Tensor dq, Tensor dk, Tensor cos, Tensor sin, int layout, bool interleaved) -> (Tensor, Tensor)"
)
_LIB.define("rope_qk_bwd_(Tensor(a!) dq, Tensor(b!) dk, Tensor cos, Tensor sin, int layout, bool interleaved) -> ()")
for _key in ("CPU", "CUDA"):
    _LIB.impl("rope_qk_fwd", _qk_fwd_impl, _key)
    _LIB.impl("rope_qk_fwd_", _qk_fwd_inplace_impl, _key)
    _LIB.impl("rope_qk_bwd", _qk_bwd_impl, _key)
    _LIB.impl("rope_qk_bwd_", _qk_bwd_inplace_impl, _key)
    _LIB.impl("rope_fwd", _fwd_impl, _key)
    _LIB.impl("rope_fwd_", _fwd_inplace_impl, _key)
    _LIB.impl("rope_bwd", _bwd_impl, _key)
    _LIB.impl("rope_bwd_", _bwd_inplace_impl, _key)


@torch.library.register_fake("tigon::rope_qk_fwd")
def _qk_fwd_fake(q, k, cos, sin, layout, interleaved):
    return q.new_empty(q.shape), k.new_empty(k.shape)


@torch.library.register_fake("tigon::rope_qk_bwd")
def _qk_bwd_fake(dq, dk, cos, sin, layout, interleaved):
    return dq.new_empty(dq.shape), dk.new_empty(dk.shape)


@torch.library.register_fake("tigon::rope_qk_fwd_")
def _qk_fwd_inplace_fake(q, k, cos, sin, layout, interleaved):
    return None


@torch.library.register_fake("tigon::rope_qk_bwd_")
def _qk_bwd_inplace_fake(dq, dk, cos, sin, layout, interleaved):
    return None


@torch.library.register_fake("tigon::rope_fwd")
def _fwd_fake(x, cos, sin, layout, interleaved):
    return x.new_empty(x.shape)


@torch.library.register_fake("tigon::rope_bwd")
def _bwd_fake(dy, cos, sin, layout, interleaved):
    return dy.new_empty(dy.shape)


@torch.library.register_fake("tigon::rope_fwd_")
def _fwd_inplace_fake(x, cos, sin, layout, interleaved):
    return None


@torch.library.register_fake("tigon::rope_bwd_")
def _bwd_inplace_fake(dy, cos, sin, layout, interleaved):
    return None


# ---- autograd -------------------------------------------------------------------------------------------------------


def _rotate_grad(g, cos, sin, layout: int, interleaved: bool, in_place: bool):
    # contiguous(): a sum()'s gradient is a stride-0 expansion, which neither kernel reads nor takes a result in place.
    # It is free when g is contiguous (in place then writes over g itself), and traceable where reading strides is
    # not (torch.compile's strict tracing of backward in torch < 2.7).
    g = g.contiguous()
    if in_place_bwd(in_place, g):
        _bwd_inplace_impl(g, cos, sin, layout, interleaved)
        torch.autograd.graph.increment_version(g)  # g now holds the input gradient: a saver of g raises
        return g
    if compiling():
        return torch.ops.tigon.rope_bwd(g, cos, sin, layout, interleaved)
    return _bwd_impl(g, cos, sin, layout, interleaved)


def _rotate_grads(dq, dk, cos, sin, layout: int, interleaved: bool, in_place: bool):
    """Both input gradients in one C call (in place over the output gradients when allowed and possible)."""
    dq, dk = dq.contiguous(), dk.contiguous()  # as in _rotate_grad
    if dq is not dk and in_place_bwd(in_place, dq, dk):
        _qk_bwd_inplace_impl(dq, dk, cos, sin, layout, interleaved)
        torch.autograd.graph.increment_version((dq, dk))
        return dq, dk
    if compiling():
        return torch.ops.tigon.rope_qk_bwd(dq, dk, cos, sin, layout, interleaved)
    return _qk_bwd_impl(dq, dk, cos, sin, layout, interleaved)


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, cos, sin, layout, interleaved, in_place):
        if in_place:
            if compiling():
                torch.ops.tigon.rope_qk_fwd_(q, k, cos, sin, layout, interleaved)
            else:
                _qk_fwd_inplace_impl(q, k, cos, sin, layout, interleaved)
            ctx.mark_dirty(q, k)
            q_out, k_out = q, k
        elif compiling():
            q_out, k_out = torch.ops.tigon.rope_qk_fwd(q, k, cos, sin, layout, interleaved)
        else:
            q_out, k_out = _qk_fwd_impl(q, k, cos, sin, layout, interleaved)
        ctx.save_for_backward(cos, sin)
        ctx.layout, ctx.interleaved, ctx.in_place = layout, interleaved, in_place
        return q_out, k_out

    @staticmethod
    def backward(ctx, dq, dk):
        cos, sin = ctx.saved_tensors
        # The input gradients go over the output gradients whenever nobody else holds those (in_place_bwd checks),
        # whatever the forward did: no [B, H, T, D] allocations for q and k at the backward's peak.
        args = (cos, sin, ctx.layout, ctx.interleaved, True)
        want_q, want_k = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if want_q and want_k and dq is not None and dk is not None:
            dq, dk = _rotate_grads(dq, dk, *args)
            return dq, dk, None, None, None, None, None
        dq = _rotate_grad(dq, *args) if want_q and dq is not None else None
        dk = _rotate_grad(dk, *args) if want_k and dk is not None else None
        return dq, dk, None, None, None, None, None


class _RopeInPlace(torch.autograd.Function):
    """One tensor rotated in place. A Function per tensor: autograd lets a Function that writes over a view return
    that one tensor only, and transformers' q and k are transposed views of their projections."""

    @staticmethod
    def forward(ctx, x, cos, sin, layout, interleaved):
        _fwd_inplace_impl(x, cos, sin, layout, interleaved)  # eager only: rope() keeps torch.compile on _Rope
        ctx.mark_dirty(x)
        ctx.save_for_backward(cos, sin)
        ctx.layout, ctx.interleaved = layout, interleaved
        return x

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        return _rotate_grad(dy, cos, sin, ctx.layout, ctx.interleaved, True), None, None, None, None


def _disjoint(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a and b's memory ranges are apart (a conservative test: interleaved slices of one buffer say no)."""
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return True

    def span(t):
        end = t.data_ptr() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) * t.element_size()
        return t.data_ptr(), end + t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a1 <= b0 or b1 <= a0


# Autograd's single-output view functions, walked back from q and k to the op that made their memory.
_VIEW_NODES = {
    "AliasBackward0",
    "AsStridedBackward0",
    "PermuteBackward0",
    "SelectBackward0",
    "SliceBackward0",
    "SqueezeBackward0",
    "SqueezeBackward1",
    "TransposeBackward0",
    "UnsqueezeBackward0",
    "ViewBackward0",
}


def _one_output_view(t: torch.Tensor) -> bool:
    """False where t is (a view of) one output of split / chunk / unbind, which autograd does not let a Function
    write over (DeepSeek's q_rot and k_rot are split off their projections)."""
    fn = t.grad_fn
    while fn is not None and type(fn).__name__ in _VIEW_NODES:
        fn = fn.next_functions[0][0]
    return fn is None or not type(fn).__name__.startswith(("Split", "Unbind"))


def rotates_in_place(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether rope(q, k, in_place=True) may write over q and k: neither a leaf that requires grad nor a piece of a
    split, no stride-0 (expanded) or shared memory between them, and not under torch.compile (whose tracing of
    in-place forwards over views is not to be relied on)."""
    return (
        not compiling()
        and _one_output_view(q)
        and _one_output_view(k)
        and not (q.requires_grad and q.is_leaf)
        and not (k.requires_grad and k.is_leaf)
        and 0 not in q.stride()
        and 0 not in k.stride()
        and _disjoint(q, k)
    )


def rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str = "bhtd",
    interleaved: bool = False,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding of q and k, as Hugging Face's apply_rotary_pos_emb: ``x * cos + rotate(x) * sin``.

    q is (B, Hq, T, D) and k (B, Hk, T, D) for layout="bhtd", or (B, T, H, D) for "bthd"; Hq != Hk is fine (GQA).
    cos and sin are (B or 1, T, R) (or (T, R)) as HF's rotary embedding returns them, float32 or q's dtype; R even,
    R <= D: only the first R dims of each head rotate, the rest pass through (partial rotary). interleaved=False pairs
    dim i with i + R/2 (rotate_half, Llama); True pairs 2i with 2i + 1 (tables built with repeat_interleave). Math in
    float32. Any strides with a contiguous last dim (a head slice of a fused qkv works without a copy); outputs are
    contiguous. in_place=True writes the results over q and k (views too, e.g. transposed projections). The backward
    writes the input gradients over the output gradients when no other consumer holds those (else into new tensors).
    cos and sin receive no gradient. CPU and CUDA tensors.
    """
    cos, sin, code = _check_args(q, k, cos, sin, layout, interleaved)
    if in_place and not compiling() and (q._is_view() or k._is_view()):
        return _RopeInPlace.apply(q, cos, sin, code, interleaved), _RopeInPlace.apply(k, cos, sin, code, interleaved)
    return _Rope.apply(q, k, cos, sin, code, interleaved, bool(in_place))


def _projection_base(t: torch.Tensor) -> torch.Tensor | None:
    """The tensor t is a (B, T, H, D) -> (B, H, T, D) transpose of, when it is exactly that: a contiguous, non-view
    base holding t's elements alone (a projection's output, as the families' attention makes q and k)."""
    base = t._base
    if base is None or base._base is not None or not base.is_contiguous() or base.numel() != t.numel():
        return None
    b, h, s, d = t.shape
    if t.data_ptr() != base.data_ptr() or t.stride() != (s * h * d, d, h * d, 1):
        return None
    return base


class _RopeBases(torch.autograd.Function):
    """q and k rotated over their projections' memory, given as the projections themselves (not their transposed
    views): a Function that writes over a view makes autograd copy the whole gradient around its backward
    (CopySlices: the base's gradient cloned, the view's slice cloned and copied back), which a Function that writes
    over a base does not."""

    @staticmethod
    def forward(ctx, q_base, k_base, cos, sin, q_shape, k_shape, interleaved):
        layout = LAYOUTS["bthd"]
        _qk_fwd_inplace_impl(q_base.view(q_shape), k_base.view(k_shape), cos, sin, layout, interleaved)
        ctx.mark_dirty(q_base, k_base)
        ctx.save_for_backward(cos, sin)
        ctx.shapes, ctx.interleaved = (q_shape, k_shape), interleaved
        return q_base, k_base

    @staticmethod
    def backward(ctx, dq, dk):
        cos, sin = ctx.saved_tensors
        (q_shape, k_shape), layout = ctx.shapes, LAYOUTS["bthd"]
        dq, dk = dq.contiguous(), dk.contiguous()
        if dq is not dk and in_place_bwd(True, dq, dk):
            _qk_bwd_inplace_impl(dq.view(q_shape), dk.view(k_shape), cos, sin, layout, ctx.interleaved)
            torch.autograd.graph.increment_version((dq, dk))
            return dq, dk, None, None, None, None, None
        dq_new, dk_new = _qk_bwd_impl(dq.view(q_shape), dk.view(k_shape), cos, sin, layout, ctx.interleaved)
        return dq_new.view(dq.shape), dk_new.view(dk.shape), None, None, None, None, None


def rope_projections(q, k, cos, sin, interleaved: bool = False):
    """:func:`rope` in place for q and k in layout "bhtd" that are transposed (B, T, H, D) views of their own
    contiguous projections (``proj(x).view(B, T, H, D).transpose(1, 2)``): the projections are rotated and returned
    as the same views. None where q or k is not such a view (the caller then takes rope(..., in_place=...)). The
    caller must hold that nothing else reads the projections' pre-rotation values (rotates_in_place's conditions)."""
    if compiling():
        return None
    q_base, k_base = _projection_base(q), _projection_base(k)
    if q_base is None or k_base is None or q_base is k_base:
        return None
    cos, sin, _ = _check_args(q, k, cos, sin, "bhtd", interleaved)
    (b, hq, s, d), hk = q.shape, k.shape[1]
    q_shape, k_shape = (b, s, hq, d), (b, s, hk, d)
    q_base, k_base = _RopeBases.apply(q_base, k_base, cos, sin, q_shape, k_shape, interleaved)
    return q_base.view(q_shape).transpose(1, 2), k_base.view(k_shape).transpose(1, 2)


class _RopeOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, layout: int, interleaved: bool):
        ctx.save_for_backward(cos, sin)
        ctx.layout, ctx.interleaved = layout, interleaved
        if compiling():
            return torch.ops.tigon.rope_fwd(x, cos, sin, layout, interleaved)
        return _fwd_impl(x, cos, sin, layout, interleaved)

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        return _rotate_grad(dy, cos, sin, ctx.layout, ctx.interleaved, False), None, None, None, None


def rope_one(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str = "bhtd", interleaved: bool = False
) -> torch.Tensor:
    """:func:`rope` of one tensor (Gemma 4 rotates q and k in separate calls): x as rope's q, the same tables and
    options; returns the rotated x, contiguous."""
    cos, sin, code = _check_args(x, x, cos, sin, layout, interleaved)
    return _RopeOne.apply(x, cos, sin, code, interleaved)
