"""Knowledge distillation from the last hidden states of a student and a teacher, never holding either [N, V] logits
tensor: drop-ins for Liger-Kernel's LigerFusedLinearJSD (FusedLinearJSDLoss) and its chunked distillation losses
(FusedLinearDistillationLoss: a hard cross-entropy term plus a soft divergence term).

Per chunk of tokens (as many as keep the student's and the teacher's logits within memory_budget bytes together, the
chunk size tigon.ops.fused_linear_cross_entropy's planner gives for half the budget):
  s = x_s W_s^T (+ b_s)                          the student's logits, in its dtype
  t = x_t W_t^T (+ b_t)                          the teacher's, without autograd
  g_soft, soft = divergence(s / T, t / T)       tigon's distillation op, the gradient written over t
  g_hard, hard = cross_entropy(s, labels)       tigon's cross entropy, the gradient written over s
  g = w_soft g_soft + w_hard g_hard             one pass, over the teacher's buffer
  dx_s = g W_s,  dW_s += g^T x_s,  db_s += column sums of g (fp32)
Both terms are sums over the tokens whose label is not ignore_index, divided by their count (Liger's normalisation):
loss = (w_hard sum CE + w_soft sum divergence) / C. The teacher gets no gradient. The backward scales the saved
gradients by grad_output (nothing for a grad_output of 1). dW is accumulated in the weight's dtype (one rounding per
chunk, as Liger-Kernel and Tigon's preference losses hold it): an fp32 copy of an LLM head's dW (2.1 GB at 4096 x
128256) would double the loss's peak memory.
"""

from __future__ import annotations

import torch

from tigon import _lib
from tigon.losses._paired import check_choice, check_number, check_tensor
from tigon.ops.cross_entropy import _launch as _ce_launch
from tigon.ops.distill import DIVERGENCES, TEACHER_INPUTS, _launch as _distill_launch, scale_gradient
from tigon.ops.fused_linear_cross_entropy import chunk_plan

__all__ = ["FusedLinearJSDLoss", "FusedLinearDistillationLoss", "fused_linear_distillation"]

_SUM = 2  # the ops' reduction code for "sum"
# Bytes of the two models' logits per chunk. The loss's peak is dW, dX and one chunk of both logits: at 8192 tokens x
# 4096 x 128256 (bf16) a 1.5 GiB budget (3 chunks) peaked at 3.00 GiB against Liger-Kernel's 2.14; each chunk more
# costs one more read and write of dW (~2 GB), ~1% of the loss's time here.
DEFAULT_MEMORY_BUDGET = 1 << 30


def _linear(x, w, b):
    out = x @ w.t()
    return out if b is None else out.add_(b)


class _FusedLinearDistill(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xs, ws, bs, xt, wt, bt, labels, opts):
        (divergence, beta, temperature, ignore_index, w_hard, w_soft, chunk_rows, budget, need) = opts
        need_dx, need_dw, need_db = need
        n, v = xs.shape[0], ws.shape[0]
        if not chunk_rows:
            # Two chunk-sized buffers (the student's and the teacher's logits) share the budget.
            chunk_rows = max(1, chunk_plan(xs, ws, memory_budget=max(1, budget // 2))[1])
        keep = labels != ignore_index if labels is not None else None
        count = keep.sum().to(torch.float32) if keep is not None else torch.tensor(float(n), device=xs.device)
        soft_on, hard_on = w_soft != 0.0, w_hard != 0.0 and labels is not None
        # g = lead * (g_soft + ratio * g_hard): the soft term's buffer takes the hard term in one pass.
        lead = w_soft if soft_on else w_hard
        ratio = w_hard / w_soft if soft_on else 1.0
        total = torch.zeros((), dtype=torch.float32, device=xs.device)
        dx = torch.empty_like(xs) if need_dx else None
        dw = torch.zeros_like(ws) if need_dw else None
        db = torch.zeros(v, dtype=torch.float32, device=ws.device) if need_db else None
        for start in range(0, n, chunk_rows):
            rows = slice(start, min(n, start + chunk_rows))
            lab = labels[rows] if labels is not None else None
            s = _linear(xs[rows], ws, bs)
            g = None
            if soft_on:
                t = _linear(xt[rows], wt, bt).to(s.dtype)
                grad = t if any(need) else None  # the soft gradient over the teacher's logits
                soft = _distill_launch(
                    s,
                    t,
                    lab,
                    grad,
                    DIVERGENCES[divergence],
                    TEACHER_INPUTS["logits"],
                    _SUM,
                    beta,
                    temperature,
                    ignore_index,
                )
                total += w_soft * soft
                g = grad
            if hard_on:
                hard = _ce_launch(
                    s, lab, None, s if any(need) else None, ignore_index, 0.0, 0.0, 0.0, _SUM, False, False
                )[0]
                total += w_hard * hard
                g = s if g is None else g.add_(s, alpha=ratio)
            if g is None:
                continue
            if need_dx:
                torch.mm(g, ws, out=dx[rows])
            if need_dw:
                dw.addmm_(g.t(), xs[rows])
            if need_db:
                db += g.sum(0, dtype=torch.float32)
        s = t = g = grad = None  # the last chunk's logits go before the gradients are finished
        scale = lead / count  # every gradient: lead * (...) / C
        if need_dx:
            dx.mul_(scale)
        if need_dw:
            dw.mul_(scale)
        if need_db:
            db = (db * scale).to(bs.dtype)
        ctx.need = need
        ctx.save_for_backward(dx, dw, db)
        return total / count

    @staticmethod
    def backward(ctx, grad_loss):
        dx, dw, db = ctx.saved_tensors
        if grad_loss is None:
            return (None,) * 8
        torch.autograd.graph.increment_version(tuple(t for t in (dx, dw, db) if t is not None))
        for t in (dx, dw, db):  # ours: scaled where they lie (nothing to do for a grad_output of 1)
            if t is not None:
                scale_gradient(t.view(-1, t.shape[-1]), grad_loss.reshape(()))
        return dx, dw, db, None, None, None, None, None


def fused_linear_distillation(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    labels: torch.Tensor | None = None,
    student_bias: torch.Tensor | None = None,
    teacher_bias: torch.Tensor | None = None,
    divergence: str = "jsd",
    beta: float = 0.5,
    temperature: float = 1.0,
    ignore_index: int = -100,
    weight_hard_loss: float = 0.0,
    weight_soft_loss: float = 1.0,
    memory_budget: int | None = None,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """(weight_hard_loss * sum CE(student logits, labels) + weight_soft_loss * sum divergence(student / T, teacher / T))
    / C over the C tokens whose label is not ignore_index (every token without labels; then no hard term), from
    student_input [..., Hs] with student_weight [V, Hs] and teacher_input [..., Ht] with teacher_weight [V, Ht],
    never holding the [N, V] logits of either. divergence: "kl" (KL(teacher || student)), "jsd" (generalised, beta) or
    "tvd". Differentiable in the student's input, weight and bias (dW accumulated in the weight's dtype); the teacher
    gets no gradient. memory_budget: bytes of the two models' logits per chunk (default 1 GiB); chunk_rows fixes the
    chunk."""
    op = "fused_linear_distillation"
    for name, t in (
        ("student_input", student_input),
        ("student_weight", student_weight),
        ("teacher_input", teacher_input),
        ("teacher_weight", teacher_weight),
    ):
        check_tensor(op, name, t)
    check_tensor(op, "labels", labels, optional=True)
    check_choice(op, "divergence", divergence, DIVERGENCES)
    check_number(op, "beta", beta, 0.0)
    if not beta <= 1.0:
        raise ValueError(f"{op}: argument 'beta' must lie in [0, 1], got {beta}")
    check_number(op, "temperature", temperature, 0.0, strict=True)
    w_hard = check_number(op, "weight_hard_loss", weight_hard_loss)
    w_soft = check_number(op, "weight_soft_loss", weight_soft_loss)
    xs = student_input.reshape(-1, student_input.shape[-1])
    xt = teacher_input.reshape(-1, teacher_input.shape[-1])
    v = student_weight.shape[0]
    if student_weight.dim() != 2 or student_weight.shape[1] != xs.shape[1]:
        raise ValueError(
            f"{op}: argument 'student_weight' must be [V, {xs.shape[1]}], got {tuple(student_weight.shape)}"
        )
    if teacher_weight.dim() != 2 or teacher_weight.shape != (v, xt.shape[1]):
        raise ValueError(
            f"{op}: argument 'teacher_weight' must be [{v}, {xt.shape[1]}] (the student's vocabulary), "
            f"got {tuple(teacher_weight.shape)}"
        )
    if xt.shape[0] != xs.shape[0]:
        raise ValueError(
            f"{op}: argument 'teacher_input' must have the student's {xs.shape[0]} tokens, got {xt.shape[0]}"
        )
    if labels is not None:
        if labels.numel() != xs.shape[0]:
            raise ValueError(
                f"{op}: argument 'labels' must have one label per token ({xs.shape[0]}), got shape "
                f"{tuple(labels.shape)}"
            )
        labels = labels.reshape(-1).contiguous()
    grad_on = torch.is_grad_enabled()
    need = (
        grad_on and student_input.requires_grad,
        grad_on and student_weight.requires_grad,
        grad_on and student_bias is not None and student_bias.requires_grad,
    )
    opts = (
        divergence,
        float(beta),
        float(temperature),
        int(ignore_index),
        w_hard,
        w_soft,
        int(chunk_rows or 0),
        int(memory_budget or DEFAULT_MEMORY_BUDGET),
        need,
    )
    with torch.no_grad():  # the teacher is frozen
        xt, teacher_weight = xt.detach(), teacher_weight.detach()
        teacher_bias = None if teacher_bias is None else teacher_bias.detach()
    _lib.stream_of(xs)  # the one-time CPU-path warning, as the ops give it
    return _FusedLinearDistill.apply(xs, student_weight, student_bias, xt, teacher_weight, teacher_bias, labels, opts)


class FusedLinearJSDLoss(torch.nn.Module):
    """Liger's LigerFusedLinearJSD: FusedLinearJSDLoss(jsd_beta=0.5, ignore_index=-100, temperature=1.0),
    forward(student_input [N, Hs], student_weight [V, Hs], teacher_input [N, Ht], teacher_weight [V, Ht],
    shift_labels=None): the generalised JSD (beta 0: KL(teacher || student), 1: KL(student || teacher)) of the two
    models' distributions at the temperature, summed over the tokens whose label is not ignore_index and divided by
    their count."""

    def __init__(self, jsd_beta: float = 0.5, ignore_index: int = -100, temperature: float = 1.0):
        super().__init__()
        self.jsd_beta = jsd_beta
        self.ignore_index = ignore_index
        self.temperature = temperature

    def forward(self, student_input, student_weight, teacher_input, teacher_weight, shift_labels=None):
        return fused_linear_distillation(
            student_input,
            student_weight,
            teacher_input,
            teacher_weight,
            shift_labels,
            divergence="jsd",
            beta=self.jsd_beta,
            temperature=self.temperature,
            ignore_index=self.ignore_index,
        )


class FusedLinearDistillationLoss(torch.nn.Module):
    """The hard + soft distillation loss of Liger's chunked distillation losses (LigerFusedLinearJSDLoss and its
    kin) and TRL's: FusedLinearDistillationLoss(weight_hard_loss=0.5, weight_soft_loss=0.5, beta=0.5,
    ignore_index=-100, temperature=1.0, compiled=True, chunk_size=1024, divergence="jsd", memory_budget=None),
    forward(student_input, student_weight, teacher_input, teacher_weight, true_labels, student_bias=None,
    teacher_bias=None) = (weight_hard_loss * CE + weight_soft_loss * divergence), each summed over the tokens whose
    label is not ignore_index and divided by their count; the cross entropy on the student's logits, the divergence at
    the temperature. compiled and chunk_size are accepted for Liger compatibility and unused (the chunks follow
    memory_budget)."""

    def __init__(
        self,
        weight_hard_loss: float = 0.5,
        weight_soft_loss: float = 0.5,
        beta: float = 0.5,
        ignore_index: int = -100,
        temperature: float = 1.0,
        compiled: bool = True,
        chunk_size: int = 1024,
        divergence: str = "jsd",
        memory_budget: int | None = None,
    ):
        super().__init__()
        check_choice("FusedLinearDistillationLoss", "divergence", divergence, DIVERGENCES)
        self.weight_hard_loss = weight_hard_loss
        self.weight_soft_loss = weight_soft_loss
        self.beta = beta
        self.ignore_index = ignore_index
        self.temperature = temperature
        self.compiled = compiled
        self.chunk_size = chunk_size
        self.divergence = divergence
        self.memory_budget = memory_budget

    def forward(
        self,
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        true_labels,
        student_bias=None,
        teacher_bias=None,
    ):
        return fused_linear_distillation(
            student_input,
            student_weight,
            teacher_input,
            teacher_weight,
            true_labels,
            student_bias,
            teacher_bias,
            divergence=self.divergence,
            beta=self.beta,
            temperature=self.temperature,
            ignore_index=self.ignore_index,
            weight_hard_loss=self.weight_hard_loss,
            weight_soft_loss=self.weight_soft_loss,
            memory_budget=self.memory_budget,
        )
