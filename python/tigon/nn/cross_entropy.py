"""CrossEntropyLoss with torch.nn.CrossEntropyLoss's parameter names, for [N, V] logits."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.cross_entropy import cross_entropy


class CrossEntropyLoss(nn.Module):
    """Drop-in for torch.nn.CrossEntropyLoss on [N, V] logits, plus z-loss (lse_square_scale) and soft-capping.

    Liger-Kernel's extras: return_z_loss, return_token_accuracy and return_predicted_tokens make the call return a
    tuple (loss, [z_loss], [token accuracy], [predicted tokens]); use_token_scaling weighs each token's loss by its
    detached target probability (see tigon.ops.cross_entropy).

    in_place=True writes the gradient over the logits during the forward, which saves an [N, V] buffer where the
    logits are an intermediate nobody reads again (an argmax or softmax of them after the loss would read the
    gradient). Off by default, as torch's module leaves its input alone; see tigon.ops.cross_entropy.
    """

    def __init__(
        self,
        weight: torch.Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        lse_square_scale: float = 0.0,
        softcap: float | None = None,
        in_place: bool = False,
        return_z_loss: bool = False,
        return_token_accuracy: bool = False,
        return_predicted_tokens: bool = False,
        use_token_scaling: bool = False,
        check_targets: bool = False,
    ) -> None:
        super().__init__()
        self.register_buffer("weight", weight)  # like torch's: moves with .to() and lives in the state dict
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.lse_square_scale = lse_square_scale
        self.softcap = softcap
        self.in_place = in_place
        self.return_z_loss = return_z_loss
        self.return_token_accuracy = return_token_accuracy
        self.return_predicted_tokens = return_predicted_tokens
        self.use_token_scaling = use_token_scaling
        self.check_targets = check_targets  # validate targets first (one synchronisation); see the op

    def forward(self, input: torch.Tensor, target: torch.Tensor):
        return cross_entropy(
            input,
            target,
            self.weight,
            self.ignore_index,
            self.label_smoothing,
            self.lse_square_scale,
            self.softcap,
            self.reduction,
            self.return_z_loss,
            self.return_token_accuracy,
            self.in_place,
            self.return_predicted_tokens,
            self.use_token_scaling,
            self.check_targets,
        )

    def extra_repr(self) -> str:
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
            f"label_smoothing={self.label_smoothing}, lse_square_scale={self.lse_square_scale}, "
            f"softcap={self.softcap}, in_place={self.in_place}, use_token_scaling={self.use_token_scaling}"
        )
