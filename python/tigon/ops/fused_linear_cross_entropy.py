"""Fused linear + cross entropy as torch ops: tigon::fused_linear_cross_entropy_fwd (the loss of x @ weight.T + bias
and, on request, the gradients of x, weight and bias, never holding the [N, V] logits) and
fused_linear_cross_entropy_scale_ (the backward of "mean" and "sum": the gradients times grad_output, in place).

As with cross entropy, the gradients are computed in the forward, so the backward only scales them (nothing at all
for the usual grad_output of 1). reduction="none" is the exception: a per-token upstream gradient cannot be applied
to dW after the fact, so its forward computes the loss alone and its backward runs the op again with grad_output.
Nothing synchronises: the whole step can be captured in a CUDA graph.

The weight's gradient comes back in the weight's dtype. When the tokens take more than one chunk, it is accumulated
in fp32 and narrowed in place at the end: the returned tensor is the front half of that fp32 buffer, so no second
V x H buffer ever exists (the buffer is freed with the gradient).
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import autocast_linear, compiling, rows_ok
from tigon.ops.cross_entropy import REDUCTIONS, CrossEntropyParams, check_options, check_target_values, with_extras

__all__ = ["fused_linear_cross_entropy", "chunk_plan", "DEFAULT_MEMORY_BUDGET"]

DEFAULT_MEMORY_BUDGET = 3 << 29  # bytes of logits per chunk: 1.5 GiB (the C library's default)
DW_ACCUMULATION = {"fp32": 0, "weight": 1}


class FusedLinearCrossEntropyParams(ctypes.Structure):  # tigon_fused_linear_cross_entropy_params
    _fields_ = [
        ("ce", CrossEntropyParams),
        ("chunk_rows", ctypes.c_int64),
        ("memory_budget", ctypes.c_uint64),
        ("dw_accumulation", ctypes.c_int32),
        ("narrow_dw", ctypes.c_int32),
    ]


_T = _lib.TENSOR_P
_P = FusedLinearCrossEntropyParams
_ws_size = _lib.declare(
    "tigon_fused_linear_cross_entropy_workspace_size",
    [_T, _T, _P, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int64)],
)
_fwd = _lib.declare(
    "tigon_fused_linear_cross_entropy_fwd", [_T] * 13 + [_P, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
)
_bwd = _lib.declare("tigon_fused_linear_cross_entropy_bwd", [_T] * 4 + [ctypes.c_void_p])

_NONE = REDUCTIONS["none"]


def _check_args(
    x,
    weight,
    target,
    bias,
    ce_weight,
    ignore_index,
    label_smoothing,
    lse_square_scale,
    softcap,
    reduction,
    memory_budget,
    chunk_rows,
    dw_accumulation,
):
    """Python types and options, and the shapes the fake implementations build outputs from (so a bad one fails
    when torch.compile traces). Dtypes, strides, devices: the C API, naming the argument."""
    op = "fused_linear_cross_entropy"
    for arg, t in (("x", x), ("weight", weight), ("target", target)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{arg}' must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() < 2 or x.shape[-1] == 0:
        raise ValueError(f"{op}: argument 'x' must be [..., H] with H > 0, got shape {tuple(x.shape)}")
    if weight.dim() != 2 or weight.shape[1] != x.shape[-1] or weight.shape[0] == 0:
        raise ValueError(
            f"{op}: argument 'weight' must be [V, H] with V > 0 and H = {x.shape[-1]} (x's last "
            f"dimension), got shape {tuple(weight.shape)}"
        )
    if target.shape != x.shape[:-1]:
        raise ValueError(
            f"{op}: argument 'target' must have shape {tuple(x.shape[:-1])} (x's leading dimensions), "
            f"got {tuple(target.shape)}"
        )
    for arg, t, shape in (("bias", bias, weight.shape[:1]), ("ce_weight", ce_weight, weight.shape[:1])):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{arg}' must be a torch.Tensor or None, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{op}: argument '{arg}' must be a floating-point tensor, got {t.dtype}")
        if t.shape != shape:
            raise ValueError(f"{op}: argument '{arg}' must have shape ({shape[0]},), got {tuple(t.shape)}")
    if ce_weight is not None and ce_weight.device != x.device:  # the C API calls it class_weight
        raise ValueError(f"{op}: argument 'ce_weight' is on {ce_weight.device} but x is on {x.device}")
    check_options(op, ignore_index, label_smoothing, lse_square_scale, softcap, reduction)
    for arg, v in (("memory_budget", memory_budget), ("chunk_rows", chunk_rows)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"{op}: argument '{arg}' must be None or an int > 0, got {v!r}")
    if dw_accumulation not in DW_ACCUMULATION:
        raise ValueError(
            f"{op}: argument 'dw_accumulation' must be one of {sorted(DW_ACCUMULATION)}, got {dw_accumulation!r}"
        )


# ---- launchers: outputs and workspace from torch's allocator, the C API on torch's current stream -----------------


def _params(
    ignore_index,
    smoothing,
    z_scale,
    softcap,
    reduction,
    chunk_rows,
    memory_budget,
    dw_fp32,
    narrow=False,
    token_scaling=False,
):
    ce = CrossEntropyParams(ignore_index, smoothing, z_scale, softcap, reduction, int(token_scaling))
    return FusedLinearCrossEntropyParams(ce, chunk_rows, memory_budget, 0 if dw_fp32 else 1, int(narrow))


def chunk_plan(x: torch.Tensor, weight: torch.Tensor, chunk_rows: int = 0, memory_budget: int = 0) -> tuple[int, int]:
    """(workspace bytes, tokens per chunk) for x [N, H] and weight [V, H]: how the op will cut these tokens."""
    nbytes, rows = ctypes.c_size_t(), ctypes.c_int64()
    p = _params(-100, 0.0, 0.0, 0.0, 1, chunk_rows, memory_budget, True)
    _lib.check(_ws_size(_lib.tensor_arg(x), _lib.tensor_arg(weight), p, ctypes.byref(nbytes), ctypes.byref(rows)))
    return nbytes.value, rows.value


def _outputs(x, weight, bias, reduction: int, want_predicted: bool, need_dx: bool, need_dw: bool, need_db: bool):
    """(loss, z_loss, accuracy, predicted, dx, dw, db) as the op returns them; those not wanted are empty."""
    n, h, v = x.shape[0], x.shape[1], weight.shape[0]
    stat = lambda: x.new_empty(x.shape[:1] if reduction == _NONE else (), dtype=torch.float32)  # noqa: E731
    predicted = x.new_empty((n,) if want_predicted else (0,), dtype=torch.int64)
    dx = x.new_empty((n, h) if need_dx else (0, h))
    dw = weight.new_empty((v, h) if need_dw else (0, h))
    db = bias.new_empty((v,)) if need_db else weight.new_empty((0,))
    return stat(), stat(), stat(), predicted, dx, dw, db


def _fwd_impl(
    x,
    weight,
    bias,
    target,
    ce_weight,
    grad_output,
    ignore_index: int,
    smoothing: float,
    z_scale: float,
    softcap: float,
    reduction: int,
    token_scaling: bool,
    chunk_rows: int,
    memory_budget: int,
    dw_fp32: bool,
    want_predicted: bool,
    need_dx: bool,
    need_dw: bool,
    need_db: bool,
):
    params = _params(
        ignore_index,
        smoothing,
        z_scale,
        softcap,
        reduction,
        chunk_rows,
        memory_budget,
        dw_fp32,
        token_scaling=token_scaling,
    )
    nbytes, rows = ctypes.c_size_t(), ctypes.c_int64()
    _lib.check(_ws_size(_lib.tensor_arg(x), _lib.tensor_arg(weight), params, ctypes.byref(nbytes), ctypes.byref(rows)))
    loss, z_loss, acc, pred, dx, dw, db = _outputs(x, weight, bias, reduction, want_predicted, need_dx, False, need_db)
    dw_arg = None
    if need_dw:
        v, h = weight.shape
        several = rows.value < x.shape[0]
        if weight.dtype != torch.float32 and several and dw_fp32:
            # fp32 accumulation over the chunks, then narrowed in place: dW is the front half of the fp32 buffer
            dw_arg = torch.empty((v, h), dtype=torch.float32, device=weight.device)
            dw = dw_arg.view(-1).view(weight.dtype)[: v * h].view(v, h)
            params.narrow_dw = 1
        else:  # one chunk (one fp32 sum inside the GEMM), an fp32 weight, or rounding per chunk allowed
            dw = dw_arg = weight.new_empty((v, h))
    ws = torch.empty(nbytes.value, dtype=torch.uint8, device=x.device) if nbytes.value else None
    arg = _lib.tensor_arg
    _lib.check(
        _fwd(
            arg(x),
            arg(weight),
            arg(bias),
            arg(target),
            arg(ce_weight),
            arg(grad_output),
            arg(loss),
            arg(z_loss),
            arg(acc),
            arg(pred) if want_predicted else None,
            arg(dx) if need_dx else None,
            arg(dw_arg),
            arg(db) if need_db else None,
            params,
            None if ws is None else ws.data_ptr(),
            nbytes.value,
            _lib.stream_of(x),
        )
    )
    return loss, z_loss, acc, pred, dx, dw, db


def _scale_impl(dx, dw, db, grad_output) -> None:
    arg = lambda t: _lib.tensor_arg(t) if t.numel() else None  # noqa: E731  (empty: a gradient not wanted)
    _lib.check(_bwd(arg(dx), arg(dw), arg(db), _lib.tensor_arg(grad_output), _lib.stream_of(grad_output)))


# ---- torch.library registration ----------------------------------------------------------------------------------

_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define(
    "fused_linear_cross_entropy_fwd(Tensor x, Tensor weight, Tensor? bias, Tensor target, Tensor? ce_weight, "
    "Tensor? grad_output, int ignore_index, float label_smoothing, float lse_square_scale, float softcap, "
    "int reduction, bool token_scaling, int chunk_rows, int memory_budget, bool dw_fp32, "
    "bool want_predicted, bool need_dx, bool need_dw, bool need_db) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"
)
_LIB.define("fused_linear_cross_entropy_scale_(Tensor(a!) dx, Tensor(b!) dw, Tensor(c!) db, Tensor grad_output) -> ()")
for _key in ("CPU", "CUDA"):
    _LIB.impl("fused_linear_cross_entropy_fwd", _fwd_impl, _key)
    _LIB.impl("fused_linear_cross_entropy_scale_", _scale_impl, _key)


@torch.library.register_fake("tigon::fused_linear_cross_entropy_fwd")
def _fwd_fake(
    x,
    weight,
    bias,
    target,
    ce_weight,
    grad_output,
    ignore_index,
    label_smoothing,
    lse_square_scale,
    softcap,
    reduction,
    token_scaling,
    chunk_rows,
    memory_budget,
    dw_fp32,
    want_predicted,
    need_dx,
    need_dw,
    need_db,
):
    return _outputs(x, weight, bias, reduction, want_predicted, need_dx, need_dw, need_db)


@torch.library.register_fake("tigon::fused_linear_cross_entropy_scale_")
def _scale_fake(dx, dw, db, grad_output):
    return None


# ---- autograd -------------------------------------------------------------------------------------------------------


def _run(*args):
    if compiling():
        return torch.ops.tigon.fused_linear_cross_entropy_fwd(*args)
    return _fwd_impl(*args)


def _rows_of(x: torch.Tensor) -> torch.Tensor:
    """x [..., H] as the op's [N, H] rows (a view where the rows allow it)."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if rows_ok(x2) else x2.contiguous()


def _shaped(dx: torch.Tensor, shape) -> torch.Tensor:
    """The op's [N, H] input gradient in x's shape. Eagerly a tensor of its own over the same memory, not a view: the
    op consumes x whole (no reshape between it and the layer before), and that layer's backward then receives a
    gradient it can prove nobody else holds, so a norm writes its input gradient over it (the final norm of a
    patched model would otherwise copy a [tokens, hidden] gradient at the backward's peak)."""
    if dx.numel() == 0 or dx.shape == shape:
        return dx
    if compiling():
        return dx.view(shape)
    out = dx.new_empty(0)
    return out.set_(dx.untyped_storage(), dx.storage_offset(), shape, torch.empty(shape, device="meta").stride())


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        x,
        weight,
        bias,
        target,
        ce_weight,
        ignore_index,
        smoothing,
        z_scale,
        softcap,
        reduction,
        token_scaling,
        chunk_rows,
        memory_budget,
        dw_fp32,
        want_predicted,
        need_dx,
        need_dw,
        need_db,
    ):
        opts = (ignore_index, smoothing, z_scale, softcap, reduction, token_scaling, chunk_rows, memory_budget, dw_fp32)
        need = (need_dx, need_dw, need_db)
        ctx.need = need
        ctx.x_shape = x.shape
        ctx.recompute = any(need) and reduction == _NONE  # per-token upstream gradients: gradients in the backward
        now = need if not ctx.recompute else (False, False, False)
        x2 = _rows_of(x)
        loss, z_loss, acc, pred, dx, dw, db = _run(
            x2, weight, bias, target, ce_weight, None, *opts, want_predicted, *now
        )
        dx = _shaped(dx, x.shape)
        if ctx.recompute:
            ctx.opts = opts
            ctx.save_for_backward(x2, weight, bias, target, ce_weight)  # rows: backward reads no strides
        elif any(need):
            ctx.save_for_backward(dx, dw, db)
        ctx.mark_non_differentiable(z_loss, acc, pred)
        ctx.set_materialize_grads(False)  # no zero-filled gradients for z_loss and acc (they have none)
        return loss, z_loss, acc, pred

    @staticmethod
    def backward(ctx, grad_loss, grad_z_loss, grad_acc, grad_pred):
        if not any(ctx.need) or grad_loss is None:  # nothing needs a gradient, or the loss was not used
            return (None,) * 18
        grad_loss = grad_loss if grad_loss.dtype == torch.float32 else grad_loss.float()
        if ctx.recompute:
            x2, weight, bias, target, ce_weight = ctx.saved_tensors
            dx, dw, db = _run(x2, weight, bias, target, ce_weight, grad_loss, *ctx.opts, False, *ctx.need)[4:]
            dx = _shaped(dx, ctx.x_shape)
        else:
            dx, dw, db = ctx.saved_tensors  # ours: scaled where they lie (nothing to do for a grad_output of 1)
            torch.autograd.graph.increment_version((dx, dw, db))  # a second backward must raise, not rescale
            if compiling():
                torch.ops.tigon.fused_linear_cross_entropy_scale_(dx, dw, db, grad_loss)
            else:
                _scale_impl(dx, dw, db, grad_loss)
        need_dx, need_dw, need_db = ctx.need
        return ((dx if need_dx else None), (dw if need_dw else None), (db if need_db else None)) + (None,) * 15


def fused_linear_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ce_weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: float | None = None,
    reduction: str = "mean",
    return_z_loss: bool = False,
    return_token_accuracy: bool = False,
    memory_budget: int | None = None,
    chunk_rows: int | None = None,
    dw_accumulation: str = "fp32",
    return_predicted_tokens: bool = False,
    use_token_scaling: bool = False,
    check_targets: bool = False,
):
    """Cross entropy of the logits x @ weight.T + bias against target, without materialising the logits.

    x [..., H] (fp32, fp16 or bf16; any H), weight [V, H] and bias [V] in x's dtype, target x.shape[:-1] of int64 or
    int32. The cross-entropy options are tigon.ops.cross_entropy's (ce_weight is its class weight); the logits are
    computed in x's dtype, as x @ weight.T would give them. Under torch.autocast, x, weight and bias are first cast
    to the autocast dtype, as F.linear casts them (an fp32 weight keeps an fp32 gradient). Returns the loss ([...] for
    "none", else a scalar), plus the z-loss, the token accuracy and the predicted tokens (argmax, int64, shaped
    like target, -1 where ignored) when asked, in that order (none carries a gradient). use_token_scaling multiplies
    each token's loss by the model's probability of its target, detached, as tigon.ops.cross_entropy does.

    Tokens go through in chunks: as many per chunk as have logits within memory_budget bytes (default 1.5 GiB), or
    exactly chunk_rows. Gradients are summed in fp32; with dw_accumulation="weight" a 16-bit weight's gradient is
    instead accumulated in its own dtype over the chunks (rounded after each; with a single chunk both are the same).

    A target outside [0, V) that is not ignore_index raises on the CPU and gives a NaN loss on a GPU (checking would
    synchronise); check_targets=True checks first and raises a ValueError naming 'target' and the first bad value.
    """
    x, weight, bias = autocast_linear(x, weight, bias)
    _check_args(
        x,
        weight,
        target,
        bias,
        ce_weight,
        ignore_index,
        label_smoothing,
        lse_square_scale,
        softcap,
        reduction,
        memory_budget,
        chunk_rows,
        dw_accumulation,
    )
    if check_targets:
        check_target_values(target, weight.shape[0], ignore_index, "fused_linear_cross_entropy")
    if weight.stride(-1) != 1:
        weight = weight.contiguous()
    target2 = target.reshape(-1)
    if not target2.is_contiguous():
        target2 = target2.contiguous()
    if bias is not None and not bias.is_contiguous():
        bias = bias.contiguous()
    if ce_weight is not None:
        ce_weight = ce_weight.to(torch.float32).contiguous()
    grad_on = torch.is_grad_enabled()
    need = (
        grad_on and x.requires_grad,
        grad_on and weight.requires_grad,
        grad_on and bias is not None and bias.requires_grad,
    )
    loss, z_loss, acc, pred = _FusedLinearCrossEntropy.apply(
        x,  # whole: the reshape to rows happens inside, so its gradient reaches the layer before as a plain tensor
        weight,
        bias,
        target2,
        ce_weight,
        int(ignore_index),
        float(label_smoothing),
        float(lse_square_scale),
        float(softcap or 0.0),
        REDUCTIONS[reduction],
        bool(use_token_scaling),
        int(chunk_rows or 0),
        int(memory_budget or 0),
        dw_accumulation == "fp32",
        bool(return_predicted_tokens),
        *need,
    )
    if reduction == "none":
        loss, z_loss, acc = (t.view(target.shape) for t in (loss, z_loss, acc))
    if return_predicted_tokens:
        pred = pred.view(target.shape)
    return with_extras(loss, z_loss, acc, pred, return_z_loss, return_token_accuracy, return_predicted_tokens)
