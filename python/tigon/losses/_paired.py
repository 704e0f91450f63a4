"""What the paired preference losses share: argument checks, the policy's and the reference's sequence
log-probabilities (one pass over chosen and rejected together; the policy's gradient made in that pass), the NLL
term and the logits means.

The batch holds the chosen sequences first and the rejected ones second ([2P, T, H]), Liger's convention. The aux
outputs are detached metrics, as Liger's autograd functions return them (no gradient flows through them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tigon.losses._in_forward import pair_groups, policy_loss
from tigon.losses.log_probs import logits_sum, selective_log_probs, sequence_log_probs
from tigon.ops._common import check_tensor

__all__ = [
    "PolicyPass",
    "check_tensor",
    "check_choice",
    "check_number",
    "check_sequences",
    "check_paired",
    "check_reference",
    "policy_of",
    "policy_pass",
    "run_paired",
    "reference_log_probs",
    "chosen_nll",
    "logits_means",
    "paired_outputs",
]


def check_number(op: str, name: str, v, low: float | None = None, strict: bool = False, optional: bool = False):
    """v as a float (None when optional and None); with low, v >= low (v > low when strict)."""
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{op}: argument '{name}' must be a number, got {type(v).__name__}")
    if low is not None and (v <= low if strict else v < low):
        raise ValueError(f"{op}: argument '{name}' must be {'>' if strict else '>='} {low}, got {v!r}")
    return float(v)


def check_choice(op: str, name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{op}: argument '{name}' must be one of {sorted(choices)}, got {value!r}")


def check_sequences(op: str, x, weight, target, x_name: str = "_input", target_name: str = "target") -> None:
    """x [B, T, H] and target [B, T] of integers, weight [V, H]."""
    check_tensor(op, x_name, x)
    check_tensor(op, "lin_weight", weight)
    check_tensor(op, target_name, target)
    if x.dim() != 3:
        raise ValueError(f"{op}: argument '{x_name}' must be [B, T, H], got shape {tuple(x.shape)}")
    if target.shape != x.shape[:2]:
        raise ValueError(
            f"{op}: argument '{target_name}' must have shape {tuple(x.shape[:2])} ({x_name}'s first two dimensions), "
            f"got {tuple(target.shape)}"
        )
    if target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{op}: argument '{target_name}' must be int64 or int32, got {target.dtype}")


def check_paired(op: str, x, weight, target) -> int:
    """The number of pairs: x [2P, T, H] with the P chosen sequences first."""
    check_sequences(op, x, weight, target)
    if x.shape[0] == 0 or x.shape[0] % 2:
        raise ValueError(
            f"{op}: argument '_input' must hold the chosen sequences then the rejected ones (an even batch > 0), "
            f"got batch {x.shape[0]}"
        )
    return x.shape[0] // 2


def check_reference(op: str, target, ref_input, ref_weight) -> None:
    for name, t in (("ref_input", ref_input), ("ref_weight", ref_weight)):
        if t is None:
            raise ValueError(
                f"{op}: argument '{name}' is needed: the reference log-probabilities are computed from ref_input and "
                "ref_weight (or pass them precomputed, or use_ref_model=False for none)"
            )
    check_tensor(op, "ref_input", ref_input)
    check_tensor(op, "ref_weight", ref_weight)
    if ref_input.shape[:2] != target.shape:
        raise ValueError(
            f"{op}: argument 'ref_input' must be [B, T, H] with [B, T] = {tuple(target.shape)} (target's shape), got "
            f"{tuple(ref_input.shape)}"
        )


@dataclass
class PolicyPass:
    per_token: torch.Tensor  # [B, T] log-probabilities of the targets (0 where ignored)
    mask: torch.Tensor  # [B, T] bool, target != ignore_index
    logps: torch.Tensor  # [B] summed (or averaged) over the mask


def policy_of(per_token: torch.Tensor, mask: torch.Tensor, average: bool) -> PolicyPass:
    return PolicyPass(per_token, mask, sequence_log_probs(per_token, mask, average))


def policy_pass(x, weight, target, bias, ignore_index: int, average: bool, temperature: float = 1.0) -> PolicyPass:
    per_token = selective_log_probs(x, weight, target, bias, temperature, ignore_index)
    return policy_of(per_token, target != ignore_index, average)


def reference_log_probs(
    ref_input, ref_weight, target, ref_bias, ignore_index: int, average: bool, temperature: float = 1.0
) -> torch.Tensor:
    """The reference model's sequence log-probabilities [B], under no_grad."""
    with torch.no_grad():
        return policy_pass(ref_input, ref_weight, target, ref_bias, ignore_index, average, temperature).logps


def chosen_nll(x, weight, bias, target, policy: PolicyPass, nll_target, ignore_index: int, pairs: int) -> torch.Tensor:
    """Liger's NLL term: the chosen sequences' summed token NLL over their count of non-ignored targets (at
    temperature 1). Reuses the policy pass unless nll_target differs from target (one more pass over the chosen
    half)."""
    if nll_target is None:
        count = policy.mask[:pairs].sum().clamp(min=1)
        return -policy.per_token[:pairs].sum() / count
    chosen_target = nll_target[:pairs]
    count = (chosen_target != ignore_index).sum().clamp(min=1)
    return -selective_log_probs(x[:pairs], weight, chosen_target, bias, 1.0, ignore_index).sum() / count


def run_paired(module, x, weight, bias, target, pairs: int, average: bool, pair_loss, nll_target=None):
    """The paired loss of module over x [2P, T, H]: pair_loss(policy) [a scalar, separable over pairs] plus alpha NLL
    when module.compute_nll_loss, with the policy's gradient made in the forward (_in_forward.policy_loss; not with a
    separate nll_target, whose own pass autograd takes). Returns (loss, policy with detached values, the NLL's
    value)."""
    mask = target != module.ignore_index
    nll = {}

    def loss_of(per_token):
        policy = policy_of(per_token, mask, average)
        loss = pair_loss(policy)
        if module.compute_nll_loss:
            term = chosen_nll(x, weight, bias, target, policy, nll_target, module.ignore_index, pairs)
            nll["value"] = term.detach()  # the last call's: the whole batch's (policy_loss evaluates it last)
            loss = loss + getattr(module, "alpha", 1.0) * term
        return loss

    loss, per_token = policy_loss(
        x, weight, bias, target, module.ignore_index, 1.0, pair_groups(pairs), loss_of, fuse=nll_target is None
    )
    return loss, policy_of(per_token, mask, average), nll.get("value", torch.zeros((), device=loss.device))


@torch.no_grad()
def logits_means(x, weight, bias, pairs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger's chosen and rejected logits means: the sum of every logit of each half over pairs * T * V. Computed from
    column sums (logits_sum), not from logits rounded to the model's dtype as Liger sums them: equal up to rounding."""
    weight_sum = weight.sum(0, dtype=torch.float32)
    denom = pairs * x.shape[1] * weight.shape[0]
    return (
        logits_sum(x[:pairs], weight, bias, weight_sum) / denom,
        logits_sum(x[pairs:], weight, bias, weight_sum) / denom,
    )


def paired_outputs(loss, nll, x, weight, bias, policy: PolicyPass, pairs: int, *aux):
    """Liger's return value: (loss, (chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean,
    nll_loss, *aux)), every output after the loss detached."""
    means = logits_means(x, weight, bias, pairs)
    extras = (policy.logps[:pairs], policy.logps[pairs:], *means, nll, *aux)
    return loss, tuple(t.detach() for t in extras)
