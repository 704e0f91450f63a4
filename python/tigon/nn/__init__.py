"""Drop-in torch.nn modules backed by Tigon's ops."""

from tigon.nn.layer_norm import LayerNorm
from tigon.nn.rms_norm import GemmaRMSNorm, RMSNorm

__all__ = ["LayerNorm", "RMSNorm", "GemmaRMSNorm"]
