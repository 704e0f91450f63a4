"""Distillation benchmarks.

run (ops distill_kl, distill_jsd): the divergence of student logits against teacher logits, both [M, V], at
temperature 2: tigon (from the logits, the gradient written over the student's) against torch eager (log_softmax of
both in fp32, then F.kl_div or the generalised JSD's formula, as TRL's GKD computes it), the same under torch.compile,
and Liger-Kernel (its KL / JSD on log_softmax outputs, which it takes as input), same inputs, same run. The op is
memory-bound: forward + backward reads both logits once and writes the gradient (3*M*V*2 B of bf16; forward alone
2*M*V*2 B), so GB/s and the share of the copy ceiling are the measure.

run_fused (op post_training_distill, on request like the other post-training losses): fused linear JSD from hidden
states at 8192 tokens x H 4096 x V 128256, tigon.losses.FusedLinearJSDLoss against torch eager (both models' logits
materialised) and Liger's LigerFusedLinearJSD: time and peak memory.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tigon.bench.cross_entropy import measure_logits
from tigon.bench.harness import bench_shapes, compiled, liger, make_impls, run_checks, time_checked
from tigon.bench.post_training import time_with_tflops

OPS = {"distill_kl": "kl", "distill_jsd": "jsd"}
GPU_SHAPES = [(8192, 128256)]
CPU_SHAPES = [(64, 4096)]
TEMPERATURE, BETA = 2.0, 0.5
OP_FUSED = "post_training_distill"
GPU_FUSED = [(8192, 4096, 128256)]
CPU_FUSED = [(64, 64, 500)]


def _log_mixture(logq, logp):
    """log(BETA p + (1 - BETA) q) from the two log-probabilities, as TRL's GKD loss forms it."""
    return torch.logsumexp(torch.stack([logq + math.log1p(-BETA), logp + math.log(BETA)]), 0)


def eager_divergence(kind: str, x: torch.Tensor, t: torch.Tensor, temperature: float = TEMPERATURE) -> torch.Tensor:
    """torch on [M, V] logits, fp32: KL(teacher || student) by F.kl_div, or the generalised JSD (TRL's GKD form),
    summed and divided by the rows."""
    logq = torch.log_softmax(x.float() / temperature, -1)
    with torch.no_grad():
        logp = torch.log_softmax(t.float() / temperature, -1)
    if kind == "kl":
        return F.kl_div(logq, logp, reduction="batchmean", log_target=True)
    logm = _log_mixture(logq, logp)
    kl_p = F.kl_div(logm, logp, reduction="sum", log_target=True)
    kl_q = F.kl_div(logm, logq, reduction="sum", log_target=True)
    return (BETA * kl_p + (1 - BETA) * kl_q) / x.shape[0]


# ---- implementations: (fn(student, teacher) -> loss, writes_over_student) or Skip --------------------------------------


def _tigon(kind, ctx, args):
    from tigon.ops.distill import jsd, kl_div

    if kind == "kl":
        return (
            lambda x, t: kl_div(x, t, "batchmean", temperature=TEMPERATURE, teacher_input="logits", in_place=True)
        ), True
    return (lambda x, t: jsd(x, t, BETA, TEMPERATURE, in_place=True)), True


def _torch_eager(kind, ctx, args):
    return (lambda x, t: eager_divergence(kind, x, t)), False


def _torch_compile(kind, ctx, args):
    return compiled(lambda x, t: eager_divergence(kind, x, t), ctx, args), False


def _liger(kind, ctx, args):
    # Liger's ops take log-probabilities: the log_softmax of both (fp32, as its tests feed it) is part of its time.
    def logprobs(x, t):
        with torch.no_grad():
            lp = torch.log_softmax(t.float() / TEMPERATURE, -1)
        return torch.log_softmax(x.float() / TEMPERATURE, -1), lp

    if kind == "kl":
        fn = liger("liger_kernel.ops.kl_div", "LigerKLDivLossFunction", ctx)
        return (lambda x, t: fn.apply(*logprobs(x, t), "batchmean", True)), False
    fn = liger("liger_kernel.ops.jsd", "LigerJSDFunction", ctx)
    return (lambda x, t: fn.apply(*logprobs(x, t), None, BETA, -100)), False


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "torch_compile": _torch_compile, "liger": _liger}


def run(args, ctx) -> list[dict]:
    results = []
    for op, kind in OPS.items():
        fns = make_impls(op, IMPLS, args, ctx, kind)
        names = {id(f): name for name, f in fns.items()}
        for shape in bench_shapes(op, args, ctx, GPU_SHAPES, CPU_SHAPES, "tokens x vocab"):
            M, V = shape
            gen = torch.Generator(device=ctx.device).manual_seed(0)
            x = (torch.randn(M, V, generator=gen, device=ctx.device) * 2).to(ctx.dtype)
            t = (x.float() + torch.randn(M, V, generator=gen, device=ctx.device)).to(ctx.dtype)  # a close teacher
            elt = x.element_size()
            nbytes = {"fwd": 2 * M * V * elt, "bwd": 2 * M * V * elt, "full": 3 * M * V * elt}
            if "torch_compile" in fns:
                torch._dynamo.reset()
            reference = lambda a, b, kind=kind: eager_divergence(kind, a, b)  # noqa: E731
            results += measure_logits(op, shape, fns, names, x, t, reference, nbytes, ctx)
            del x, t
    return results


# ---- fused linear JSD --------------------------------------------------------------------------------------------------


def eager_fused_jsd(xs, ws, xt, wt, labels):
    """Both models' logits materialised (x @ W.T in the model's dtype), then the JSD in fp32 over the kept tokens."""
    s = xs @ ws.T
    with torch.no_grad():
        t = xt @ wt.T
    keep = labels != -100
    logq, logp = torch.log_softmax(s.float(), -1), torch.log_softmax(t.float(), -1)
    logm = _log_mixture(logq, logp)
    rows = BETA * (logp.exp() * (logp - logm)).sum(-1) + (1 - BETA) * (logq.exp() * (logq - logm)).sum(-1)
    return (rows * keep).sum() / keep.sum()


def _fused_tigon(ctx, args):
    from tigon.losses import FusedLinearJSDLoss

    loss = FusedLinearJSDLoss(jsd_beta=BETA)
    return lambda xs, ws, xt, wt, labels: loss(xs, ws, xt, wt, labels)


def _fused_eager(ctx, args):
    return eager_fused_jsd


def _fused_liger(ctx, args):
    cls = liger("liger_kernel.transformers", "LigerFusedLinearJSD", ctx)
    loss = cls(jsd_beta=BETA)
    return lambda xs, ws, xt, wt, labels: loss(xs, ws, xt, wt, labels)


FUSED_IMPLS = {"tigon": _fused_tigon, "torch_eager": _fused_eager, "liger": _fused_liger}


def run_fused(args, ctx) -> list[dict]:
    results = []
    fns = make_impls(OP_FUSED, FUSED_IMPLS, args, ctx)
    for shape in bench_shapes(OP_FUSED, args, ctx, GPU_FUSED, CPU_FUSED, "tokens x hidden x vocab"):
        n, h, v = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        rand = lambda *s: torch.randn(*s, generator=gen, device=ctx.device)  # noqa: E731
        xs, xt = rand(n, h).to(ctx.dtype), rand(n, h).to(ctx.dtype)
        ws, wt = (rand(v, h) * h**-0.5).to(ctx.dtype), (rand(v, h) * h**-0.5).to(ctx.dtype)
        labels = torch.randint(0, v, (n,), generator=gen, device=ctx.device)
        labels[::9] = -100
        inputs = (xs, ws, xt, wt, labels)
        moved = (2 * n * h + 2 * v * h) * xs.element_size()
        nbytes = {"fwd": moved, "bwd": moved, "full": moved + (n * h + v * h) * xs.element_size()}
        flop = 8 * n * h * v  # the student's forward, dX and dW, and the teacher's forward
        label = f"{OP_FUSED} {'x'.join(map(str, shape))}"

        def grads(fn):
            a, b = (t.detach().requires_grad_(True) for t in inputs[:2])
            loss = fn(a, b, *inputs[2:])
            return (loss.detach(),) + torch.autograd.grad(loss, (a, b))

        ref = grads(eager_fused_jsd)
        checks = run_checks(
            fns,
            lambda fn: {
                f"err_{k}": (g.float() - r.float()).abs().max().item()
                for k, g, r in zip(("y", "dx", "dw"), grads(fn), ref)
            },
        )
        del ref

        def time_one(fn, label=label, inputs=inputs, flop=flop):
            return time_with_tflops(label, fn, inputs, flop, ctx)

        results += time_checked(OP_FUSED, label, shape, fns, checks, time_one, nbytes, ctx)
        del inputs
    return results
