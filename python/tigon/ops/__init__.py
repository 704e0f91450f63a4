"""Tigon's torch ops. Each op family has one module here; its kernels live in src/<op>/."""

from tigon.ops.activation import gelu, relu, relu_squared, silu
from tigon.ops.attention import flash_attention
from tigon.ops.conv2d import conv2d
from tigon.ops.cross_entropy import cross_entropy
from tigon.ops.decode_attention import append_to_cache, decode_attention
from tigon.ops.distill import distill, jsd, kl_div, tvd
from tigon.ops.dyt import dyt
from tigon.ops.embedding import embedding
from tigon.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
from tigon.ops.gemv import gemv, gemv_parts
from tigon.ops.group_norm import group_norm
from tigon.ops.int8 import gemv_int8, int8_linear, quantize_rows
from tigon.ops.layer_norm import layer_norm
from tigon.ops.linear_act import linear_act
from tigon.ops.moe import moe_experts
from tigon.ops.multi_token_attention import multi_token_attention
from tigon.ops.poly_norm import poly_norm
from tigon.ops.rms_norm import add_rms_norm, rms_norm
from tigon.ops.rope import rope, rope_one
from tigon.ops.softmax import softmax
from tigon.ops.sparsemax import sparsemax
from tigon.ops.swiglu import geglu, geglu_fused, swiglu, swiglu_fused

__all__ = [
    "add_rms_norm",
    "append_to_cache",
    "conv2d",
    "cross_entropy",
    "decode_attention",
    "distill",
    "dyt",
    "embedding",
    "flash_attention",
    "fused_linear_cross_entropy",
    "gemv",
    "gemv_int8",
    "gemv_parts",
    "geglu",
    "geglu_fused",
    "gelu",
    "group_norm",
    "int8_linear",
    "jsd",
    "kl_div",
    "layer_norm",
    "linear_act",
    "moe_experts",
    "multi_token_attention",
    "poly_norm",
    "quantize_rows",
    "relu",
    "relu_squared",
    "rms_norm",
    "rope",
    "rope_one",
    "softmax",
    "sparsemax",
    "silu",
    "swiglu",
    "swiglu_fused",
    "tvd",
]
