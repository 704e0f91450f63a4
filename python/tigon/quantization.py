"""Int8 inference for a whole model: ``tigon.quantize(model, "int8", mode=...)`` replaces its linear layers by
``Int8Linear`` modules that hold int8 weights with one float32 scale per output channel, quantized once from the float
weight (tigon.ops.quantize_rows on the weight's rows: scale = max|w_n| / 127, round half to even).

- ``mode="w8a8"``: every forward quantizes its input per row (per token) and runs tigon.ops.int8_linear, the int8 x
  int8 GEMM with the scales, bias and activation applied in one pass after it. cuBLASLt's int8 kernels need in- and
  out-features that are multiples of 4; layers with other sizes stay as they are.
- ``mode="weight_only"``: the input stays in its float dtype; one or two rows (decoding) run tigon.ops.gemv_int8,
  which streams the int8 weight once, and more rows a matmul on the dequantized weight.

Replaced: ``torch.nn.Linear`` (exactly that class) and ``tigon.nn.Linear`` (with its activation), with float weights
on the CPU or a CUDA device. Everything else stays as it is, and so do the modules named in ``exclude`` (e.g.
``("lm_head",)``). The model is changed in place and returned. Inference only: the quantized layers have no backward
(run them under torch.no_grad() or torch.inference_mode()). ``tigon.dequantize(model)`` puts float nn.Linear /
tigon.nn.Linear modules back, with the dequantized weights (the rounding stays).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tigon.nn.linear_act import _TORCH_ACT
from tigon.nn.linear_act import Linear as _TigonLinear
from tigon.ops._common import FLOAT_DTYPES, rows_ok
from tigon.ops.int8 import gemv_int8, int8_linear, quantize_rows

__all__ = ["Int8Linear", "quantize", "dequantize", "quantize_weight", "perplexity"]

MODES = ("w8a8", "weight_only")
# weight_only: rows of input up to which the int8 GEMV runs (from 3 rows on tensor cores, the weight widened in
# registers): at 8 x 4096 -> 14336 it takes 0.78x torch's bf16 matmul (docs/performance/int8.md); past 8 rows, which
# were not measured, the weight is dequantized for a matmul.
GEMV_MAX_ROWS = 8


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_w int8 [N, K], scale_w float32 [N]): per-output-channel symmetric int8 of a float [N, K] weight."""
    w = weight.detach()
    if w.dtype not in FLOAT_DTYPES:
        w = w.float()
    with torch.no_grad():
        return quantize_rows(w.contiguous())


class Int8Linear(nn.Module):
    """A linear layer (+ activation) with an int8 weight [out_features, in_features] and a float32 scale per output
    channel (buffers ``q_weight``, ``weight_scale``, and ``bias`` in the layer's float dtype or None). mode "w8a8"
    quantizes each input row and runs the int8 GEMM; "weight_only" keeps the input in float (int8 GEMV for one or
    two rows, a dequantized matmul beyond). Inference only."""

    def __init__(
        self,
        q_weight: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None,
        activation: str = "none",
        mode: str = "w8a8",
        dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"Int8Linear: argument 'mode' must be one of {MODES}, got {mode!r}")
        if activation not in _TORCH_ACT:
            raise ValueError(
                f"Int8Linear: argument 'activation' must be one of {sorted(_TORCH_ACT)}, got {activation!r}"
            )
        self.out_features, self.in_features = q_weight.shape
        self.activation, self.mode, self.dtype = activation, mode, dtype
        self.register_buffer("q_weight", q_weight)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    @classmethod
    def from_linear(cls, linear: nn.Linear, mode: str = "w8a8", activation: str | None = None) -> Int8Linear:
        """The int8 form of a float nn.Linear (or tigon.nn.Linear: its activation comes along)."""
        act = activation or getattr(linear, "activation", None) or "none"
        q, s = quantize_weight(linear.weight)
        return cls(q, s, linear.bias, act, mode, linear.weight.dtype)

    def dequantized_weight(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        w = self.q_weight.float() * self.weight_scale[:, None]
        return w.to(dtype or self.dtype)

    def _bias_as(self, dtype: torch.dtype) -> torch.Tensor | None:
        b = self.bias
        return b if b is None or b.dtype == dtype else b.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype if x.dtype in FLOAT_DTYPES else self.dtype
        if x.dtype != dtype:
            x = x.to(dtype)
        if self.mode == "w8a8":
            q, s = quantize_rows(x if rows_ok(x) else x.contiguous())
            return int8_linear(q, s, self.q_weight, self.weight_scale, self._bias_as(dtype), self.activation, dtype)
        rows = x.numel() // max(1, x.shape[-1])
        if rows <= GEMV_MAX_ROWS:
            y = gemv_int8(x, self.q_weight, self.weight_scale, self._bias_as(dtype))
        else:
            y = F.linear(x, self.dequantized_weight(dtype), self._bias_as(dtype))
        return _TORCH_ACT[self.activation](y)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"activation={self.activation!r}, mode={self.mode!r}"
        )


def _convertible(m: nn.Module, mode: str) -> bool:
    if type(m) not in (nn.Linear, _TigonLinear):
        return False
    w = m.weight
    if not w.is_floating_point() or w.device.type not in ("cpu", "cuda"):
        return False
    return mode != "w8a8" or (m.in_features % 4 == 0 and m.out_features % 4 == 0)


def quantize(model: nn.Module, scheme: str = "int8", mode: str = "w8a8", exclude=()) -> nn.Module:
    """Replaces the model's linear layers by Int8Linear (see the module's note), in place; returns the model (or its
    replacement when the model itself is a linear layer). exclude: names (as in named_modules) left as they are."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize: argument 'model' must be a torch.nn.Module, got {type(model).__name__}")
    if scheme != "int8":
        raise ValueError(f"quantize: argument 'scheme' must be 'int8', got {scheme!r}")
    if mode not in MODES:
        raise ValueError(f"quantize: argument 'mode' must be one of {MODES}, got {mode!r}")
    skip = set(exclude)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module._modules.items()):
            full = f"{name}.{child_name}" if name else child_name
            if child is not None and full not in skip and _convertible(child, mode):
                module._modules[child_name] = Int8Linear.from_linear(child, mode)
    if "" not in skip and _convertible(model, mode):
        return Int8Linear.from_linear(model, mode)
    return model


def _to_float(m: Int8Linear) -> nn.Module:
    kw = dict(bias=m.bias is not None, device=m.q_weight.device, dtype=m.dtype)
    if m.activation == "none":
        lin = nn.Linear(m.in_features, m.out_features, **kw)
    else:
        lin = _TigonLinear(m.in_features, m.out_features, activation=m.activation, **kw)
    with torch.no_grad():
        lin.weight.copy_(m.dequantized_weight())
        if m.bias is not None:
            lin.bias.copy_(m.bias)
    return lin


def dequantize(model: nn.Module) -> nn.Module:
    """Puts float linear layers (dequantized weights) back for every Int8Linear, in place; returns the model."""
    for module in list(model.modules()):
        for child_name, child in list(module._modules.items()):
            if isinstance(child, Int8Linear):
                module._modules[child_name] = _to_float(child)
    return _to_float(model) if isinstance(model, Int8Linear) else model


@torch.no_grad()
def perplexity(model: nn.Module, input_ids: torch.Tensor) -> float:
    """exp of the mean next-token cross entropy of a causal LM (Hugging Face's interface: model(input_ids).logits)
    over input_ids [batch, T]: a fixed text's perplexity before and after quantization measures its cost."""
    logits = model(input_ids).logits[:, :-1].float()
    return float(torch.exp(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1))))
