"""Distillation loss modules with Liger-Kernel's call signatures (LigerKLDIVLoss, LigerJSD, LigerTVDLoss), so a Liger
user changes an import.

Liger's modules take the student's distribution (log-probabilities for KL and JSD, probabilities for TVD); Tigon's
kernels take logits and apply log_softmax themselves, which leaves log-probabilities unchanged. The losses are Liger's;
the gradient of the student's input differs from Liger's by a constant per row (Tigon's is the one of logits), which
the log_softmax (or softmax) that produced the input removes: the gradients of everything before it are the same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tigon.ops.distill import jsd, kl_div, tvd

__all__ = ["KLDivLoss", "JSD", "TVDLoss"]


class KLDivLoss(nn.KLDivLoss):
    """LigerKLDIVLoss: KLDivLoss(eps=1e-10, size_average=None, reduce=None, reduction="mean", log_target=False),
    forward(y_pred, y_true) with y_pred the student's log-probabilities [N, V] and y_true the teacher's probabilities
    (log-probabilities with log_target=True). reduction="none" returns torch's per-element losses (computed by torch);
    eps is accepted and unused (a probability of 0 contributes 0)."""

    def __init__(self, eps: float = 1e-10, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.eps = eps

    def forward(self, y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
        if self.reduction == "none":
            return F.kl_div(y_pred, y_true, reduction="none", log_target=self.log_target)
        return kl_div(y_pred, y_true, reduction=self.reduction, log_target=self.log_target)


class JSD(nn.Module):
    """LigerJSD: JSD(beta=0.5, ignore_index=-100), forward(log_q, log_p, shift_labels=None): the generalised JSD of
    the student's log-probabilities log_q and the teacher's log_p [N, V], summed and divided by the rows whose label is
    not ignore_index (every row without labels)."""

    def __init__(self, beta: float = 0.5, ignore_index: int = -100):
        super().__init__()
        self.beta = beta
        self.ignore_index = ignore_index

    def forward(self, log_q: torch.Tensor, log_p: torch.Tensor, shift_labels: torch.Tensor | None = None):
        return jsd(
            log_q, log_p, self.beta, labels=shift_labels, ignore_index=self.ignore_index, teacher_input="log_probs"
        )


class TVDLoss(nn.Module):
    """LigerTVDLoss: TVDLoss(reduction="batchmean", ignore_index=-100), forward(p, q, shift_labels=None): the total
    variation distance 0.5 sum |p - q| of the student's probabilities p and the teacher's q [N, V]. The kernel takes
    p's logarithm as the student's logits (p is clamped at 1e-30 first: a probability of exactly 0 gets no gradient);
    reduction="none" returns the per-element distances (computed by torch)."""

    def __init__(self, reduction: str = "batchmean", ignore_index: int = -100):
        super().__init__()
        self.reduction = reduction
        self.ignore_index = ignore_index

    def forward(self, p: torch.Tensor, q: torch.Tensor, shift_labels: torch.Tensor | None = None):
        if self.reduction == "none":
            out = 0.5 * (p - q).abs()
            if shift_labels is not None:
                out = out * (shift_labels != self.ignore_index).unsqueeze(-1)
            return out
        logits = p.clamp_min(1e-30).log()
        return tvd(
            logits,
            q,
            labels=shift_labels,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            teacher_input="probs",
        )
