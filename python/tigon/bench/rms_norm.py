"""RMSNorm benchmark: tigon against Hugging Face's LlamaRMSNorm (eager and torch.compile) and Liger-Kernel.

Every implementation gets the same inputs in the same process, so the rows of one table are directly comparable.
RMSNorm is memory-bound, so the figure of merit is achieved bandwidth against a plain copy measured in the same run.
"""

from __future__ import annotations

import inspect

import torch

from tigon.bench.harness import bench_shapes, compiled, liger, make_impls, run_checks, time_checked, time_fwd_bwd


OP = "rms_norm"
GPU_SHAPES = [(16384, 4096), (4096, 4096), (16384, 8192), (65536, 1024)]  # first = the headline (8B-class model)
CPU_SHAPES = [(256, 1024), (64, 4096)]
EPS = 1e-6


def hf_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """LlamaRMSNorm.forward from transformers, written out: the baseline everyone trains with."""
    h = x.to(torch.float32)
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return w * h.to(x.dtype)


# ---- implementations: each factory returns fn(x, w) -> y or raises Skip(reason) ------------------------------------


def _tigon(ctx, args):
    import tigon

    return lambda x, w: tigon.ops.rms_norm(x, w, EPS, casting_mode="llama")


def _torch_eager(ctx, args):
    return hf_rms_norm


def _torch_compile(ctx, args):
    return compiled(hf_rms_norm, ctx, args)


def _liger(ctx, args):
    LigerRMSNormFunction = liger("liger_kernel.ops.rms_norm", "LigerRMSNormFunction", ctx)
    # in_place was added to the signature in later versions; pass False so dy survives repeated backward calls
    # (and so the comparison with tigon, which also keeps dy, is like for like).
    if "in_place" in inspect.signature(LigerRMSNormFunction.forward).parameters:
        return lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
    return lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama")


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "torch_compile": _torch_compile, "liger": _liger}


# ---- measurement ------------------------------------------------------------------------------------------------------


def _forward_backward(fn, x, w, dy):
    xg, wg = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    y = fn(xg, wg)
    dx, dw = torch.autograd.grad(y, (xg, wg), dy)
    return y, dx, dw


def _max_errors(fn, x, w, dy, ref) -> dict:
    """Max abs difference of y, dx, dw against torch_eager computed in float32 (diff taken in float32)."""
    got = _forward_backward(fn, x, w, dy)
    return {f"err_{k}": (g.float() - r).abs().max().item() for k, g, r in zip(("y", "dx", "dw"), got, ref)}


def _time_impl(fn, x, w, dy, ctx) -> dict:
    return time_fwd_bwd(OP, fn, (x, w), (0, 1), dy, ctx)


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)

    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "rows x hidden"):
        M, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        rand = lambda *size: torch.randn(*size, generator=gen, device=ctx.device)  # noqa: E731
        x = rand(M, N).to(ctx.dtype)
        w = (1 + 0.1 * rand(N)).to(ctx.dtype)  # weight in x's dtype (bf16), like HF checkpoints
        dy = rand(M, N).to(ctx.dtype)
        elt = x.element_size()
        nbytes = {"fwd": 2 * M * N * elt, "bwd": 3 * M * N * elt, "full": 5 * M * N * elt}  # weight is negligible
        if "torch_compile" in fns:
            torch._dynamo.reset()  # fresh specialisation per shape, never the recompile limit

        # Check every impl first, then drop the float32 reference so it does not sit in memory during timing.
        ref = _forward_backward(hf_rms_norm, x.float(), w.float(), dy.float())
        checks = run_checks(fns, lambda fn: _max_errors(fn, x, w, dy, ref))
        del ref
        results += time_checked(
            OP, f"{OP} {M}x{N}", shape, fns, checks, lambda fn: _time_impl(fn, x, w, dy, ctx), nbytes, ctx
        )
        del x, w, dy
    return results
