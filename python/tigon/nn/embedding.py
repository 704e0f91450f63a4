"""Embedding module: a drop-in for torch.nn.Embedding backed by tigon.ops.embedding (a deterministic weight
gradient)."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops._common import FLOAT_DTYPES
from tigon.ops.embedding import embedding


class Embedding(nn.Embedding):
    """torch.nn.Embedding (same constructor, attributes and state dict) on Tigon's kernels where they apply: no
    max_norm, dense gradients, no scale_grad_by_freq, a float weight on the CPU or CUDA; torch's own forward
    otherwise."""

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        if (
            self.max_norm is None
            and not self.sparse
            and not self.scale_grad_by_freq
            and self.weight.dtype in FLOAT_DTYPES
            and self.weight.device.type in ("cpu", "cuda")
            and indices.dtype in (torch.int32, torch.int64)
        ):
            return embedding(indices, self.weight, self.padding_idx)
        return super().forward(indices)
