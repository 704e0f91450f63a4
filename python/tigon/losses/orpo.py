"""Odds Ratio Preference Optimization (Hong et al., 2024, arXiv:2403.07691) from the hidden states, as a drop-in for
Liger-Kernel's LigerFusedLinearORPOLoss.

With the chosen and rejected sequences' token-mean log-probabilities c and r (ORPO works on averages),
  log_odds = (c - r) - (log(1 - e^c) - log(1 - e^r)),   loss = -beta mean_pairs log s(log_odds) + NLL,
the NLL being the chosen sequences' token-mean negative log-likelihood (of nll_target when given) when
compute_nll_loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.losses._paired import (
    check_number,
    check_paired,
    check_sequences,
    check_tensor,
    paired_outputs,
    run_paired,
)

__all__ = ["FusedLinearORPOLoss"]
_OP = "FusedLinearORPOLoss"


class FusedLinearORPOLoss(torch.nn.Module):
    """forward(lin_weight, _input [2P, T, H], target [2P, T], bias=None, nll_target=None) returns (loss,
    (chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss, chosen_rewards,
    rejected_rewards, log_odds_ratio, log_odds_chosen)), Liger's outputs (the rewards are beta times the
    log-probabilities). compiled and chunk_size: accepted for Liger compatibility, unused."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        compute_nll_loss: bool = True,
        compiled: bool = True,
        chunk_size: int = 1,
    ):
        super().__init__()
        self.ignore_index = int(ignore_index)
        self.beta = check_number(_OP, "beta", beta)
        self.compute_nll_loss = bool(compute_nll_loss)
        self.compiled = compiled
        self.chunk_size = chunk_size

    def forward(self, lin_weight, _input, target, bias=None, nll_target=None):
        pairs = check_paired(_OP, _input, lin_weight, target)
        check_tensor(_OP, "bias", bias, optional=True)
        if nll_target is not None:
            check_sequences(_OP, _input, lin_weight, nll_target, target_name="nll_target")

        def odds(policy):
            c, r = policy.logps[:pairs], policy.logps[pairs:]
            log_odds = (c - r) - (torch.log1p(-torch.exp(c)) - torch.log1p(-torch.exp(r)))
            return log_odds, F.logsigmoid(log_odds)

        def pair_loss(policy):
            return -self.beta * odds(policy)[1].sum() / pairs

        loss, policy, nll = run_paired(
            self, _input, lin_weight, bias, target, pairs, True, pair_loss, nll_target=nll_target
        )
        log_odds, ratio = odds(policy)
        c, r = policy.logps[:pairs], policy.logps[pairs:]
        return paired_outputs(
            loss,
            nll,
            _input,
            lin_weight,
            bias,
            policy,
            pairs,
            self.beta * c,
            self.beta * r,
            ratio.sum() / pairs,
            log_odds.sum() / pairs,
        )
