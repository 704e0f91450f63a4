"""Distillation divergences as torch ops: tigon::distill_fwd (the loss and the student's gradient into a new buffer)
and distill_fwd_ (the gradient written over the student's logits); the backward is cross entropy's in-place scale.

kl_div, jsd and tvd compare log_softmax(student / T) with the teacher's distribution, given as logits (log_softmax
(teacher / T) is taken), log-probabilities or probabilities. As with cross entropy, the student's gradient is computed
in the forward and the backward only scales it by grad_output, reading nothing on the host: the step can be captured
in a CUDA graph. The teacher gets no gradient (it is frozen in distillation).
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import FLOAT_DTYPES, compiling, in_place_fwd, refuse_leaf
from tigon.ops.cross_entropy import _scale_impl as _ce_scale

__all__ = ["kl_div", "jsd", "tvd", "distill", "DISTILL_REDUCTIONS", "TEACHER_INPUTS", "DIVERGENCES"]

DIVERGENCES = {"kl": 0, "jsd": 1, "tvd": 2}
TEACHER_INPUTS = {"logits": 0, "log_probs": 1, "probs": 2}
DISTILL_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2, "batchmean": 3}


class DistillParams(ctypes.Structure):  # tigon_distill_params
    _fields_ = [
        ("divergence", ctypes.c_int32),
        ("teacher", ctypes.c_int32),
        ("reduction", ctypes.c_int32),
        ("beta", ctypes.c_float),
        ("temperature", ctypes.c_float),
        ("ignore_index", ctypes.c_int64),
    ]


_T = _lib.TENSOR_P
_fwd = _lib.declare(
    "tigon_distill_fwd", [_T, _T, _T, _T, _T, DistillParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
)


# ---- launchers ------------------------------------------------------------------------------------------------------


def _loss(student, reduction: int):
    return student.new_empty(student.shape[:1] if reduction == 0 else (), dtype=torch.float32)


def _launch(student, teacher, labels, grad, divergence, teacher_mode, reduction, beta, temperature, ignore_index):
    loss = _loss(student, reduction)
    ws, nbytes = None, 0
    if student.device.type == "cuda":
        nbytes = 4 * (4 + student.shape[0])  # distill::fwd_workspace_bytes
        ws = torch.empty(nbytes // 4, dtype=torch.float32, device=student.device)
    params = DistillParams(divergence, teacher_mode, reduction, beta, temperature, ignore_index)
    arg = _lib.tensor_arg
    _lib.check(
        _fwd(
            arg(student),
            arg(teacher),
            arg(labels),
            arg(loss),
            arg(grad),
            params,
            None if ws is None else ws.data_ptr(),
            nbytes,
            _lib.stream_of(student),
        )
    )
    return loss


def _fwd_impl(student, teacher, labels, *opts_and_need_grad):
    """opts: divergence, teacher_mode, reduction, beta, temperature, ignore_index; then need_grad."""
    *opts, need_grad = opts_and_need_grad
    shape = student.shape if need_grad else (0, student.shape[1])
    grad = torch.empty(shape, dtype=student.dtype, device=student.device)
    return _launch(student, teacher, labels, grad if need_grad else None, *opts), grad


def _fwd_inplace_impl(student, teacher, labels, *opts):
    return _launch(student, teacher, labels, student, *opts)


# ---- torch.library registration ----------------------------------------------------------------------------------

_LIB = torch.library.Library("tigon", "FRAGMENT")
_ARGS = (
    "Tensor? labels, int divergence, int teacher_mode, int reduction, float beta, float temperature, int ignore_index"
)
_LIB.define(f"distill_fwd(Tensor student, Tensor teacher, {_ARGS}, bool need_grad) -> (Tensor, Tensor)")
_LIB.define(f"distill_fwd_(Tensor(a!) student, Tensor teacher, {_ARGS}) -> Tensor")
for _key in ("CPU", "CUDA"):
    _LIB.impl("distill_fwd", _fwd_impl, _key)
    _LIB.impl("distill_fwd_", _fwd_inplace_impl, _key)


@torch.library.register_fake("tigon::distill_fwd")
def _fwd_fake(student, teacher, labels, divergence, teacher_mode, reduction, beta, temperature, ignore_index, need):
    return _loss(student, reduction), student.new_empty(student.shape if need else (0, student.shape[1]))


@torch.library.register_fake("tigon::distill_fwd_")
def _fwd_inplace_fake(student, teacher, labels, divergence, teacher_mode, reduction, beta, temperature, ignore_index):
    return _loss(student, reduction)


# ---- autograd -------------------------------------------------------------------------------------------------------


def scale_gradient(grad: torch.Tensor, grad_output: torch.Tensor) -> None:
    """grad *= grad_output in place (one scale, or one per row): cross entropy's backward kernel."""
    if compiling():
        torch.ops.tigon.cross_entropy_scale_(grad, grad_output)
    else:
        _ce_scale(grad, grad_output if grad_output.dtype == torch.float32 else grad_output.float())


class _Distill(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student, teacher, labels, opts, need_grad, in_place):
        if need_grad and in_place:
            if compiling():
                loss = torch.ops.tigon.distill_fwd_(student, teacher, labels, *opts)
            else:
                loss = _fwd_inplace_impl(student, teacher, labels, *opts)
            grad = student  # now holds the gradient
            ctx.mark_dirty(student)
        elif compiling():
            loss, grad = torch.ops.tigon.distill_fwd(student, teacher, labels, *opts, need_grad)
        else:
            loss, grad = _fwd_impl(student, teacher, labels, *opts, need_grad)
        if need_grad:
            ctx.save_for_backward(grad)
        overwritten = student if need_grad and in_place else None  # a dirty input must be returned
        if overwritten is None and compiling():  # torch < 2.7 cannot trace a None output
            overwritten = loss.new_empty(0)
        if overwritten is not None:
            ctx.mark_non_differentiable(overwritten)
        ctx.set_materialize_grads(False)
        return loss, overwritten

    @staticmethod
    def backward(ctx, grad_loss, grad_overwritten):
        if not ctx.saved_tensors or grad_loss is None:
            return (None,) * 6
        (grad,) = ctx.saved_tensors
        if not compiling():  # scaled below: a second backward (retain_graph) must raise, not scale it twice
            torch.autograd.graph.increment_version(grad)
        scale_gradient(grad, grad_loss)
        return (grad,) + (None,) * 5


def _check(op, student, teacher, labels, teacher_input, reduction, beta, temperature, ignore_index):
    """What the C API cannot see: Python types, the [N, V] shapes, the string options. Dtypes, strides, devices and the
    numbers' ranges: the C API, naming the argument."""
    for arg, t in (("student", student), ("teacher", teacher)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{arg}' must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{op}: argument '{arg}' must be [N, V], got shape {tuple(t.shape)}")
    if teacher.shape != student.shape:
        raise ValueError(
            f"{op}: argument 'teacher' must have the student's shape {tuple(student.shape)}, got {tuple(teacher.shape)}"
        )
    if labels is not None:
        if not isinstance(labels, torch.Tensor):
            raise TypeError(f"{op}: argument 'labels' must be a torch.Tensor or None, got {type(labels).__name__}")
        if labels.shape != student.shape[:1]:
            raise ValueError(f"{op}: argument 'labels' must be [N] ({student.shape[0]},), got {tuple(labels.shape)}")
    if teacher_input not in TEACHER_INPUTS:
        raise ValueError(
            f"{op}: argument 'teacher_input' must be one of {sorted(TEACHER_INPUTS)}, got {teacher_input!r}"
        )
    if not isinstance(reduction, str) or reduction not in DISTILL_REDUCTIONS:
        raise ValueError(f"{op}: argument 'reduction' must be one of {sorted(DISTILL_REDUCTIONS)}, got {reduction!r}")
    for arg, v in (("beta", beta), ("temperature", temperature)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{op}: argument '{arg}' must be a number, got {type(v).__name__}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: argument 'ignore_index' must be an int, got {type(ignore_index).__name__}")


def distill(
    student: torch.Tensor,
    teacher: torch.Tensor,
    divergence: str = "jsd",
    beta: float = 0.5,
    temperature: float = 1.0,
    teacher_input: str = "logits",
    labels: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "batchmean",
    in_place: bool = False,
) -> torch.Tensor:
    """The divergence ("kl", "jsd" or "tvd") between log_softmax(student / temperature) and the teacher's
    distribution; kl_div, jsd and tvd are this with their own defaults (see include/tigon/distill.h for the math).

    student [N, V] logits (fp32, fp16 or bf16; any row stride); teacher [N, V] (cast to the student's dtype) holding
    logits, log-probabilities or probabilities as teacher_input says. labels [N] (int64 or int32) and ignore_index:
    rows whose label is ignore_index contribute 0 and leave the means. reduction: "batchmean" (sum / kept rows), "sum",
    "mean" (sum / (kept rows * V), torch's elementwise mean) or "none" (one loss per row). The student's gradient is
    computed in the forward when it requires grad; in_place=True writes it over the student's logits (no [N, V]
    buffer; their values are lost, and a leaf that requires grad is refused). The teacher gets no gradient."""
    op = divergence if divergence in DIVERGENCES else "distill"
    _check(op, student, teacher, labels, teacher_input, reduction, beta, temperature, ignore_index)
    if divergence not in DIVERGENCES:
        raise ValueError(f"distill: argument 'divergence' must be one of {sorted(DIVERGENCES)}, got {divergence!r}")
    if in_place:
        refuse_leaf(student, "student", op)
    if teacher.dtype != student.dtype and teacher.dtype in FLOAT_DTYPES:
        teacher = teacher.to(student.dtype)
    teacher = teacher.detach()
    if labels is not None and not labels.is_contiguous():
        labels = labels.contiguous()
    need_grad = student.requires_grad and torch.is_grad_enabled()
    opts = (
        DIVERGENCES[divergence],
        TEACHER_INPUTS[teacher_input],
        DISTILL_REDUCTIONS[reduction],
        float(beta),
        float(temperature),
        int(ignore_index),
    )
    loss, _ = _Distill.apply(student, teacher, labels, opts, need_grad, in_place_fwd(bool(in_place)))
    return loss


def kl_div(
    input: torch.Tensor,
    target: torch.Tensor,
    reduction: str = "mean",
    log_target: bool = False,
    temperature: float = 1.0,
    teacher_input: str | None = None,
    labels: torch.Tensor | None = None,
    ignore_index: int = -100,
    in_place: bool = False,
) -> torch.Tensor:
    """torch.nn.functional.kl_div(log_softmax(input / temperature), target, reduction, log_target), KL(p || q) with p
    the target's distribution, from the student's logits (so the log_softmax is fused). target: probabilities
    (log_target=False) or log-probabilities (log_target=True), or the teacher's logits with teacher_input="logits"
    (log_softmax(target / temperature) is taken). reduction "none" is one loss per row (torch's is per element); the
    other options are distill's."""
    mode = teacher_input or ("log_probs" if log_target else "probs")
    return distill(input, target, "kl", 0.0, temperature, mode, labels, ignore_index, reduction, in_place)


def jsd(
    student: torch.Tensor,
    teacher: torch.Tensor,
    beta: float = 0.5,
    temperature: float = 1.0,
    labels: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "batchmean",
    teacher_input: str = "logits",
    in_place: bool = False,
) -> torch.Tensor:
    """The generalised Jensen-Shannon divergence of Liger-Kernel's JSD: with p the teacher's distribution and q the
    student's, beta = 0 gives KL(p || q), beta = 1 KL(q || p), otherwise beta KL(p || m) + (1 - beta) KL(q || m) with
    m = beta p + (1 - beta) q. The other options are distill's."""
    return distill(student, teacher, "jsd", beta, temperature, teacher_input, labels, ignore_index, reduction, in_place)


def tvd(
    student: torch.Tensor,
    teacher: torch.Tensor,
    temperature: float = 1.0,
    labels: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "batchmean",
    teacher_input: str = "logits",
    in_place: bool = False,
) -> torch.Tensor:
    """The total variation distance 0.5 sum |q - p| between the student's and the teacher's distributions. The other
    options are distill's."""
    return distill(student, teacher, "tvd", 0.5, temperature, teacher_input, labels, ignore_index, reduction, in_place)
