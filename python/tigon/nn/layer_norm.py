"""LayerNorm module with torch.nn.LayerNorm's constructor, attributes and state dict."""

from __future__ import annotations

import numbers

import torch
from torch import nn

from tigon.ops.layer_norm import layer_norm


class LayerNorm(nn.Module):
    """Drop-in for torch.nn.LayerNorm over the last dimension: ``weight`` (ones) and ``bias`` (zeros) parameters,
    ``normalized_shape``, ``eps`` and ``elementwise_affine`` attributes. normalized_shape must be an int or a
    1-element tuple (the kernels normalise one dimension). in_place=True writes dx over dy in backward."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
        in_place: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (int(normalized_shape),)
        normalized_shape = tuple(normalized_shape)
        if len(normalized_shape) != 1:
            raise ValueError(
                f"LayerNorm: argument 'normalized_shape' must be an int or a 1-element tuple (Tigon "
                f"normalises the last dimension), got {normalized_shape}"
            )
        self.normalized_shape = normalized_shape
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.in_place = in_place
        factory = dict(device=device, dtype=dtype)
        # Absent parameters are registered as None, as torch.nn.LayerNorm does, so state dicts match key for key.
        self.register_parameter(
            "weight", nn.Parameter(torch.empty(normalized_shape, **factory)) if elementwise_affine else None
        )
        self.register_parameter(
            "bias", nn.Parameter(torch.empty(normalized_shape, **factory)) if elementwise_affine and bias else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 1 or x.shape[-1] != self.normalized_shape[0]:
            raise ValueError(
                f"LayerNorm: argument 'x' must end in dimension {self.normalized_shape[0]}, got shape {tuple(x.shape)}"
            )
        return layer_norm(x, self.weight, self.bias, self.eps, self.in_place)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
            f"in_place={self.in_place}"
        )
