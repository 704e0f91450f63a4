"""Cross entropy as torch ops: tigon::cross_entropy_fwd (gradient into a new buffer), cross_entropy_fwd_ (gradient
written over the logits) and cross_entropy_scale_ (the backward: gradient times grad_output, in place).

The gradient is computed in the forward whenever the logits require it, so the backward only scales it; the mean's
denominator and the scale are read on the device, so nothing synchronises and the whole step can be captured in a
CUDA graph. autograd lives outside the ops in an autograd.Function: in eager mode it calls the ctypes launchers
directly, under torch.compile the registered ops.
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import compiling, in_place_fwd, refuse_leaf

__all__ = ["cross_entropy", "REDUCTIONS"]

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


class CrossEntropyParams(ctypes.Structure):  # tigon_cross_entropy_params
    _fields_ = [
        ("ignore_index", ctypes.c_int64),
        ("label_smoothing", ctypes.c_float),
        ("lse_square_scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("reduction", ctypes.c_int32),
        ("token_scaling", ctypes.c_int32),
    ]


_T = _lib.TENSOR_P
_fwd = _lib.declare(
    "tigon_cross_entropy_fwd",
    [_T, _T, _T, _T, _T, _T, _T, _T, CrossEntropyParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p],
)
_bwd = _lib.declare("tigon_cross_entropy_bwd", [_T, _T, ctypes.c_void_p])

_NONE = REDUCTIONS["none"]


def check_options(op: str, ignore_index, label_smoothing, lse_square_scale, softcap, reduction) -> None:
    """The loss options cross entropy and fused linear + cross entropy share, each error naming its argument."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: argument 'ignore_index' must be an int, got {type(ignore_index).__name__}")
    # label_smoothing and lse_square_scale: the C API checks them. softcap: None is the C API's 0, so 0 is refused here.
    if softcap is not None and not 0.0 < softcap < float("inf"):
        raise ValueError(f"{op}: argument 'softcap' must be None or finite and > 0, got {softcap}")
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"{op}: argument 'reduction' must be one of {sorted(REDUCTIONS)}, got {reduction!r}")


def check_target_values(target: torch.Tensor, classes: int, ignore_index: int, op: str) -> None:
    """check_targets=True: every target is ignore_index or in [0, classes). One reduction and one read of it on the
    host (a synchronisation, hence opt-in); under torch.compile a device-side assert instead, so nothing breaks the
    graph (on a GPU a failed device assert ends the process's CUDA context: use it eagerly while debugging)."""
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    if compiling():
        torch._assert_async(
            ~bad.any(),
            f"{op}: argument 'target' has a value outside [0, {classes}) that is not ignore_index ({ignore_index})",
        )
        return
    if bad.any().item():
        row = int(bad.reshape(-1).nonzero()[0])
        raise ValueError(
            f"{op}: argument 'target' has a value outside [0, {classes}) that is not ignore_index "
            f"({ignore_index}): target.view(-1)[{row}] = {int(target.reshape(-1)[row])}"
        )


def _check_args(logits, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, reduction):
    """What the C API cannot see: Python types, the [N, V] / [N] shapes of this function (the C API reads any
    [..., V] as rows) and the Python-only options. Dtypes, sizes, strides and devices: the C API, naming the argument."""
    op = "cross_entropy"
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{op}: argument 'logits' must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() != 2:
        raise ValueError(f"{op}: argument 'logits' must be [N, V], got shape {tuple(logits.shape)}")
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{op}: argument 'target' must be a torch.Tensor, got {type(target).__name__}")
    if target.dim() != 1:
        raise ValueError(
            f"{op}: argument 'target' must be [N] ({logits.shape[0]},) to match logits, got {tuple(target.shape)}"
        )
    if weight is not None:  # converted to float32 below, so its dtype must be a float one
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"{op}: argument 'weight' must be a torch.Tensor or None, got {type(weight).__name__}")
        if not weight.is_floating_point():
            raise TypeError(f"{op}: argument 'weight' must be a floating-point tensor, got {weight.dtype}")
    check_options(op, ignore_index, label_smoothing, lse_square_scale, softcap, reduction)


# ---- launchers: outputs and workspace from torch's allocator, the C API on torch's current stream -----------------


def _outputs(logits, reduction: int, want_predicted: bool):
    """loss, z_loss, accuracy, and the predicted tokens (one int64 per row; empty when not wanted)."""
    shape = logits.shape[:1] if reduction == _NONE else ()
    new = lambda: logits.new_empty(shape, dtype=torch.float32)  # noqa: E731
    predicted = logits.new_empty(logits.shape[:1] if want_predicted else (0,), dtype=torch.int64)
    return new(), new(), new(), predicted


def _workspace(logits):
    if logits.device.type != "cuda":
        return None, 0
    nbytes = 4 * (4 + 3 * logits.shape[0])  # cross_entropy::fwd_workspace_bytes
    return torch.empty(nbytes // 4, dtype=torch.float32, device=logits.device), nbytes


def _launch(
    logits, target, weight, grad, ignore_index, smoothing, z_scale, softcap, reduction, token_scaling, want_predicted
):
    loss, z_loss, acc, predicted = _outputs(logits, reduction, want_predicted)
    ws, nbytes = _workspace(logits)
    _lib.check(
        _fwd(
            _lib.tensor_arg(logits),
            _lib.tensor_arg(target),
            _lib.tensor_arg(weight),
            _lib.tensor_arg(loss),
            _lib.tensor_arg(z_loss),
            _lib.tensor_arg(acc),
            _lib.tensor_arg(predicted) if want_predicted else None,
            _lib.tensor_arg(grad),
            CrossEntropyParams(ignore_index, smoothing, z_scale, softcap, reduction, int(token_scaling)),
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(logits),
        )
    )
    return loss, z_loss, acc, predicted


def _fwd_impl(
    logits,
    target,
    weight,
    ignore_index: int,
    smoothing: float,
    z_scale: float,
    softcap: float,
    reduction: int,
    token_scaling: bool,
    want_predicted: bool,
    need_grad: bool,
):
    grad = torch.empty(logits.shape if need_grad else (0, logits.shape[1]), dtype=logits.dtype, device=logits.device)
    outs = _launch(
        logits,
        target,
        weight,
        grad if need_grad else None,
        ignore_index,
        smoothing,
        z_scale,
        softcap,
        reduction,
        token_scaling,
        want_predicted,
    )
    return (*outs, grad)


def _fwd_inplace_impl(
    logits,
    target,
    weight,
    ignore_index: int,
    smoothing: float,
    z_scale: float,
    softcap: float,
    reduction: int,
    token_scaling: bool,
    want_predicted: bool,
):
    return _launch(
        logits,
        target,
        weight,
        logits,
        ignore_index,
        smoothing,
        z_scale,
        softcap,
        reduction,
        token_scaling,
        want_predicted,
    )


def _scale_impl(grad, grad_output) -> None:
    _lib.check(_bwd(_lib.tensor_arg(grad), _lib.tensor_arg(grad_output), _lib.stream_of(grad)))


# ---- torch.library registration ----------------------------------------------------------------------------------

_LIB = torch.library.Library("tigon", "FRAGMENT")
_ARGS = (
    "Tensor? weight, int ignore_index, float label_smoothing, float lse_square_scale, float softcap, "
    "int reduction, bool token_scaling, bool want_predicted"
)
_LIB.define(
    f"cross_entropy_fwd(Tensor logits, Tensor target, {_ARGS}, bool need_grad) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)"
)
_LIB.define(f"cross_entropy_fwd_(Tensor(a!) logits, Tensor target, {_ARGS}) -> (Tensor, Tensor, Tensor, Tensor)")
_LIB.define("cross_entropy_scale_(Tensor(a!) grad, Tensor grad_output) -> ()")
for _key in ("CPU", "CUDA"):
    _LIB.impl("cross_entropy_fwd", _fwd_impl, _key)
    _LIB.impl("cross_entropy_fwd_", _fwd_inplace_impl, _key)
    _LIB.impl("cross_entropy_scale_", _scale_impl, _key)


@torch.library.register_fake("tigon::cross_entropy_fwd")
def _fwd_fake(
    logits,
    target,
    weight,
    ignore_index,
    label_smoothing,
    lse_square_scale,
    softcap,
    reduction,
    token_scaling,
    want_predicted,
    need_grad,
):
    grad = logits.new_empty(logits.shape if need_grad else (0, logits.shape[1]))
    return (*_outputs(logits, reduction, want_predicted), grad)


@torch.library.register_fake("tigon::cross_entropy_fwd_")
def _fwd_inplace_fake(
    logits,
    target,
    weight,
    ignore_index,
    label_smoothing,
    lse_square_scale,
    softcap,
    reduction,
    token_scaling,
    want_predicted,
):
    return _outputs(logits, reduction, want_predicted)


@torch.library.register_fake("tigon::cross_entropy_scale_")
def _scale_fake(grad, grad_output):
    return None


# ---- autograd -------------------------------------------------------------------------------------------------------


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        logits,
        target,
        weight,
        ignore_index,
        smoothing,
        z_scale,
        softcap,
        reduction,
        token_scaling,
        want_predicted,
        need_grad,
        in_place,
    ):
        opts = (ignore_index, smoothing, z_scale, softcap, reduction, token_scaling, want_predicted)
        if need_grad and in_place:
            if compiling():
                loss, z_loss, acc, pred = torch.ops.tigon.cross_entropy_fwd_(logits, target, weight, *opts)
            else:
                loss, z_loss, acc, pred = _fwd_inplace_impl(logits, target, weight, *opts)
            grad = logits  # now holds the gradient; the logits' values are gone
            # A new version for autograd: whatever saved the logits before now raises instead of reading gradients.
            ctx.mark_dirty(logits)
        elif compiling():
            loss, z_loss, acc, pred, grad = torch.ops.tigon.cross_entropy_fwd(logits, target, weight, *opts, need_grad)
        else:
            loss, z_loss, acc, pred, grad = _fwd_impl(logits, target, weight, *opts, need_grad)
        if need_grad:
            ctx.save_for_backward(grad)
        overwritten = logits if need_grad and in_place else None  # a dirty input must be returned
        if overwritten is None and compiling():  # torch < 2.7 cannot trace a None output
            overwritten = loss.new_empty(0)
        ctx.mark_non_differentiable(*(t for t in (z_loss, acc, pred, overwritten) if t is not None))
        # No zero-filled gradients for z_loss and acc (they have none): two kernel launches less per backward.
        ctx.set_materialize_grads(False)
        return loss, z_loss, acc, pred, overwritten

    @staticmethod
    def backward(ctx, grad_loss, grad_z_loss, grad_acc, grad_pred, grad_overwritten):
        if not ctx.saved_tensors or grad_loss is None:  # the logits need no gradient, or the loss was not used
            return (None,) * 12
        (grad,) = ctx.saved_tensors
        if not compiling():  # scaled below: a second backward (retain_graph) must raise, not scale it twice
            torch.autograd.graph.increment_version(grad)
        # The gradient buffer is ours (or the logits', given up by in_place): scale it where it lies.
        if compiling():
            torch.ops.tigon.cross_entropy_scale_(grad, grad_loss)
        else:
            _scale_impl(grad, grad_loss if grad_loss.dtype == torch.float32 else grad_loss.float())
        return (grad,) + (None,) * 11


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: float | None = None,
    reduction: str = "mean",
    return_z_loss: bool = False,
    return_token_accuracy: bool = False,
    in_place: bool = False,
    return_predicted_tokens: bool = False,
    use_token_scaling: bool = False,
    check_targets: bool = False,
):
    """Cross entropy of [N, V] logits (fp32, fp16 or bf16; any row stride) against int64 or int32 targets.

    Matches torch.nn.functional.cross_entropy where the options overlap (class weights, ignore_index, label
    smoothing, reductions; the mean divides by the weight sum of the non-ignored targets and is NaN when every target
    is ignored). Extras: lse_square_scale adds the z-loss lse_square_scale * logsumexp^2 per non-ignored token
    (divided by the token count for "mean"), softcap applies softcap * tanh(logits / softcap) first (Gemma 2),
    return_z_loss / return_token_accuracy also return the z-loss and the share of non-ignored tokens whose argmax is
    the target (per token for "none", ignored tokens 0). Those two carry no gradient.
    return_predicted_tokens also returns each row's argmax over the logits (int64, one per row whatever the
    reduction; -1 for ignored rows, which are never read). use_token_scaling multiplies each token's loss (its
    z-loss too, and the reported z-loss) by the model's probability of its target, softmax(softcapped logits)[target],
    taken as a constant by the gradient. The extras come back in the order loss, z_loss, token accuracy, predicted
    tokens, each only when asked.

    The gradient is computed in the forward when the logits require it. in_place=True writes it over the logits
    (saves an [N, V] buffer; the logits' values are lost, so do not reuse them: read the accuracy through
    return_token_accuracy). The logits are marked modified, so an op that saved them for its backward raises torch's
    in-place error instead of using the gradient; a leaf that requires grad is refused. Under torch.compile with
    torch < 2.15 it runs out of place (those versions traced the in-place form over a saved tensor wrongly). A non-ignored target outside
    [0, V) raises on the CPU; on a GPU, where checking would synchronise, it makes that row's loss and gradient NaN:
    check_targets=True checks first (one synchronisation) and raises a ValueError naming 'target' and the first bad
    row and value.
    """
    _check_args(logits, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, reduction)
    if in_place:
        refuse_leaf(logits, "logits", "cross_entropy")
    if check_targets:
        check_target_values(target, logits.shape[1], ignore_index, "cross_entropy")
    if weight is not None and weight.dtype != torch.float32:
        weight = weight.float()
    if weight is not None and not weight.is_contiguous():
        weight = weight.contiguous()
    if not target.is_contiguous():
        target = target.contiguous()
    need_grad = logits.requires_grad and torch.is_grad_enabled()
    loss, z_loss, acc, pred, _ = _CrossEntropy.apply(
        logits,
        target,
        weight,
        int(ignore_index),
        float(label_smoothing),
        float(lse_square_scale),
        float(softcap or 0.0),
        REDUCTIONS[reduction],
        bool(use_token_scaling),
        bool(return_predicted_tokens),
        need_grad,
        in_place_fwd(bool(in_place)),
    )
    return with_extras(loss, z_loss, acc, pred, return_z_loss, return_token_accuracy, return_predicted_tokens)


def with_extras(loss, z_loss, acc, pred, return_z_loss, return_token_accuracy, return_predicted_tokens):
    """The loss alone, or a tuple of it and the extras asked for, in their fixed order."""
    if not (return_z_loss or return_token_accuracy or return_predicted_tokens):
        return loss
    return (
        (loss,)
        + ((z_loss,) if return_z_loss else ())
        + ((acc,) if return_token_accuracy else ())
        + ((pred,) if return_predicted_tokens else ())
    )
