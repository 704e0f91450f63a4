"""Drop-in torch.nn modules backed by Tigon's ops."""

from tigon.nn.activation import GELU, ReLU, ReLUSquared, SiLU
from tigon.nn.conv2d import Conv2d
from tigon.nn.cross_entropy import CrossEntropyLoss
from tigon.nn.distill import JSD, KLDivLoss, TVDLoss
from tigon.nn.dyt import DyT
from tigon.nn.embedding import Embedding
from tigon.nn.fused_linear_cross_entropy import FusedLinearCrossEntropyLoss
from tigon.nn.group_norm import GroupNorm
from tigon.nn.layer_norm import LayerNorm
from tigon.nn.linear_act import Linear
from tigon.nn.multi_token_attention import MultiTokenAttention
from tigon.nn.poly_norm import PolyNorm
from tigon.nn.rms_norm import FusedAddRMSNorm, GemmaRMSNorm, RMSNorm
from tigon.nn.rope import apply_rotary_pos_emb
from tigon.nn.softmax import Softmax
from tigon.nn.sparsemax import Sparsemax
from tigon.nn.swiglu import FalconH1MLP, GemmaMLP, LlamaMLP, Phi3MLP
from tigon.nn.tiled_mlp import TiledGEGLUMLP, TiledMLP, TiledSwiGLUMLP, tiled_mlp

__all__ = [
    "Conv2d",
    "CrossEntropyLoss",
    "DyT",
    "Embedding",
    "FalconH1MLP",
    "FusedAddRMSNorm",
    "FusedLinearCrossEntropyLoss",
    "GELU",
    "GemmaMLP",
    "GemmaRMSNorm",
    "GroupNorm",
    "JSD",
    "KLDivLoss",
    "LayerNorm",
    "Linear",
    "LlamaMLP",
    "MultiTokenAttention",
    "Phi3MLP",
    "PolyNorm",
    "RMSNorm",
    "TVDLoss",
    "TiledGEGLUMLP",
    "TiledMLP",
    "TiledSwiGLUMLP",
    "ReLU",
    "ReLUSquared",
    "SiLU",
    "Softmax",
    "Sparsemax",
    "apply_rotary_pos_emb",
    "tiled_mlp",
]
