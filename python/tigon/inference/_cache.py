"""The static KV cache: one K and one V tensor for all layers, allocated once per (max batch, max length).

Layout [layer, batch, kv_head, slot, head_dim]. A batch of B sequences uses rows [:B]; sequence b's prompt occupies
slots [start[b], T) after its left padding, and decode step n writes slot T + n for every row at once, so one device
scalar (the slot) addresses the write and a CUDA graph replays it unchanged.
"""

from __future__ import annotations

import torch

from tigon.inference._ops import _append_token


class StaticKVCache:
    def __init__(self, layers: int, batch: int, kv_heads: int, length: int, head_dim: int, dtype, device) -> None:
        shape = (layers, batch, kv_heads, length, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.batch, self.length = batch, length

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def write_prompt(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v [B, Hkv, T, D] into slots [0, T) of rows [0, B)."""
        b, _, t, _ = k.shape
        self.k[layer, :b, :, :t].copy_(k)
        self.v[layer, :b, :, :t].copy_(v)

    def write_token(
        self, layer: int, slot: torch.Tensor, lengths: torch.Tensor, k: torch.Tensor, v: torch.Tensor, length: int
    ):
        """k, v [B, Hkv, 1, D] at the device-side slot (lengths: slot + 1 per row, int32); returns this layer's K and V
        views [B, Hkv, length, D]."""
        b = k.shape[0]
        keys, values = self.k[layer, :b, :, :length], self.v[layer, :b, :, :length]
        _append_token(keys, values, k, v, slot, lengths)
        return keys, values
