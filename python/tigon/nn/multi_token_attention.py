"""Multi-token attention's score convolution as a module (Liger's LigerMultiTokenAttention arguments)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.modules.utils import _pair

from tigon.ops.multi_token_attention import multi_token_attention


class MultiTokenAttention(nn.Module):
    """out = mask_0(conv2d(softmax(mask_-inf(scores)))) over [B, in_channels, L, L] attention scores, both masks causal
    (sparsemax instead of softmax with sparse=True). The weight starts as nn.Conv2d's (Kaiming uniform), the bias at
    zero."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        sparse: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"MultiTokenAttention: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                f"multiples of groups ({groups})"
            )
        self.in_channels, self.out_channels, self.groups, self.sparse = in_channels, out_channels, groups, sparse
        self.kernel_size, self.stride = _pair(kernel_size), _pair(stride)
        self.padding, self.dilation = _pair(padding), _pair(dilation)
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, *self.kernel_size, **factory))
        self.bias = nn.Parameter(torch.empty(out_channels, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return multi_token_attention(
            scores, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups, self.sparse
        )

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, bias={self.bias is not None}, "
            f"sparse={self.sparse}"
        )
