"""Tiled MLP: an MLP run over shards of its input rows, recomputed shard by shard in backward.

A decoder's MLP holds its intermediate activations ([tokens, intermediate_size] for the gate, the up projection and
their product) from forward to backward: at long contexts they are the largest activations of the layer. Run over
shards of the rows, forward keeps only the input and the output; backward recomputes one shard at a time and
differentiates it, so at most one shard's intermediates exist at once. The cost is a second forward of the MLP.

Gradients are exact sums over the shards: the input's gradient shard by shard, each parameter's gradient the sum of
its shards' (taken in the parameter's dtype, as accumulating into ``.grad`` would). They flow back through autograd as
the outputs of one node, so hooks, gradient accumulation and FSDP see one gradient per parameter per step. The MLP
must be deterministic (no dropout): backward recomputes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from tigon.nn.swiglu import GemmaMLP, LlamaMLP


class _TiledMLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x, shards, *params):
        ctx.fn, ctx.shards, ctx.n_params = fn, shards, len(params)
        ctx.save_for_backward(x, *params)
        rows = x.reshape(-1, x.shape[-1])
        out = torch.cat([fn(part) for part in rows.tensor_split(shards)])
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, dy):
        x, *params = ctx.saved_tensors
        need_x = ctx.needs_input_grad[1]
        need_p = ctx.needs_input_grad[3:]
        wanted = [p for p, need in zip(params, need_p) if need]
        rows = x.detach().reshape(-1, x.shape[-1])
        dy_rows = dy.reshape(-1, dy.shape[-1])
        dx = torch.empty_like(rows) if need_x else None
        sums: list[torch.Tensor | None] = [None] * len(wanted)
        start = 0
        for part, d_part in zip(rows.tensor_split(ctx.shards), dy_rows.tensor_split(ctx.shards)):
            part = part.detach().requires_grad_(need_x)
            with torch.enable_grad():
                y = ctx.fn(part)
            inputs = ([part] if need_x else []) + wanted
            grads = torch.autograd.grad(y, inputs, d_part, allow_unused=True)
            if need_x:
                dx[start : start + part.shape[0]] = grads[0]
                grads = grads[1:]
            for i, g in enumerate(grads):
                if g is not None:
                    sums[i] = g if sums[i] is None else sums[i].add_(g)
            start += part.shape[0]
        out = iter(sums)
        param_grads = [next(out) if need else None for need in need_p]
        return (None, dx.view_as(x) if need_x else None, None, *param_grads)


def default_shards(rows: int, hidden: int) -> int:
    """Shards of about `hidden` rows each (each shard's intermediates then weigh about as much as the weights)."""
    return max(1, math.ceil(rows / max(hidden, 1)))


def tiled_mlp(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    params: Sequence[torch.Tensor] = (),
    num_shards: int | None = None,
) -> torch.Tensor:
    """fn applied to the rows of x ([..., hidden] flattened to rows) in num_shards shards, recomputed in backward.

    fn maps [rows, hidden] to [rows, out] row by row and must be deterministic. params are the tensors fn uses that
    need gradients (an MLP's parameters): they reach fn through its closure and get their gradients through this
    call. num_shards defaults to ceil(rows / hidden); it is capped at the row count."""
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise TypeError(f"tiled_mlp: argument 'x' must be a tensor with a last (hidden) dimension, got {type(x)}")
    if num_shards is not None and (isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1):
        raise ValueError(f"tiled_mlp: argument 'num_shards' must be None or an int >= 1, got {num_shards!r}")
    rows = x.numel() // max(x.shape[-1], 1) if x.shape[-1] else 0
    shards = default_shards(rows, x.shape[-1]) if num_shards is None else num_shards
    shards = max(1, min(shards, rows))
    params = [p for p in params if p.requires_grad]
    if not torch.is_grad_enabled() or not (x.requires_grad or params):
        with torch.no_grad():
            parts = [fn(part) for part in x.reshape(-1, x.shape[-1]).tensor_split(shards)]
        out = torch.cat(parts)
        return out.view(*x.shape[:-1], out.shape[-1])
    return _TiledMLP.apply(fn, x, shards, *params)


class TiledSwiGLUMLP(LlamaMLP):
    """LlamaMLP (down_proj(act(gate_proj(x)) * up_proj(x)), act from config.hidden_act, silu by default) run tiled:
    the same parameters and state dict, activation memory of one shard. num_shards: None for ceil(rows / hidden)."""

    def __init__(self, config, num_shards: int | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        self.num_shards = num_shards

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tiled_mlp(super().forward, x, list(self.parameters()), self.num_shards)


class TiledGEGLUMLP(GemmaMLP):
    """GemmaMLP (GeGLU with the tanh GELU, no biases) run tiled, as TiledSwiGLUMLP."""

    def __init__(self, config, num_shards: int | None = None, **kwargs) -> None:
        super().__init__(config, **kwargs)
        self.num_shards = num_shards

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tiled_mlp(super().forward, x, list(self.parameters()), self.num_shards)


class TiledMLP(nn.Module):
    """Any row-wise module (an MLP) run tiled: TiledMLP(mlp, num_shards). Its state dict nests the module's under
    "mlp."; to keep a model's own keys, use TiledSwiGLUMLP / TiledGEGLUMLP or call tiled_mlp in a forward."""

    def __init__(self, mlp: nn.Module, num_shards: int | None = None) -> None:
        super().__init__()
        self.mlp = mlp
        self.num_shards = num_shards

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tiled_mlp(self.mlp, x, list(self.mlp.parameters()), self.num_shards)
