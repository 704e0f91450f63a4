"""Gated MLP blocks with Hugging Face's parameter names (same state dicts as transformers' LlamaMLP, GemmaMLP,
FalconH1MLP and Phi3MLP), whose gated activation runs as one Tigon kernel with the in-place backward: the gate and up projections'
outputs are used only inside the block, so their gradients can be written over them."""

from __future__ import annotations

import torch
from torch import nn

from tigon.ops.swiglu import ACTIVATIONS, _FusedGLU, _GLU, _check_gate_up, _check_multipliers, _check_pair

# config.hidden_act -> our activation. gelu_new / gelu_pytorch_tanh / gelu_fast are the same tanh formula written
# differently in transformers' ACT2FN.
_HIDDEN_ACT = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu_erf",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
}


def _activation(config, default: str, cls: str, name: str | None = None) -> int:
    name = name or getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", None) or default
    if name not in _HIDDEN_ACT:
        raise ValueError(
            f"{cls}: config.hidden_act {name!r} has no gated Tigon kernel (supported: {sorted(_HIDDEN_ACT)})"
        )
    return ACTIVATIONS[_HIDDEN_ACT[name]]


class LlamaMLP(nn.Module):
    """Drop-in for transformers' LlamaMLP (and the Mistral/Qwen2/... copies): down_proj(act(gate_proj(x)) *
    up_proj(x)), act from config.hidden_act (silu for Llama), biases when config.mlp_bias.

    The keywords cover the copies that differ: intermediate_size (Qwen3-MoE's dense layers pass their own),
    hidden_act (Gemma 2/3 name it config.hidden_activation), bias (families whose MLP never has biases)."""

    _default_act = "silu"

    def __init__(
        self,
        config,
        in_place: bool = True,
        intermediate_size: int | None = None,
        hidden_act: str | None = None,
        bias: bool | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = intermediate_size or config.intermediate_size
        bias = bool(getattr(config, "mlp_bias", False)) if bias is None else bias
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=bias)
        self.activation = _activation(config, self._default_act, type(self).__name__, hidden_act)
        self.in_place = in_place  # safe: gate_proj(x) and up_proj(x) live only inside forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.up_proj(x)
        _check_pair(gate, up, self.in_place, type(self).__name__)
        return self.down_proj(_GLU.apply(gate, up, self.activation, self.in_place))


class GemmaMLP(LlamaMLP):
    """Drop-in for transformers' GemmaMLP: no biases, GeGLU with the tanh GELU (config.hidden_act
    "gelu_pytorch_tanh"; Gemma's config already maps the legacy "gelu" to it)."""

    _default_act = "gelu_pytorch_tanh"

    def __init__(
        self, config, in_place: bool = True, intermediate_size: int | None = None, hidden_act: str | None = None
    ) -> None:
        super().__init__(config, in_place, intermediate_size, hidden_act, bias=False)  # never biases


class FalconH1MLP(LlamaMLP):
    """Drop-in for transformers' FalconH1MLP: down_proj(up_proj(x) * act(gate_proj(x) * g)) * d with (g, d) =
    config.mlp_multipliers. g runs inside the kernel; d scales down_proj's output as transformers does (its bias
    included, rounded where transformers rounds), skipped when it is 1."""

    def __init__(
        self, config, in_place: bool = True, intermediate_size: int | None = None, hidden_act: str | None = None
    ) -> None:
        super().__init__(config, in_place, intermediate_size, hidden_act)
        self.gate_multiplier, self.down_multiplier = _check_multipliers(
            *getattr(config, "mlp_multipliers", (1.0, 1.0)), "FalconH1MLP"
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.up_proj(x)
        _check_pair(gate, up, self.in_place, "FalconH1MLP")
        y = self.down_proj(_GLU.apply(gate, up, self.activation, self.in_place, self.gate_multiplier))
        return y if self.down_multiplier == 1.0 else y * self.down_multiplier


class Phi3MLP(nn.Module):
    """Drop-in for transformers' Phi3MLP: one fused gate_up_proj [2I] (gate first, then up), down_proj, no biases."""

    def __init__(self, config, in_place: bool = True, hidden_act: str | None = None) -> None:
        super().__init__()
        self.config = config
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.activation = _activation(config, "silu", "Phi3MLP", hidden_act)
        self.in_place = in_place  # safe: gate_up_proj's output lives only inside forward

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(hidden_states)
        _check_gate_up(gate_up, self.in_place, "Phi3MLP")
        return self.down_proj(_FusedGLU.apply(gate_up, self.activation, self.in_place))
