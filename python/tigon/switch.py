"""One switch for models outside Hugging Face's families (encoders, CNNs, MLPs): swap the torch.nn modules Tigon has
kernels for, in one model or in every model built or loaded while switched on.

``swap_modules(model)`` converts one model in place and returns it:

- ``nn.Linear`` followed by ``nn.ReLU`` / ``nn.GELU`` / ``nn.SiLU`` inside an ``nn.Sequential`` becomes one
  ``tigon.nn.Linear(activation=...)`` (the activation's slot becomes ``nn.Identity``, so indices and the state dict
  stay as they were); ``nn.Conv2d`` followed by ``nn.ReLU`` likewise becomes ``tigon.nn.Conv2d(activation="relu")``
  (the fused kernel where no gradient is wanted; folding batch norms is ``optimize_model``'s, for inference);
- ``nn.LayerNorm`` over one dimension becomes ``tigon.switch.LayerNorm``, ``nn.RMSNorm`` becomes
  ``tigon.switch.RMSNorm``, ``nn.GroupNorm`` becomes ``tigon.nn.GroupNorm``, ``nn.Softmax`` becomes
  ``tigon.nn.Softmax``, ``nn.ReLU(inplace=True)`` becomes ``tigon.nn.ReLU(inplace=True)``.

Every replacement is a subclass of the torch class it replaces (``isinstance`` checks, such as weight-decay groups,
still hold) and shares the original module's parameters, buffers and hooks: optimizers already built keep working
and the state dict is unchanged. Only modules of exactly these torch classes are swapped (a subclass may change what
forward means); everything else stays as it is, and so does the module given if nothing applies. The replaced
modules themselves are left untouched (a Linear also used outside its Sequential keeps its plain forward).
Hugging Face models: ``tigon.transformers.patch(model)``.

``enable()`` switches Tigon on for modules built or loaded from then on, by rebinding exactly these names, and
nothing else:

- ``LayerNorm`` and ``RMSNorm`` in ``torch.nn``, ``torch.nn.modules.normalization`` and (LayerNorm)
  ``torch.nn.modules.transformer``, to ``tigon.switch.LayerNorm`` / ``RMSNorm``;
- ``GroupNorm`` in ``torch.nn`` and ``torch.nn.modules.normalization``, to ``tigon.nn.GroupNorm``;
- ``ReLU`` and ``Softmax`` in ``torch.nn`` and ``torch.nn.modules.activation``, to ``tigon.nn.ReLU`` /
  ``tigon.nn.Softmax``;
- ``torch.nn.Sequential.__init__``, wrapped so that a Sequential built with Linear + activation pairs fuses them.

Models built with ``nn.LayerNorm(...)`` and friends, ``torch.load`` of pickled modules (which names the classes by
those module paths) and Sequentials built while enabled get Tigon's modules; code that imported a class by name
before enable() keeps torch's. ``disable()`` puts every one of those attributes back (the same objects), and
``with enabled():`` does both around a block. Modules built while enabled stay Tigon's after disable().
"""

from __future__ import annotations

import contextlib
import sys

import torch
from torch import nn

from tigon.nn.activation import ReLU
from tigon.nn.conv2d import Conv2d, to_channels_last
from tigon.nn.group_norm import GroupNorm
from tigon.nn.linear_act import Linear
from tigon.nn.softmax import Softmax
from tigon.ops._common import FLOAT_DTYPES
from tigon.ops.layer_norm import layer_norm
from tigon.ops.rms_norm import rms_norm

__all__ = ["enable", "disable", "enabled", "is_enabled", "swap_modules", "LayerNorm", "RMSNorm"]

# torch's classes as torch defines them (enable() rebinds the names in torch.nn, so they are read once, here)
_TORCH_LAYER_NORM, _TORCH_RMS_NORM, _TORCH_RELU, _TORCH_SOFTMAX = nn.LayerNorm, nn.RMSNorm, nn.ReLU, nn.Softmax
_TORCH_GROUP_NORM = nn.GroupNorm


def _ours(x, *params) -> bool:
    """Whether Tigon's kernels take x (and the parameters given): CPU or CUDA, fp32 / fp16 / bf16."""
    return (
        isinstance(x, torch.Tensor)
        and x.device.type in ("cpu", "cuda")
        and x.dtype in FLOAT_DTYPES
        and x.dim() > 0
        and all(p is None or p.dtype in FLOAT_DTYPES for p in params)
    )


class LayerNorm(_TORCH_LAYER_NORM):
    """torch.nn.LayerNorm (same constructor, attributes and state dict) running tigon.ops.layer_norm where it applies:
    one normalised dimension and an input of a dtype the kernels take; torch's own forward otherwise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.normalized_shape) == 1 and _ours(x, self.weight, self.bias):
            return layer_norm(x, self.weight, self.bias, self.eps)
        return super().forward(x)


class RMSNorm(_TORCH_RMS_NORM):
    """torch.nn.RMSNorm (same constructor, attributes and state dict) running tigon.ops.rms_norm where it applies:
    one normalised dimension and an input of a dtype the kernels take (eps=None: fp32's machine epsilon, as torch
    takes its compute type's); torch's own forward otherwise. The normalised input is rounded to x's dtype before the weight, as
    torch's composite rms_norm does (Tigon's "llama" casting)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.normalized_shape) == 1 and _ours(x, self.weight):
            eps = self.eps if self.eps is not None else torch.finfo(torch.float32).eps
            return rms_norm(x, self.weight, eps)
        return super().forward(x)


_FUSED_ACTIVATIONS = {_TORCH_RELU: "relu", ReLU: "relu", nn.SiLU: "silu"}


def _activation_of(m: nn.Module) -> str | None:
    if type(m) is nn.GELU:
        return "gelu" if m.approximate == "none" else "gelu_tanh"
    return _FUSED_ACTIVATIONS.get(type(m))


def _retyped(m: nn.Module, cls: type, **attrs) -> nn.Module:
    """A module of class cls holding m's state: the same parameter, buffer and submodule objects, its hooks and
    flags (its dictionaries copied, so m itself is left as it was)."""
    new = cls.__new__(cls)
    new.__dict__.update({k: (v.copy() if isinstance(v, dict) else v) for k, v in m.__dict__.items()})
    new.__dict__.update(attrs)
    return new


def _fuse_sequential(seq: nn.Sequential) -> None:
    names = list(seq._modules)
    for first, second in zip(names, names[1:]):
        lin, act = seq._modules[first], seq._modules[second]
        name = _activation_of(act) if act is not None else None
        if type(lin) is nn.Linear and name is not None:
            seq._modules[first] = _retyped(lin, Linear, activation=name)
            seq._modules[second] = nn.Identity()
        elif type(lin) is nn.Conv2d and name == "relu":  # the ReLU in the convolution's epilogue (where it runs)
            to_channels_last(lin)
            seq._modules[first] = _retyped(lin, Conv2d, activation="relu")
            seq._modules[second] = nn.Identity()


def _swap_one(m: nn.Module) -> nn.Module:
    t = type(m)
    if t is _TORCH_LAYER_NORM and len(m.normalized_shape) == 1:
        return _retyped(m, LayerNorm)
    if t is _TORCH_RMS_NORM and len(m.normalized_shape) == 1:
        return _retyped(m, RMSNorm)
    if t is _TORCH_RELU and m.inplace:
        return _retyped(m, ReLU)
    if t is _TORCH_SOFTMAX:
        return _retyped(m, Softmax)
    if t is _TORCH_GROUP_NORM:
        return _retyped(m, GroupNorm)
    return m


def swap_modules(model: nn.Module) -> nn.Module:
    """Swaps the supported modules of model for Tigon's, in place (see the module's note); returns model, or its
    replacement when model itself is a swapped module."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"swap_modules: argument 'model' must be a torch.nn.Module, got {type(model).__name__}")
    for module in model.modules():
        if type(module) is nn.Sequential:
            _fuse_sequential(module)
        for name, child in list(module._modules.items()):
            if child is not None:
                module._modules[name] = _swap_one(child)
    return _swap_one(model)


# ---- enable() / disable() ------------------------------------------------------------------------------------------

# (module path, attribute, replacement); the modules are torch's own, imported when torch is.
_NAMES = [
    ("torch.nn", "LayerNorm", LayerNorm),
    ("torch.nn.modules.normalization", "LayerNorm", LayerNorm),
    ("torch.nn.modules.transformer", "LayerNorm", LayerNorm),
    ("torch.nn", "RMSNorm", RMSNorm),
    ("torch.nn.modules.normalization", "RMSNorm", RMSNorm),
    ("torch.nn", "ReLU", ReLU),
    ("torch.nn.modules.activation", "ReLU", ReLU),
    ("torch.nn", "Softmax", Softmax),
    ("torch.nn.modules.activation", "Softmax", Softmax),
    ("torch.nn", "GroupNorm", GroupNorm),
    ("torch.nn.modules.normalization", "GroupNorm", GroupNorm),
]
_saved: list | None = None  # while enabled: (object, attribute, original value) for every rebinding


def _sequential_init(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if type(self) is nn.Sequential:
            _fuse_sequential(self)

    __init__.__wrapped__ = original
    __init__.__doc__ = original.__doc__
    return __init__


def is_enabled() -> bool:
    return _saved is not None


def enable() -> None:
    """Switches Tigon on for modules built or loaded from now on (the module's note lists what is rebound). Calling
    it again while enabled does nothing."""
    global _saved
    if _saved is not None:
        return
    saved = []
    for path, attr, ours in _NAMES:
        mod = sys.modules.get(path)
        if mod is not None and hasattr(mod, attr):
            saved.append((mod, attr, getattr(mod, attr)))
            setattr(mod, attr, ours)
    original = nn.Sequential.__dict__["__init__"]
    saved.append((nn.Sequential, "__init__", original))
    nn.Sequential.__init__ = _sequential_init(original)
    _saved = saved


def disable() -> None:
    """Puts back every attribute enable() rebound (the very objects it found). Does nothing when not enabled."""
    global _saved
    if _saved is None:
        return
    for obj, attr, original in reversed(_saved):
        setattr(obj, attr, original)
    _saved = None


@contextlib.contextmanager
def enabled():
    """``with tigon.enabled():`` builds (or loads) models with Tigon's modules; the switch is back as it was after."""
    was = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was:
            disable()
