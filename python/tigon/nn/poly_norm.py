"""PolyNorm module (PolyCom's polynomial normalization), on Tigon's kernels."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.poly_norm import poly_norm


class PolyNorm(nn.Module):
    """``w0 * norm(x**3) + w1 * norm(x**2) + w2 * norm(x) + b``, norm(u) = u / sqrt(mean(u**2) + eps) over the last
    dimension. weight [3] starts at 1/3 each and bias at 1, as PolyCom's reference; the arguments follow Liger's
    LigerPolyNorm (eps)."""

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((3,), 1.0 / 3.0))
        self.bias = nn.Parameter(torch.tensor(1.0))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return poly_norm(x, self.weight, self.bias, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"eps={self.variance_epsilon}"
