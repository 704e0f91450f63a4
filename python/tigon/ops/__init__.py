"""Tigon's torch ops. Each op family has one module here; its kernels live in src/<op>/."""

from tigon.ops.rms_norm import rms_norm

__all__ = ["rms_norm"]
