"""DyT module: Dynamic Tanh, a drop-in for a normalization layer in the models built with it."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.dyt import dyt


class DyT(nn.Module):
    """``gamma * tanh(alpha * x) + beta`` over the last dimension (hidden_size channels): alpha one learned scalar
    (init_alpha), gamma ones and beta zeros at initialisation (beta=False: none). Parameters: alpha [1], gamma and
    beta [hidden_size]; the arguments follow Liger's LigerDyT."""

    def __init__(self, hidden_size: int, beta: bool = True, init_alpha: float = 0.5) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.init_alpha = init_alpha
        self.alpha = nn.Parameter(torch.full((1,), float(init_alpha)))
        self.gamma = nn.Parameter(torch.ones(hidden_size))
        self.beta = nn.Parameter(torch.zeros(hidden_size)) if beta else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dyt(x, self.alpha, self.gamma, self.beta)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, init_alpha={self.init_alpha}, beta={self.beta is not None}"
