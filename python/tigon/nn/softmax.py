"""Softmax module: a drop-in for torch.nn.Softmax backed by tigon.ops.softmax."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops._common import FLOAT_DTYPES
from tigon.ops.softmax import softmax


class Softmax(nn.Softmax):
    """torch.nn.Softmax(dim) (same constructor and attributes) on Tigon's kernels where they take the input (fp32, fp16
    or bf16 on the CPU or CUDA); torch's own forward otherwise. dim=None follows torch's legacy choice."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type in ("cpu", "cuda") and x.dtype in FLOAT_DTYPES:
            return softmax(x, self.dim if self.dim is not None else (0 if x.dim() in (0, 1, 3) else 1))
        return super().forward(x)
