"""LayerNorm benchmark: tigon against torch.nn.functional.layer_norm (eager and torch.compile) and Liger-Kernel.

Every implementation gets the same inputs (bf16 x, weight and bias) in the same process, so the rows of one table are
directly comparable. LayerNorm is memory-bound: the figure of merit is bandwidth against a copy measured in the same
run. The measurement is RMSNorm's (tigon/bench/rms_norm.py), with the bias's gradient asked for as well: torch skips
the gradients nobody asks for, so all three are requested from every implementation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import bench_shapes, compiled, liger, make_impls, run_checks, time_checked, time_fwd_bwd


OP = "layer_norm"
GPU_SHAPES = [(16384, 4096), (4096, 4096), (16384, 8192)]  # first = the headline
CPU_SHAPES = [(256, 1024), (64, 4096)]
EPS = 1e-5


def torch_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], w, b, EPS)


# ---- implementations: each factory returns fn(x, w, b) -> y or raises Skip(reason) ---------------------------------


def _tigon(ctx, args):
    from tigon.ops.layer_norm import layer_norm

    return lambda x, w, b: layer_norm(x, w, b, EPS)


def _torch_eager(ctx, args):
    return torch_layer_norm


def _torch_compile(ctx, args):
    return compiled(torch_layer_norm, ctx, args)


def _liger(ctx, args):
    LigerLayerNormFunction = liger("liger_kernel.ops.layer_norm", "LigerLayerNormFunction", ctx)
    return lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, EPS)


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "torch_compile": _torch_compile, "liger": _liger}


# ---- measurement ------------------------------------------------------------------------------------------------------


def _forward_backward(fn, x, w, b, dy):
    xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y = fn(xg, wg, bg)
    return (y,) + torch.autograd.grad(y, (xg, wg, bg), dy)


def _max_errors(fn, x, w, b, dy, ref) -> dict:
    """Max abs difference of y, dx, dw, db against F.layer_norm computed in float32 (diff taken in float32)."""
    got = _forward_backward(fn, x, w, b, dy)
    return {f"err_{k}": (g.float() - r).abs().max().item() for k, g, r in zip(("y", "dx", "dw", "db"), got, ref)}


def _time_impl(fn, x, w, b, dy, ctx) -> dict:
    return time_fwd_bwd(OP, fn, (x, w, b), (0, 1, 2), dy, ctx)


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)

    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "rows x hidden"):
        M, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        rand = lambda *size: torch.randn(*size, generator=gen, device=ctx.device)  # noqa: E731
        x = rand(M, N).to(ctx.dtype)
        w = (1 + 0.1 * rand(N)).to(ctx.dtype)
        b = (0.1 * rand(N)).to(ctx.dtype)
        dy = rand(M, N).to(ctx.dtype)
        elt = x.element_size()
        nbytes = {"fwd": 2 * M * N * elt, "bwd": 3 * M * N * elt, "full": 5 * M * N * elt}  # parameters negligible
        if "torch_compile" in fns:
            torch._dynamo.reset()  # fresh specialisation per shape, never the recompile limit

        ref = _forward_backward(torch_layer_norm, x.float(), w.float(), b.float(), dy.float())
        checks = run_checks(fns, lambda fn: _max_errors(fn, x, w, b, dy, ref))
        del ref
        results += time_checked(
            OP, f"{OP} {M}x{N}", shape, fns, checks, lambda fn: _time_impl(fn, x, w, b, dy, ctx), nbytes, ctx
        )
        del x, w, b, dy
    return results
