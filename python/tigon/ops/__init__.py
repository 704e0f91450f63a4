"""Tigon's torch ops. Each op family has one module here; its kernels live in src/<op>/."""

from tigon.ops.activation import gelu, relu, silu
from tigon.ops.attention import flash_attention
from tigon.ops.cross_entropy import cross_entropy
from tigon.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
from tigon.ops.layer_norm import layer_norm
from tigon.ops.linear_act import linear_act
from tigon.ops.rms_norm import rms_norm
from tigon.ops.rope import rope
from tigon.ops.swiglu import geglu, geglu_fused, swiglu, swiglu_fused

__all__ = [
    "cross_entropy",
    "flash_attention",
    "fused_linear_cross_entropy",
    "geglu",
    "geglu_fused",
    "gelu",
    "layer_norm",
    "linear_act",
    "relu",
    "rms_norm",
    "rope",
    "silu",
    "swiglu",
    "swiglu_fused",
]
