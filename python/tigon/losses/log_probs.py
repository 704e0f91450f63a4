"""Per-token log-probabilities of chosen tokens from hidden states, through the fused linear + cross entropy op.

log p(target | hidden) at temperature T is minus the cross entropy of the logits (hidden @ weight.T + bias) / T with
no smoothing and no z-loss, so reduction="none" of tigon.ops.fused_linear_cross_entropy gives it without ever holding
the [N, V] logits. Its backward is the op's own (the logits recomputed chunk by chunk with the per-token upstream
gradient). The temperature divides hidden and bias rather than the weight: an [N, H] and a [V] scaling instead of a
[V, H] one, and autograd carries the 1/T into their gradients.
"""

from __future__ import annotations

import torch

from tigon.ops.fused_linear_cross_entropy import fused_linear_cross_entropy

__all__ = ["selective_log_probs", "sequence_log_probs", "logits_sum"]


def _check_temperature(op: str, temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"{op}: argument 'temperature' must be a number > 0, got {temperature!r}")
    return float(temperature)


def selective_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    ignore_index: int = -100,
    memory_budget: int | None = None,
) -> torch.Tensor:
    """log softmax((hidden @ weight.T + bias) / temperature)[target], per token, in fp32, 0 where target is
    ignore_index; differentiable in hidden, weight and bias.

    hidden [..., H], weight [V, H], bias [V] or None, target hidden.shape[:-1] of int64 or int32. Dtypes, chunking and
    memory_budget (bytes of logits per chunk) are tigon.ops.fused_linear_cross_entropy's.
    """
    t = _check_temperature("selective_log_probs", temperature)
    if t != 1.0:
        if isinstance(hidden, torch.Tensor):
            hidden = hidden / t
        if isinstance(bias, torch.Tensor):
            bias = bias / t
    return -fused_linear_cross_entropy(
        hidden, weight, target, bias=bias, ignore_index=ignore_index, reduction="none", memory_budget=memory_budget
    )


def sequence_log_probs(per_token: torch.Tensor, mask: torch.Tensor, average: bool) -> torch.Tensor:
    """The log-probability of each sequence [B] from per-token values [B, T]: their sum over the mask, or their mean
    over the mask's tokens when average (0 for a sequence with none)."""
    total = (per_token * mask).sum(-1)
    return total / mask.sum(-1).clamp(min=1) if average else total


@torch.no_grad()
def logits_sum(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, weight_sum=None) -> torch.Tensor:
    """The sum of every logit of hidden [..., H] (over all its tokens and the whole vocabulary), without the logits:
    sum_t sum_v (x_t . w_v + b_v) = (sum_t x_t) . (sum_v w_v) + tokens * sum_v b_v, in fp32. weight_sum: the fp32
    column sums of weight when the caller already has them."""
    if weight_sum is None:
        weight_sum = weight.sum(0, dtype=torch.float32)
    h = hidden.reshape(-1, hidden.shape[-1])
    total = h.sum(0, dtype=torch.float32) @ weight_sum
    if bias is not None:
        total = total + h.shape[0] * bias.sum(dtype=torch.float32)
    return total
