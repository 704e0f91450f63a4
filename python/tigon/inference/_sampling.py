"""Next-token choice as tensor ops on the device: repetition penalty, greedy or temperature / top-k / top-p sampling,
in transformers' order (penalty, temperature, top-k, top-p). Shapes never depend on the data, so a CUDA graph holds it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    """Neutral values switch a stage off (temperature 1, top_k 0, top_p 1, repetition_penalty 1)."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0


def penalize(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty on tokens already in the sequence (seen [B, V], the prompt's padding included, as
    transformers counts it): positive logits divided by the penalty, negative ones multiplied."""
    return torch.where(seen, torch.where(logits < 0, logits * penalty, logits / penalty), logits)


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def _top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keeps the smallest set of most likely tokens whose probabilities sum past p (at least one token)."""
    ascending, order = torch.sort(logits, dim=-1)
    drop = torch.softmax(ascending, dim=-1).cumsum(dim=-1) <= 1 - p
    drop[..., -1] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


def next_tokens(
    logits: torch.Tensor, sampling: Sampling, seen: torch.Tensor | None, generator: torch.Generator | None
) -> torch.Tensor:
    """[B, V] fp32 logits -> [B] token ids."""
    if sampling.repetition_penalty != 1.0:
        logits = penalize(logits, seen, sampling.repetition_penalty)
    if not sampling.do_sample:
        return torch.argmax(logits, dim=-1)
    if sampling.temperature != 1.0:
        logits = logits / sampling.temperature
    if sampling.top_k > 0:
        logits = _top_k(logits, sampling.top_k)
    if sampling.top_p < 1.0:
        logits = _top_p(logits, sampling.top_p)
    probs = torch.softmax(logits, dim=-1)
    # A draw from the categorical without a host round trip: the index of the largest p_i / E_i, E_i ~ Exp(1)
    noise = torch.empty_like(probs).exponential_(generator=generator)
    return torch.argmax(probs / noise, dim=-1)
