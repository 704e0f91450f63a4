"""What the paired preference losses share: argument checks, the policy's and the reference's sequence
log-probabilities (one pass of the fused op over chosen and rejected together), the NLL term and the logits means.

The batch holds the chosen sequences first and the rejected ones second ([2P, T, H]), Liger's convention. The aux
outputs are detached metrics, as Liger's autograd functions return them (no gradient flows through them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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
    "policy_pass",
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
    per_token: torch.Tensor  # [B, T] log-probabilities of the targets (0 where ignored), differentiable
    mask: torch.Tensor  # [B, T] bool, target != ignore_index
    logps: torch.Tensor  # [B] summed (or averaged) over the mask, differentiable


def policy_pass(x, weight, target, bias, ignore_index: int, average: bool, temperature: float = 1.0) -> PolicyPass:
    per_token = selective_log_probs(x, weight, target, bias, temperature, ignore_index)
    mask = target != ignore_index
    return PolicyPass(per_token, mask, sequence_log_probs(per_token, mask, average))


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


def paired_outputs(loss, module, x, weight, bias, target, policy: PolicyPass, pairs: int, *aux, nll_target=None):
    """Liger's return value: loss + alpha NLL (when module.compute_nll_loss), (chosen_logps, rejected_logps,
    chosen_logits_mean, rejected_logits_mean, nll_loss, *aux), every output after the loss detached."""
    if module.compute_nll_loss:
        nll = chosen_nll(x, weight, bias, target, policy, nll_target, module.ignore_index, pairs)
        loss = loss + getattr(module, "alpha", 1.0) * nll
    else:
        nll = torch.zeros((), device=loss.device)
    means = logits_means(x, weight, bias, pairs)
    extras = (policy.logps[:pairs], policy.logps[pairs:], *means, nll, *aux)
    return loss, tuple(t.detach() for t in extras)
