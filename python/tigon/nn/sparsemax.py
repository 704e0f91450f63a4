"""Sparsemax module: sparsemax along one dimension (Liger's LigerSparsemax arguments)."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.sparsemax import sparsemax


class Sparsemax(nn.Module):
    """Sparsemax along dim (default the last): max(x - tau, 0) summing to 1 over each slice, with exact zeros."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sparsemax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
