"""Activation modules: torch.nn.ReLU, GELU and SiLU (subclasses: same constructors and attributes, ``inplace``
included) and the squared ReLU, running Tigon's pointwise kernels, whose in-place forms are safe under autograd
(tigon.ops.activation)."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops import activation as ops
from tigon.ops._common import FLOAT_DTYPES


def _ours(x: torch.Tensor) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type in ("cpu", "cuda") and x.dtype in FLOAT_DTYPES


class ReLU(nn.ReLU):
    """Drop-in for torch.nn.ReLU; with inplace=True the backward keeps only the output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.relu(x, in_place=self.inplace) if _ours(x) else super().forward(x)


class GELU(nn.GELU):
    """Drop-in for torch.nn.GELU (approximate "none" or "tanh")."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.gelu(x, self.approximate) if _ours(x) else super().forward(x)


class SiLU(nn.SiLU):
    """Drop-in for torch.nn.SiLU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.silu(x, in_place=self.inplace) if _ours(x) else super().forward(x)


class ReLUSquared(nn.Module):
    """relu(x) ** 2 (transformers' "relu2" activation, ReLUSquaredActivation); with inplace=True x is overwritten and
    the backward keeps only the output."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _ours(x):
            return ops.relu_squared(x, in_place=self.inplace)
        return torch.square(torch.relu(x))

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""
