"""Softmax module: a drop-in for torch.nn.Softmax backed by tigon.ops.softmax."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.softmax import softmax


class Softmax(nn.Softmax):
    """torch.nn.Softmax(dim) on Tigon's kernels (dim=None follows torch's legacy choice of dimension)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.dim if self.dim is not None else (0 if x.dim() in (0, 1, 3) else 1)
        return softmax(x, dim)
