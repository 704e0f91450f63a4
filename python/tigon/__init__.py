"""Tigon: fused CUDA C++ kernels for LLM training and inference, driven from PyTorch.

import tigon
y = tigon.ops.rms_norm(x, weight, eps=1e-6)
norm = tigon.nn.RMSNorm(4096)          # drop-in for Hugging Face's LlamaRMSNorm (same state dict)
model = tigon.optimize_model(model)    # a Hugging Face causal LM's generate() on a static-cache decode loop
model = tigon.swap_modules(model)      # torch.nn LayerNorm / RMSNorm / Linear + activation swapped for Tigon's
model = tigon.quantize(model, "int8")  # linear layers on int8 weights (and int8 activations: mode="w8a8")
"""

from tigon._lib import (
    CPU_PATH_NOTE,
    TigonArgumentError,
    TigonCPUWarning,
    TigonDTypeError,
    TigonError,
    has_cuda,
    library_path,
    version,
)
from tigon import inference, losses, nn, ops
from tigon.inference import optimize_model
from tigon.quantization import Int8Linear, dequantize, quantize
from tigon.switch import disable, enable, enabled, swap_modules

__version__ = "0.1.0"
__all__ = [
    "ops",
    "nn",
    "losses",
    "inference",
    "optimize_model",
    "TigonError",
    "TigonArgumentError",
    "TigonDTypeError",
    "TigonCPUWarning",
    "CPU_PATH_NOTE",
    "version",
    "has_cuda",
    "library_path",
    "enable",
    "disable",
    "enabled",
    "swap_modules",
    "quantize",
    "dequantize",
    "Int8Linear",
]
