"""Contrastive Preference Optimization (Xu et al., 2024, arXiv:2401.08417) and SimPO (Meng et al., 2024,
arXiv:2405.14734) from the hidden states, as drop-ins for Liger-Kernel's LigerFusedLinearCPOLoss and
LigerFusedLinearSimPOLoss. Both are reference-free; with the sequence log-probabilities c and r (summed, or averaged
when average_log_prob; SimPO always averages) and z = beta (c - r) - gamma (gamma = 0 for CPO),
  loss = mean_pairs( -(1 - ls) log s(z) - ls log s(-z) ) + alpha NLL,
the NLL being the chosen sequences' token-mean negative log-likelihood when compute_nll_loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.losses._paired import check_number, check_paired, check_tensor, paired_outputs, run_paired

__all__ = ["FusedLinearCPOLoss", "FusedLinearSimPOLoss"]


class _MarginLoss(torch.nn.Module):
    _OP = ""

    def __init__(self, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, compiled, average, gamma, chunk):
        super().__init__()
        op = self._OP
        self.beta = check_number(op, "beta", beta)
        self.alpha = check_number(op, "alpha", alpha)
        self.label_smoothing = check_number(op, "label_smoothing", label_smoothing)
        if not 0.0 <= self.label_smoothing <= 1.0:
            raise ValueError(f"{op}: argument 'label_smoothing' must lie in [0, 1], got {label_smoothing}")
        self.gamma = check_number(op, "gamma", gamma)
        self.ignore_index = int(ignore_index)
        self.compute_nll_loss = bool(compute_nll_loss)
        self.compiled = compiled
        self.average_log_prob = bool(average)
        self.chunk_size = chunk

    def forward(self, lin_weight, _input, target, bias=None):
        op = self._OP
        pairs = check_paired(op, _input, lin_weight, target)
        check_tensor(op, "bias", bias, optional=True)
        ls = self.label_smoothing

        def pair_loss(policy):
            z = self.beta * (policy.logps[:pairs] - policy.logps[pairs:]) - self.gamma
            return (-(1 - ls) * F.logsigmoid(z) - ls * F.logsigmoid(-z)).sum() / pairs

        loss, policy, nll = run_paired(self, _input, lin_weight, bias, target, pairs, self.average_log_prob, pair_loss)
        c, r = policy.logps[:pairs], policy.logps[pairs:]
        return paired_outputs(loss, nll, _input, lin_weight, bias, policy, pairs, self.beta * c, self.beta * r)


class FusedLinearCPOLoss(_MarginLoss):
    """forward(lin_weight, _input [2P, T, H], target [2P, T], bias=None) returns (loss, (chosen_logps,
    rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss, chosen_rewards, rejected_rewards)), Liger's
    outputs. compiled and chunk_size: accepted for Liger compatibility, unused."""

    _OP = "FusedLinearCPOLoss"

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        alpha: float = 1.0,
        label_smoothing: float = 0.0,
        compute_nll_loss: bool = True,
        compiled: bool = True,
        average_log_prob: bool = False,
        chunk_size: int = 1,
    ):
        super().__init__(
            ignore_index, beta, alpha, label_smoothing, compute_nll_loss, compiled, average_log_prob, 0.0, chunk_size
        )


class FusedLinearSimPOLoss(_MarginLoss):
    """forward(lin_weight, _input [2P, T, H], target [2P, T], bias=None): as FusedLinearCPOLoss, on token-mean
    log-probabilities with the margin gamma."""

    _OP = "FusedLinearSimPOLoss"

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        alpha: float = 1.0,
        label_smoothing: float = 0.0,
        compute_nll_loss: bool = True,
        compiled: bool = True,
        gamma: float = 0.5,
        chunk_size: int = 1,
    ):
        super().__init__(
            ignore_index, beta, alpha, label_smoothing, compute_nll_loss, compiled, True, gamma, chunk_size
        )
