"""FusedLinearCrossEntropyLoss: the lm_head projection and the loss in one, without the [N, V] logits."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.fused_linear_cross_entropy import fused_linear_cross_entropy


def _check_order(lin_weight, _input, target) -> None:
    """torch's (input, weight, target) order instead of this call's (lin_weight, _input, target): say so, rather than
    letting the op find the target's shape wrong."""
    if not all(isinstance(t, torch.Tensor) for t in (lin_weight, _input, target)):
        return  # the op names the argument that is not a tensor
    if target.shape == lin_weight.shape[:-1] and target.shape != _input.shape[:-1]:
        raise ValueError(
            f"FusedLinearCrossEntropyLoss: argument 'lin_weight' has shape {tuple(lin_weight.shape)}, "
            f"the hidden states' shape for target {tuple(target.shape)}: the call takes (lin_weight, "
            f"_input, target) as Liger-Kernel's does, e.g. loss(model.lm_head.weight, hidden, target)"
        )


class FusedLinearCrossEntropyLoss(nn.Module):
    """loss(lin_weight, _input, target, bias=None) = cross entropy of _input @ lin_weight.T + bias against target.

    The call takes Liger-Kernel's LigerFusedLinearCrossEntropyLoss arguments in the same order, so it drops in where
    that one is used (the weight is the model's lm_head.weight, not owned here). The options are
    tigon.ops.fused_linear_cross_entropy's; ce_weight (class weights) is a buffer, like torch's CrossEntropyLoss
    weight. With return_z_loss / return_token_accuracy / return_predicted_tokens the call returns a tuple
    (loss, [z_loss], [accuracy], [predicted tokens]); use_token_scaling weighs each token's loss by its detached target
    probability.
    """

    def __init__(
        self,
        ce_weight: torch.Tensor | None = None,
        ignore_index: int = -100,
        lse_square_scale: float = 0.0,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
        softcap: float | None = None,
        return_z_loss: bool = False,
        return_token_accuracy: bool = False,
        memory_budget: int | None = None,
        dw_accumulation: str = "fp32",
        return_predicted_tokens: bool = False,
        use_token_scaling: bool = False,
        check_targets: bool = False,
    ) -> None:
        super().__init__()
        self.register_buffer("ce_weight", ce_weight)
        self.ignore_index = ignore_index
        self.lse_square_scale = lse_square_scale
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.softcap = softcap
        self.return_z_loss = return_z_loss
        self.return_token_accuracy = return_token_accuracy
        self.memory_budget = memory_budget
        self.dw_accumulation = dw_accumulation
        self.return_predicted_tokens = return_predicted_tokens
        self.use_token_scaling = use_token_scaling
        self.check_targets = check_targets  # validate targets first (one synchronisation); see the op

    def forward(
        self, lin_weight: torch.Tensor, _input: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None = None
    ):
        _check_order(lin_weight, _input, target)
        return fused_linear_cross_entropy(
            _input,
            lin_weight,
            target,
            bias,
            self.ce_weight,
            self.ignore_index,
            self.label_smoothing,
            self.lse_square_scale,
            self.softcap,
            self.reduction,
            self.return_z_loss,
            self.return_token_accuracy,
            self.memory_budget,
            dw_accumulation=self.dw_accumulation,
            return_predicted_tokens=self.return_predicted_tokens,
            use_token_scaling=self.use_token_scaling,
            check_targets=self.check_targets,
        )

    def extra_repr(self) -> str:
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
            f"label_smoothing={self.label_smoothing}, lse_square_scale={self.lse_square_scale}, "
            f"softcap={self.softcap}, memory_budget={self.memory_budget}, "
            f"dw_accumulation={self.dw_accumulation!r}, use_token_scaling={self.use_token_scaling}"
        )
