"""Drop-in torch.nn modules backed by Tigon's ops."""

from tigon.nn.layer_norm import LayerNorm
from tigon.nn.rms_norm import GemmaRMSNorm, RMSNorm
from tigon.nn.rope import apply_rotary_pos_emb

__all__ = ["LayerNorm", "RMSNorm", "GemmaRMSNorm", "apply_rotary_pos_emb"]
