"""RMSNorm modules with Hugging Face's parameter names, so they load the same state dicts."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops._common import rows_ok
from tigon.ops.rms_norm import add_rms_norm, rms_norm


class RMSNorm(nn.Module):
    """Drop-in for Hugging Face's LlamaRMSNorm (and the Mistral/Qwen/... copies of it): ``weight`` initialised to
    ones, ``variance_epsilon`` as the epsilon attribute, llama casting. Other families pass offset/casting_mode."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        offset: float = 0.0,
        casting_mode: str = "llama",
        init: float = 1.0,
        in_place: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((hidden_size,), float(init), device=device, dtype=dtype))
        self.variance_epsilon = eps
        self.offset = offset
        self.casting_mode = casting_mode
        self.in_place = in_place

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states
        if x.dim() > 2 and not rows_ok(x):
            # A transposed view, e.g. Gemma 3's q_norm on (B, H, T, D) = (B, T, H, D).transpose(1, 2): the norm is
            # per row, so normalise the memory-order view and hand back the same permutation (HF's output keeps the
            # input's strides too). Any other layout goes to the op, which says what it cannot read.
            order = sorted(range(x.dim() - 1), key=lambda d: -x.stride(d)) + [x.dim() - 1]
            if rows_ok(x.permute(order)):
                y = rms_norm(
                    x.permute(order), self.weight, self.variance_epsilon, self.offset, self.casting_mode, self.in_place
                )
                return y.permute(sorted(range(x.dim()), key=lambda d: order[d]))
        return rms_norm(x, self.weight, self.variance_epsilon, self.offset, self.casting_mode, self.in_place)

    def extra_repr(self) -> str:
        return (
            f"{'no weight' if self.weight is None else tuple(self.weight.shape)}, eps={self.variance_epsilon}, "
            f"offset={self.offset}, "
            f"casting_mode={self.casting_mode!r}, in_place={self.in_place}"
        )


class GemmaRMSNorm(RMSNorm):
    """Drop-in for Hugging Face's GemmaRMSNorm: ``y = norm(x) * (1 + weight)`` all in fp32, weight initialised to
    zeros, epsilon attribute ``eps``."""

    def __init__(self, dim: int, eps: float = 1e-6, in_place: bool = False, device=None, dtype=None) -> None:
        super().__init__(
            dim, eps, offset=1.0, casting_mode="gemma", init=0.0, in_place=in_place, device=device, dtype=dtype
        )

    @property
    def eps(self) -> float:
        return self.variance_epsilon


class FusedAddRMSNorm(RMSNorm):
    """RMSNorm with the residual add in front, for a pre-norm decoder layer: ``forward(x, residual)`` returns
    ``(norm(residual + x), residual + x)`` in one pass (Liger's LigerFusedAddRMSNorm call). Same parameters and
    options as RMSNorm, so it loads the state dict of the norm it replaces."""

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return add_rms_norm(hidden_states, residual, self.weight, self.variance_epsilon, self.offset, self.casting_mode)
