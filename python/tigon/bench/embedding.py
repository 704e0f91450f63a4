"""Embedding benchmark: the lookup and its weight gradient (deterministic in Tigon) against torch (eager and
torch.compile; F.embedding) and Liger-Kernel's LigerEmbeddingFunction, token ids drawn from a Zipf-like law (a few
frequent ids, as real text has).

Memory: the forward reads N rows of the weight and writes y; the backward reads dy and writes the whole weight
gradient ([V, H], most of it zero). Figure of merit: bandwidth against the copy in the same run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import bench_shapes, compiled, liger, make_impls, run_checks, time_checked, time_fwd_bwd

OP = "embedding"
GPU_SHAPES = [(8192, 128256, 4096), (16384, 32000, 4096)]  # tokens, vocabulary, hidden
CPU_SHAPES = [(512, 1000, 64)]


def torch_embedding(weight, idx):
    return F.embedding(idx, weight)


def _tigon(ctx, args):
    import tigon

    return lambda weight, idx: tigon.ops.embedding(idx, weight)


def _liger(ctx, args):
    fn = liger("liger_kernel.ops.experimental.embedding", "LigerEmbeddingFunction", ctx)
    return lambda weight, idx: fn.apply(weight, idx)


IMPLS = {
    "tigon": _tigon,
    "torch_eager": lambda ctx, args: torch_embedding,
    "torch_compile": lambda ctx, args: compiled(torch_embedding, ctx, args),
    "liger": _liger,
}


def _errors(fn, weight, idx, dy, ref) -> dict:
    leaf = weight.detach().clone().requires_grad_()
    y = fn(leaf, idx)
    (dw,) = torch.autograd.grad(y, leaf, dy)
    return {"err_y": (y.float() - ref[0]).abs().max().item(), "err_dw": (dw.float() - ref[1]).abs().max().item()}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "tokens x vocab x hidden"):
        N, V, H = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        weight = torch.randn(V, H, generator=gen, device=ctx.device).to(ctx.dtype)
        ranks = torch.rand(N, generator=gen, device=ctx.device)
        idx = ((V**ranks - 1).long() % V).to(ctx.device)  # Zipf-like: small ids far more often
        dy = torch.randn(N, H, generator=gen, device=ctx.device).to(ctx.dtype)
        elt = weight.element_size()
        nbytes = {"fwd": 2 * N * H * elt, "bwd": (N + V) * H * elt, "full": (3 * N + V) * H * elt}
        if "torch_compile" in fns:
            torch._dynamo.reset()
        wf = weight.float().requires_grad_()
        yf = F.embedding(idx, wf)
        ref = (yf.detach(), torch.autograd.grad(yf, wf, dy.float())[0])
        checks = run_checks(fns, lambda fn: _errors(fn, weight, idx, dy, ref))
        del ref, wf, yf
        results += time_checked(
            OP,
            f"{OP} {N}x{V}x{H}",
            shape,
            fns,
            checks,
            lambda fn: time_fwd_bwd(OP, fn, (weight, idx), (0,), (dy,), ctx),
            nbytes,
            ctx,
        )
        del weight, idx, dy
    return results
