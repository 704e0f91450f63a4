"""CrossEntropyLoss with torch.nn.CrossEntropyLoss's parameter names, for [N, V] logits."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.cross_entropy import cross_entropy


class CrossEntropyLoss(nn.Module):
    """Drop-in for torch.nn.CrossEntropyLoss on [N, V] logits, plus z-loss (lse_square_scale) and soft-capping.

    in_place=True writes the gradient over the logits during the forward, which saves an [N, V] buffer where the
    logits are an intermediate nobody reads again (an argmax or softmax of them after the loss would read the
    gradient). Off by default, as torch's module leaves its input alone; see tigon.ops.cross_entropy.
    """

    def __init__(self, weight: torch.Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0, lse_square_scale: float = 0.0, softcap: float | None = None,
                 in_place: bool = False, check_targets: bool = False) -> None:
        super().__init__()
        self.register_buffer("weight", weight)  # like torch's: moves with .to() and lives in the state dict
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.lse_square_scale = lse_square_scale
        self.softcap = softcap
        self.in_place = in_place
        self.check_targets = check_targets  # validate targets first (one synchronisation); see the op

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(input, target, self.weight, self.ignore_index, self.label_smoothing,
                             self.lse_square_scale, self.softcap, self.reduction, in_place=self.in_place,
                             check_targets=self.check_targets)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, lse_square_scale={self.lse_square_scale}, "
                f"softcap={self.softcap}, in_place={self.in_place}")
