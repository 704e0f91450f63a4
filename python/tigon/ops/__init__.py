"""Tigon's torch ops. Each op family has one module here; its kernels live in src/<op>/."""

from tigon.ops.layer_norm import layer_norm
from tigon.ops.rms_norm import rms_norm
from tigon.ops.rope import rope

__all__ = ["layer_norm", "rms_norm", "rope"]
