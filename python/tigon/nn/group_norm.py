"""GroupNorm module: a drop-in for torch.nn.GroupNorm backed by tigon.ops.group_norm."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops._common import FLOAT_DTYPES
from tigon.ops.group_norm import group_norm


class GroupNorm(nn.GroupNorm):
    """torch.nn.GroupNorm(num_groups, num_channels, eps, affine) (same constructor, attributes and state dict) on
    Tigon's kernels where they take the input (contiguous [N, C, *] in fp32, fp16 or bf16 on the CPU or CUDA); torch's
    own forward otherwise (a channels_last input keeps torch's, which keeps its memory format)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = (self.weight, self.bias)
        if (
            x.device.type in ("cpu", "cuda")
            and x.dtype in FLOAT_DTYPES
            and x.dim() >= 2
            and x.is_contiguous()
            and all(p is None or p.dtype in FLOAT_DTYPES for p in params)
        ):
            return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
        return super().forward(x)
