"""Fused residual add + RMSNorm benchmark: a pre-norm decoder layer's ``h = residual + x; y = rms_norm(h)``, both
outputs feeding the loss, against the two steps in torch (eager and torch.compile) and Liger-Kernel's fused op.

Memory-bound: the forward reads x and residual and writes h and y (4 rows of bytes); the backward reads dy, dh and h
and writes dx once, for both inputs (4 more). Figure of merit: bandwidth against the copy measured in the same run.
"""

from __future__ import annotations

import torch

from tigon.bench.harness import bench_shapes, compiled, liger, make_impls, run_checks, time_checked, time_fwd_bwd
from tigon.bench.rms_norm import EPS, hf_rms_norm

OP = "add_rms_norm"
GPU_SHAPES = [(16384, 4096), (4096, 4096), (16384, 8192)]
CPU_SHAPES = [(256, 1024)]


def two_steps(x, r, w):
    """The decoder layer as transformers writes it: the add in the activations' dtype, then LlamaRMSNorm."""
    h = r + x
    return hf_rms_norm(h, w, EPS), h


def _tigon(ctx, args):
    import tigon

    return lambda x, r, w: tigon.ops.add_rms_norm(x, r, w, EPS)


def _torch_eager(ctx, args):
    return two_steps


def _torch_compile(ctx, args):
    return compiled(two_steps, ctx, args)


def _liger(ctx, args):
    fused = liger("liger_kernel.ops.fused_add_rms_norm", "LigerFusedAddRMSNormFunction", ctx)
    return lambda x, r, w: fused.apply(x, r, w, EPS, 0.0, "llama", False)  # not in place: the gradients survive


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "torch_compile": _torch_compile, "liger": _liger}


def _forward_backward(fn, x, r, w, grads):
    leaves = [t.detach().clone().requires_grad_() for t in (x, r, w)]
    y, h = fn(*leaves)
    return (y, h, *torch.autograd.grad((y, h), leaves, grads))


def _max_errors(fn, x, r, w, grads, ref) -> dict:
    """Max abs difference against the two steps in float32: y (and h), dx (and dresidual), dw."""
    got = _forward_backward(fn, x, r, w, grads)
    err = [(g.float() - e).abs().max().item() for g, e in zip(got, ref)]
    return {"err_y": max(err[0], err[1]), "err_dx": max(err[2], err[3]), "err_dw": err[4]}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "rows x hidden"):
        M, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        rand = lambda *size: torch.randn(*size, generator=gen, device=ctx.device)  # noqa: E731
        x, r, dy, dh = (rand(M, N).to(ctx.dtype) for _ in range(4))
        w = (1 + 0.1 * rand(N)).to(ctx.dtype)
        elt = x.element_size()
        nbytes = {"fwd": 4 * M * N * elt, "bwd": 4 * M * N * elt, "full": 8 * M * N * elt}  # weight negligible
        if "torch_compile" in fns:
            torch._dynamo.reset()
        ref = _forward_backward(two_steps, x.float(), r.float(), w.float(), (dy.float(), dh.float()))
        checks = run_checks(fns, lambda fn: _max_errors(fn, x, r, w, (dy, dh), ref))
        del ref
        results += time_checked(
            OP,
            f"{OP} {M}x{N}",
            shape,
            fns,
            checks,
            lambda fn: time_fwd_bwd(OP, fn, (x, r, w), (0, 1, 2), (dy, dh), ctx),
            nbytes,
            ctx,
        )
        del x, r, w, dy, dh
    return results
