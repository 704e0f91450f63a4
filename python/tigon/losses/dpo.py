"""Direct Preference Optimization (Rafailov et al., 2023, arXiv:2305.18290) and its variants from the hidden states,
as a drop-in for Liger-Kernel's LigerFusedLinearDPOLoss (same constructor and forward arguments, same outputs).

With chosen/rejected log-ratios c = log pi(y_w|x) - log pi_ref(y_w|x), r likewise for y_l, and d = beta (c - r),
each pair's loss is (TRL's DPOTrainer formulas):
  sigmoid     -(1 - ls) log s(d) - ls log s(-d)   (ls = label_smoothing: conservative DPO; 0: the paper's loss)
  robust      (-(1 - ls) log s(d) + ls log s(-d)) / (1 - 2 ls)
  hinge       relu(1 - d)
  ipo         (c/|y_w| - r/|y_l| - 1/(2 beta))^2   (per-token log-ratios; already so when average_log_prob)
  exo_pair    s(d) (log s(d) - log(1 - ls)) + s(-d) (log s(-d) - log ls)
  nca_pair    -log s(beta c) - (log s(-beta c) + log s(-beta r)) / 2
  bco_pair    -log s(beta c) - log s(-beta r)
  sppo_hard   (c - 1/(2 beta))^2 + (r + 1/(2 beta))^2
  apo_zero    1 - s(beta c) + s(beta r)
  apo_down    s(beta c) + 1 - s(d)
  discopop    -log s(d) (1 - m) + exp(-d) m,  m = s(d / discopop_tau)
where s is the sigmoid. The loss is the mean over pairs, plus alpha times the chosen sequences' token-mean NLL
when compute_nll_loss.

Liger 0.8.5 differs in two places: its sigmoid ignores label_smoothing and it has no ipo.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tigon.losses._paired import (
    check_choice,
    check_number,
    check_paired,
    check_reference,
    check_tensor,
    paired_outputs,
    reference_log_probs,
    run_paired,
)

__all__ = ["FusedLinearDPOLoss", "DPO_LOSS_TYPES", "dpo_pair_losses"]

DPO_LOSS_TYPES = (
    "sigmoid",
    "robust",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "bco_pair",
    "sppo_hard",
    "apo_zero",
    "apo_down",
    "discopop",
)
_OP = "FusedLinearDPOLoss"


def dpo_pair_losses(
    chosen_logratios: torch.Tensor,
    rejected_logratios: torch.Tensor,
    beta: float,
    loss_type: str,
    label_smoothing: float = 0.0,
    discopop_tau: float = 0.05,
    chosen_tokens: torch.Tensor | None = None,
    rejected_tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each pair's loss [P] from the log-ratios (see the module docstring). chosen_tokens/rejected_tokens: each
    sequence's token count, for ipo on summed log-probabilities (None: the log-ratios are already per token)."""
    c, r = chosen_logratios, rejected_logratios
    d = beta * (c - r)
    ls = label_smoothing
    if loss_type == "sigmoid":
        return -(1 - ls) * F.logsigmoid(d) - ls * F.logsigmoid(-d)
    if loss_type == "robust":
        return (-(1 - ls) * F.logsigmoid(d) + ls * F.logsigmoid(-d)) / (1 - 2 * ls)
    if loss_type == "hinge":
        return torch.relu(1 - d)
    if loss_type == "ipo":
        if chosen_tokens is not None:
            c, r = c / chosen_tokens, r / rejected_tokens
        return (c - r - 1 / (2 * beta)) ** 2
    if loss_type == "exo_pair":
        return torch.sigmoid(d) * (F.logsigmoid(d) - math.log1p(-ls)) + torch.sigmoid(-d) * (
            F.logsigmoid(-d) - math.log(ls)
        )
    if loss_type == "nca_pair":
        return -F.logsigmoid(beta * c) - 0.5 * F.logsigmoid(-beta * c) - 0.5 * F.logsigmoid(-beta * r)
    if loss_type == "bco_pair":
        return -F.logsigmoid(beta * c) - F.logsigmoid(-beta * r)
    if loss_type == "sppo_hard":
        return (c - 0.5 / beta) ** 2 + (r + 0.5 / beta) ** 2
    if loss_type == "apo_zero":
        return 1 - torch.sigmoid(beta * c) + torch.sigmoid(beta * r)
    if loss_type == "apo_down":
        return torch.sigmoid(beta * c) + 1 - torch.sigmoid(d)
    if loss_type == "discopop":
        m = torch.sigmoid(d / discopop_tau)
        return -F.logsigmoid(d) * (1 - m) + torch.exp(-d) * m
    raise ValueError(f"dpo_pair_losses: argument 'loss_type' must be one of {list(DPO_LOSS_TYPES)}, got {loss_type!r}")


class FusedLinearDPOLoss(torch.nn.Module):
    """DPO from the last hidden states: forward(lin_weight, _input [2P, T, H], target [2P, T], bias=None,
    ref_input=None, ref_weight=None, ref_bias=None, ref_chosen_logps=None, ref_rejected_logps=None) returns
    (loss, (chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss, chosen_rewards,
    rejected_rewards)), Liger's outputs.

    The reference log-probabilities are ref_chosen_logps/ref_rejected_logps [P] when given (summed or averaged as
    average_log_prob says, like the policy's), else computed in the same call from ref_input and ref_weight (and
    ref_bias) under no_grad when use_ref_model, else 0. compiled and chunk_size are accepted for Liger compatibility
    and unused: the fused op chunks the tokens by memory. The logits means are computed from column sums of the
    weight (no logits), so they differ from Liger's by its rounding of the logits only."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        alpha: float = 1.0,
        compute_nll_loss: bool = False,
        compiled: bool = True,
        use_ref_model: bool = True,
        average_log_prob: bool = False,
        chunk_size: int = 1,
        loss_type: str = "sigmoid",
        label_smoothing: float = 0.0,
        discopop_tau: float = 0.05,
    ):
        super().__init__()
        check_choice(_OP, "loss_type", loss_type, DPO_LOSS_TYPES)
        self.beta = check_number(_OP, "beta", beta, 0.0, strict=True)
        self.label_smoothing = check_number(_OP, "label_smoothing", label_smoothing, 0.0)
        if loss_type == "robust" and not self.label_smoothing < 0.5:
            raise ValueError(
                f"{_OP}: argument 'label_smoothing' must lie in [0, 0.5) for 'robust', got {label_smoothing}"
            )
        if loss_type == "exo_pair" and not 0.0 < self.label_smoothing < 1.0:
            raise ValueError(
                f"{_OP}: argument 'label_smoothing' must lie in (0, 1) for 'exo_pair', got {label_smoothing}"
            )
        if self.label_smoothing > 1.0:
            raise ValueError(f"{_OP}: argument 'label_smoothing' must lie in [0, 1], got {label_smoothing}")
        self.discopop_tau = check_number(_OP, "discopop_tau", discopop_tau, 0.0, strict=True)
        self.alpha = check_number(_OP, "alpha", alpha)
        self.ignore_index = int(ignore_index)
        self.compute_nll_loss = bool(compute_nll_loss)
        self.compiled = compiled
        self.use_ref_model = bool(use_ref_model)
        self.average_log_prob = bool(average_log_prob)
        self.chunk_size = chunk_size
        self.loss_type = loss_type

    def forward(
        self,
        lin_weight,
        _input,
        target,
        bias=None,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        ref_chosen_logps=None,
        ref_rejected_logps=None,
    ):
        pairs = check_paired(_OP, _input, lin_weight, target)
        check_tensor(_OP, "bias", bias, optional=True)
        device = _input.device
        if ref_chosen_logps is not None or ref_rejected_logps is not None:
            for name, t in (("ref_chosen_logps", ref_chosen_logps), ("ref_rejected_logps", ref_rejected_logps)):
                check_tensor(_OP, name, t)
                if t.shape != (pairs,):
                    raise ValueError(f"{_OP}: argument '{name}' must have shape ({pairs},), got {tuple(t.shape)}")
            ref_chosen, ref_rejected = ref_chosen_logps.detach().float(), ref_rejected_logps.detach().float()
        elif self.use_ref_model:
            check_reference(_OP, target, ref_input, ref_weight)
            ref = reference_log_probs(ref_input, ref_weight, target, ref_bias, self.ignore_index, self.average_log_prob)
            ref_chosen, ref_rejected = ref[:pairs], ref[pairs:]
        else:
            ref_chosen = ref_rejected = torch.zeros((), device=device)
        mask = target != self.ignore_index
        tokens = None if self.average_log_prob else mask.sum(-1).clamp(min=1)

        def logratios(policy):
            return policy.logps[:pairs] - ref_chosen, policy.logps[pairs:] - ref_rejected

        def pair_loss(policy):
            chosen_logratios, rejected_logratios = logratios(policy)
            losses = dpo_pair_losses(
                chosen_logratios,
                rejected_logratios,
                self.beta,
                self.loss_type,
                self.label_smoothing,
                self.discopop_tau,
                None if tokens is None else tokens[:pairs],
                None if tokens is None else tokens[pairs:],
            )
            return losses.sum() / pairs

        loss, policy, nll = run_paired(self, _input, lin_weight, bias, target, pairs, self.average_log_prob, pair_loss)
        chosen_logratios, rejected_logratios = logratios(policy)
        return paired_outputs(
            loss,
            nll,
            _input,
            lin_weight,
            bias,
            policy,
            pairs,
            self.beta * chosen_logratios,
            self.beta * rejected_logratios,
        )
