"""Cross entropy benchmark: tigon (gradient written over the logits) against Hugging Face's loss (F.cross_entropy on
logits.float()), the same under torch.compile, and Liger-Kernel, on the same inputs in the same run.

The op is memory-bound: the forward reads the logits once (M*V*2 B of bf16), forward + backward reads them and writes
the gradient (2*M*V*2 B). tigon and Liger compute the gradient in the forward; their "bwd" is a scale by grad_output.
Implementations that write over the logits get fresh logits each timed iteration (a clone outside the timed region).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import bench_shapes, compiled, liger, make_impls, run_checks, stream_fwd_full, time_checked
from tigon.bench.timing import input_copy, peak_extra_mib, time_ms

OP = "cross_entropy"
GPU_SHAPES = [(8192, 128256), (4096, 32000)]  # first = the headline (Llama 3 vocabulary, 8k tokens)
CPU_SHAPES = [(64, 4096)]


def hf_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """What Hugging Face's ForCausalLMLoss does with already shifted labels: upcast, then F.cross_entropy."""
    return F.cross_entropy(logits.float(), target, ignore_index=-100, reduction="mean")


# ---- implementations: (fn(logits, target) -> loss, writes_over_logits) or Skip -------------------------------------


def _tigon(ctx, args):
    from tigon.ops.cross_entropy import cross_entropy

    return (lambda x, t: cross_entropy(x, t, in_place=True)), True


def _torch_eager(ctx, args):
    return hf_loss, False


def _torch_compile(ctx, args):
    return compiled(hf_loss, ctx, args), False


def _liger(ctx, args):
    LigerCrossEntropyFunction = liger("liger_kernel.ops.cross_entropy", "LigerCrossEntropyFunction", ctx)
    # (input, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, ...); it writes the
    # gradient over the input, like tigon's in_place. It copies from the host inside (refused under CUDA-graph
    # capture), so its steady-state time is not attempted: a failed capture strands the memory it took.
    fn = lambda x, t: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean")[0]  # noqa: E731
    fn.capturable = False
    return fn, True


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "torch_compile": _torch_compile, "liger": _liger}


def _time_impl(fn, overwrites, x, t, ctx, impl: str) -> dict:
    device, reps, warmup = ctx.device, ctx.reps, ctx.warmup
    with torch.no_grad():
        fwd_ms = time_ms(lambda: fn(x, t), device, reps, warmup)  # no grad wanted: nothing is overwritten

    fresh = (lambda: input_copy(x, True)) if overwrites else (lambda: x.detach().requires_grad_())

    def forward_only():
        xg = fresh()
        return xg, fn(xg, t)

    bwd_ms = time_ms(lambda xl: torch.autograd.grad(xl[1], xl[0]), device, reps, warmup, setup=forward_only)
    full_ms = time_ms(lambda xg: torch.autograd.grad(fn(xg, t), xg), device, reps, warmup, setup=fresh)
    xg = fresh()
    peak = peak_extra_mib(lambda: torch.autograd.grad(fn(xg, t), xg), device)
    out = {"fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "full_ms": full_ms, "peak_mib": peak}
    if not getattr(fn, "capturable", True):
        ctx.note(f"{OP} {impl}: not graph-capturable, eager times only")
        return out
    try:  # steady state; implementations that write over the logits get fresh logits for every call
        out.update(stream_fwd_full(fn, (x, t), (0,), None, fwd_ms, full_ms, ctx, overwrites))
    except Exception as e:
        ctx.note(f"{OP} {impl}: CUDA graph timing failed, no steady-state time ({type(e).__name__}: {str(e)[:100]})")
    return out


def _check(fn, overwrites, x, t, ref_loss, ref_grad) -> dict:
    xg = input_copy(x, True)
    loss = fn(xg, t)
    (g,) = torch.autograd.grad(loss, xg)
    return {"err_loss": abs(loss.item() - ref_loss), "err_dx": (g.float() - ref_grad).abs().max().item()}


def measure_logits(op, shape, fns, names, x, t, reference, nbytes, ctx) -> list[dict]:
    """Every implementation of fn(logits, t) checked against reference(fp32 logits, t) and timed on one shape."""
    xr = x.detach().float().requires_grad_(True)
    ref_loss = reference(xr, t)
    (ref_grad,) = torch.autograd.grad(ref_loss, xr)
    ref_loss = ref_loss.item()
    checks = run_checks(fns, lambda f: _check(f[0], f[1], x, t, ref_loss, ref_grad))
    del xr, ref_grad
    label = f"{op} {'x'.join(map(str, shape))}"
    time = lambda f: _time_impl(f[0], f[1], x, t, ctx, names[id(f)])  # noqa: E731
    return time_checked(op, label, shape, fns, checks, time, nbytes, ctx)


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    names = {id(f): name for name, f in fns.items()}  # for notes about one implementation

    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "tokens x vocab"):
        M, V = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        x = (torch.randn(M, V, generator=gen, device=ctx.device) * 2).to(ctx.dtype)
        t = torch.randint(0, V, (M,), generator=gen, device=ctx.device)
        t[::17] = -100  # some padding, as in real batches
        elt = x.element_size()
        nbytes = {"fwd": M * V * elt, "bwd": 2 * M * V * elt, "full": 2 * M * V * elt}
        if "torch_compile" in fns:
            torch._dynamo.reset()

        results += measure_logits(OP, shape, fns, names, x, t, hf_loss, nbytes, ctx)
        del x, t
    return results
