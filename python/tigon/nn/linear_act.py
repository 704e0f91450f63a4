"""Linear with a fused activation: torch.nn.Linear's constructor, attributes and state dict."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tigon.ops._common import FLOAT_DTYPES
from tigon.ops.activation import activation_code
from tigon.ops.linear_act import linear_act

# torch's own forms, for inputs the kernels do not take (float64, other devices)
_TORCH_ACT = {
    "none": lambda y: y,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "silu": F.silu,
}


class Linear(nn.Linear):
    """Drop-in for torch.nn.Linear (a subclass: same ``weight`` and ``bias`` parameters, initialisation and state
    dict) that applies ``activation`` ("relu", "gelu", "gelu_tanh", "silu" or None) in the same op:
    ``act(x @ weight.T + bias)`` through tigon.ops.linear_act. Inputs the kernels do not take (float64, devices other
    than CPU and CUDA) run torch's F.linear and activation instead."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        activation: str | None = None,
        device=None,
        dtype=None,
    ) -> None:
        code = activation_code(activation, "Linear")  # refuses an unknown name before any parameter is made
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = "none" if code == 0 else activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type not in ("cpu", "cuda") or (
            x.dtype not in FLOAT_DTYPES and not torch.is_autocast_enabled(x.device.type)
        ):
            return _TORCH_ACT[self.activation](F.linear(x, self.weight, self.bias))
        return linear_act(x, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation!r}"
