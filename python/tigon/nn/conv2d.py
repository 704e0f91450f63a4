"""Conv2d module: torch.nn.Conv2d's constructor, attributes and state dict, with a ReLU and a residual add fused into
the convolution (tigon.ops.conv2d) for inference."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tigon.ops._common import FLOAT_DTYPES
from tigon.ops.conv2d import conv2d

_HALF = (torch.float16, torch.bfloat16)


def to_channels_last(conv: nn.Conv2d) -> None:
    """Stores conv's weight channels-last (the same Parameter, values unchanged), the layout the kernel reads: else
    every call would copy it."""
    with torch.no_grad():
        conv.weight.data = conv.weight.data.contiguous(memory_format=torch.channels_last)


class Conv2d(nn.Conv2d):
    """Drop-in for torch.nn.Conv2d (a subclass: same parameters, initialisation and state dict) that applies
    ``activation`` (None or "relu") in the same kernel, after adding ``forward(x, residual)``'s residual:
    ``act(conv2d(x) + bias + residual)``. Tigon's kernel runs where it takes the call (no gradient wanted, groups 1,
    zero padding given as numbers; on CUDA fp16 or bf16 with channel counts that are multiples of 8, on the CPU the
    reference path); torch's convolution, add and ReLU otherwise, with the same result."""

    def __init__(self, *args, activation: str | None = None, **kwargs) -> None:
        if activation not in (None, "relu"):
            raise ValueError(f"Conv2d: argument 'activation' must be None or 'relu', got {activation!r}")
        super().__init__(*args, **kwargs)
        self.activation = activation
        to_channels_last(self)

    @classmethod
    def fold(cls, conv: nn.Conv2d, bn: nn.BatchNorm2d | None = None, activation: str | None = None) -> Conv2d:
        """A Conv2d computing ``act(bn(conv(x)))`` with the batch norm's running statistics folded into the weight
        and bias (inference: the statistics no longer change), on conv's device and dtype. conv and bn are left as
        they are."""
        out = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            conv.stride,
            conv.padding,
            conv.dilation,
            conv.groups,
            bias=conv.bias is not None or bn is not None,
            padding_mode=conv.padding_mode,
            activation=activation,
            device=conv.weight.device,
            dtype=conv.weight.dtype,
        )
        with torch.no_grad():
            w = conv.weight.double()
            b = conv.bias.double() if conv.bias is not None else torch.zeros(conv.out_channels, dtype=torch.float64)
            b = b.to(w.device)
            if bn is not None:
                scale = bn.weight.double() if bn.weight is not None else torch.ones_like(b)
                shift = bn.bias.double() if bn.bias is not None else torch.zeros_like(b)
                scale = scale / torch.sqrt(bn.running_var.double() + bn.eps)
                w = w * scale.view(-1, 1, 1, 1)
                b = (b - bn.running_mean.double()) * scale + shift
            out.weight.copy_(w)
            if out.bias is not None:
                out.bias.copy_(b)
        return out.train(conv.training)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", activation={self.activation}" if self.activation else "")

    def _kernel_takes(self, x: torch.Tensor, residual: torch.Tensor | None) -> bool:
        params = [self.weight] + ([self.bias] if self.bias is not None else [])
        if self.groups != 1 or self.padding_mode != "zeros" or isinstance(self.padding, str) or x.dim() != 4:
            return False
        if torch.is_grad_enabled() and any(
            t.requires_grad for t in params + [x] + ([residual] if residual is not None else [])
        ):
            return False
        if x.dtype not in FLOAT_DTYPES or any(p.dtype != x.dtype for p in params):
            return False
        if residual is not None and (residual.dtype != x.dtype or residual.device != x.device):
            return False
        if x.device.type == "cpu":
            return True
        span = [(k - 1) * d for k, d in zip(self.kernel_size, self.dilation)]
        out = [(n + 2 * p - s_) // st + 1 for n, p, s_, st in zip(x.shape[2:], self.padding, span, self.stride)]
        return (
            x.device.type == "cuda"
            and x.dtype in _HALF
            and self.in_channels % 8 == 0
            and self.out_channels % 8 == 0
            and max(self.padding) <= 128
            and max(span) < 255
            and x.shape[0] * max(x.shape[2] * x.shape[3], out[0] * out[1]) < 2**31  # the kernel's 32-bit pixel count
        )

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if not getattr(self, "_kernel_refused", False) and self._kernel_takes(x, residual):
            try:
                return conv2d(
                    x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.activation, residual
                )
            except ValueError as e:  # a geometry the sm_90 kernel does not take (its TMA limits): torch's from now on
                if "sm_90 kernel" not in str(e):
                    raise
                self._kernel_refused = True
        y = self._conv_forward(x, self.weight, self.bias)
        if residual is not None:
            y = y + residual
        return F.relu(y) if self.activation == "relu" else y
