"""Hugging Face's apply_rotary_pos_emb with its own signature, backed by tigon.ops.rope (for the patching API)."""

from __future__ import annotations

import torch

from tigon.ops.rope import rope

_LAYOUT_OF_UNSQUEEZE_DIM = {1: "bhtd", 2: "bthd"}


def apply_rotary_pos_emb(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    unsqueeze_dim: int = 1,
):
    """Drop-in for ``transformers.models.llama.modeling_llama.apply_rotary_pos_emb``.

    unsqueeze_dim=1: q and k are (B, H, T, D); 2: (B, T, H, D). cos/sin are (B or 1, T, R) as the model's rotary
    embedding returns them (R < D rotates the first R dims only). position_ids is ignored, as in Hugging Face (the
    tables are already gathered per position).
    """
    layout = _LAYOUT_OF_UNSQUEEZE_DIM.get(unsqueeze_dim)
    if layout is None:
        raise ValueError(
            f"apply_rotary_pos_emb: argument 'unsqueeze_dim' must be 1 (B, H, T, D) or 2 (B, T, H, D), "
            f"got {unsqueeze_dim!r}"
        )
    return rope(q, k, cos, sin, layout=layout)
