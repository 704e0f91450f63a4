"""Kahneman-Tversky Optimization (Ethayarajh et al., 2024, arXiv:2402.01306) from the hidden states, as a drop-in
for Liger-Kernel's LigerFusedLinearKTOLoss. Unpaired: each sequence carries a preference label (True: desirable).

With each sequence's log-ratio l = log pi(y|x) - log pi_ref(y|x) (log pi(y|x) alone without a reference) and the
KL estimate z (a detached scalar or per-sequence tensor, 0 when not given),
  loss = mean_B( 1 - s(beta (l - z)) )  for desirable sequences,  1 - s(beta (z - l))  for undesirable ones,
as TRL's KTOTrainer (loss_type "kto", unit desirable/undesirable weights) and Liger compute it. kto_kl gives z as
TRL estimates it: the mean over mismatched (prompt, completion) pairs of the policy's minus the reference's summed
log-probabilities, clamped at 0 (TRL averages over all ranks before clamping: all-reduce before, in data-parallel
training).
"""

from __future__ import annotations

import torch

from tigon.losses._paired import (
    check_number,
    check_reference,
    check_sequences,
    check_tensor,
    policy_of,
    policy_pass,
    reference_log_probs,
)
from tigon.losses._in_forward import policy_loss, sequence_groups

__all__ = ["FusedLinearKTOLoss", "kto_kl"]
_OP = "FusedLinearKTOLoss"


@torch.no_grad()
def kto_kl(
    kl_input: torch.Tensor,
    lin_weight: torch.Tensor,
    kl_target: torch.Tensor,
    ref_kl_input: torch.Tensor,
    ref_weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    ref_bias: torch.Tensor | None = None,
    ignore_index: int = -100,
) -> torch.Tensor:
    """TRL's KTO KL estimate (a detached fp32 scalar) from the policy's and the reference's hidden states of the
    mismatched pairs, kl_input and ref_kl_input [B, T, H], with their targets kl_target [B, T]."""
    check_sequences("kto_kl", kl_input, lin_weight, kl_target, x_name="kl_input", target_name="kl_target")
    check_reference("kto_kl", kl_target, ref_kl_input, ref_weight)
    policy = policy_pass(kl_input, lin_weight, kl_target, bias, ignore_index, average=False).logps
    ref = policy_pass(ref_kl_input, ref_weight, kl_target, ref_bias, ignore_index, average=False).logps
    return (policy - ref).mean().clamp(min=0)


@torch.no_grad()
def _logits_sums(x, weight, bias, labels) -> tuple[torch.Tensor, torch.Tensor]:
    """The sums of every logit of the desirable and of the undesirable sequences, from column sums (no logits, no
    host synchronisation)."""
    per_seq = x.sum(1, dtype=torch.float32) @ weight.sum(0, dtype=torch.float32)  # [B]
    if bias is not None:
        per_seq = per_seq + x.shape[1] * bias.sum(dtype=torch.float32)
    return (per_seq * labels).sum(), (per_seq * ~labels).sum()


class FusedLinearKTOLoss(torch.nn.Module):
    """forward(_input [B, T, H], lin_weight, target [B, T], bias=None, preference_labels [B] bool, ref_input=None,
    ref_weight=None, ref_bias=None, kl=None, ref_log_probs=None) returns (loss, (chosen_logps_sum,
    rejected_logps_sum, chosen_logits_sum, rejected_logits_sum, chosen_rewards_sum, rejected_rewards_sum)), Liger's
    outputs in Liger's argument order (the hidden states first, unlike the paired losses).

    The reference log-probabilities are ref_log_probs [B] when given, else computed in the same call from ref_input
    and ref_weight under no_grad when use_ref_model, else absent. compiled and chunk_size: accepted for Liger
    compatibility, unused. The logits sums come from column sums of the weight, not from rounded logits."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        compiled: bool = True,
        use_ref_model: bool = False,
        average_log_prob: bool = False,
        chunk_size: int = 1,
    ):
        super().__init__()
        self.ignore_index = int(ignore_index)
        self.beta = check_number(_OP, "beta", beta)
        self.compiled = compiled
        self.use_ref_model = bool(use_ref_model)
        self.average_log_prob = bool(average_log_prob)
        self.chunk_size = chunk_size

    def forward(
        self,
        _input,
        lin_weight,
        target,
        bias=None,
        preference_labels=None,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        kl=None,
        ref_log_probs=None,
    ):
        check_sequences(_OP, _input, lin_weight, target)
        check_tensor(_OP, "bias", bias, optional=True)
        check_tensor(_OP, "preference_labels", preference_labels)
        batch = _input.shape[0]
        if preference_labels.dtype != torch.bool or preference_labels.shape != (batch,):
            raise ValueError(
                f"{_OP}: argument 'preference_labels' must be a bool tensor of shape ({batch},), got "
                f"{preference_labels.dtype} {tuple(preference_labels.shape)}"
            )
        check_tensor(_OP, "kl", kl, optional=True)
        labels = preference_labels
        if ref_log_probs is not None:
            check_tensor(_OP, "ref_log_probs", ref_log_probs)
            if ref_log_probs.shape != (batch,):
                raise ValueError(
                    f"{_OP}: argument 'ref_log_probs' must have shape ({batch},), got {tuple(ref_log_probs.shape)}"
                )
            ref = ref_log_probs.detach().float()
        elif self.use_ref_model:
            check_reference(_OP, target, ref_input, ref_weight)
            ref = reference_log_probs(ref_input, ref_weight, target, ref_bias, self.ignore_index, self.average_log_prob)
        else:
            ref = 0.0
        mask = target != self.ignore_index
        sign = labels.float() * 2 - 1

        def logratios(per_token):
            return policy_of(per_token, mask, self.average_log_prob).logps - ref

        def loss_of(per_token):  # one term per sequence
            shifted = logratios(per_token) if kl is None else logratios(per_token) - kl.detach().float()
            return (1 - torch.sigmoid(self.beta * shifted * sign)).sum() / batch

        groups = sequence_groups(batch)
        loss, per_token = policy_loss(_input, lin_weight, bias, target, self.ignore_index, 1.0, groups, loss_of)
        logps = policy_of(per_token, mask, self.average_log_prob).logps
        rewards = self.beta * logratios(per_token)
        aux = (
            (logps * labels).sum(),
            (logps * ~labels).sum(),
            *_logits_sums(_input, lin_weight, bias, labels),
            (rewards * labels).sum(),
            (rewards * ~labels).sum(),
        )
        return loss, tuple(t.detach() for t in aux)
