"""Post-training losses from the hidden states: DPO with the reference model's log-probabilities computed in the same
pass, and GRPO (DAPO normalisation) with the reference likewise, each as tigon.losses, torch eager on materialised
logits (logits = x @ W.T in the model's dtype, then log_softmax in fp32, TRL's way) and Liger-Kernel's chunked
losses, same inputs, same run. Not in the default op list: `python -m tigon.bench --ops post_training`.

Shapes are sequences x tokens x hidden x vocab: DPO 16 sequences (8 pairs, chosen first) x 1024, GRPO 8 completions
x 1024, both at H 4096 and Llama 3's vocabulary. The work is GEMMs: the policy's forward, the backward's dX and dW
and the reference's forward, 8·N·H·V FLOP over the N tokens (tigon's backward recomputes the policy's logits chunk by
chunk, two more, not counted). peak = memory allocated during one forward + backward on top of the inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import bench_shapes, liger, make_impls, run_checks, time_checked, time_fwd_bwd
from tigon.bench.report import progress

OP_DPO, OP_GRPO = "post_training_dpo", "post_training_grpo"
GPU_SHAPES = {OP_DPO: [(16, 1024, 4096, 128256)], OP_GRPO: [(8, 1024, 4096, 128256)]}
CPU_SHAPES = [(4, 32, 64, 500)]
BETA_DPO, BETA_GRPO = 0.1, 0.04


def _eager_logps(x, w, t):
    """TRL's per-token log-probabilities: the lm_head in the model's dtype, log_softmax in fp32, gathered."""
    logp = torch.log_softmax((x @ w.T).float(), dim=-1)
    return logp.gather(-1, t.clamp(min=0).unsqueeze(-1)).squeeze(-1)


def eager_dpo(x, w, t, rx, rw):
    mask = t != -100
    logps = (_eager_logps(x, w, t) * mask).sum(-1)
    with torch.no_grad():
        ref = (_eager_logps(rx, rw, t) * mask).sum(-1)
    p = x.shape[0] // 2
    d = BETA_DPO * ((logps[:p] - ref[:p]) - (logps[p:] - ref[p:]))
    return -F.logsigmoid(d).mean()


def eager_grpo(x, w, ids, mask, adv, rx, rw):
    logp = _eager_logps(x, w, ids)
    with torch.no_grad():
        ref = _eager_logps(rx, rw, ids)
    coef_1 = torch.exp(logp - logp.detach())
    coef_2 = torch.clamp(coef_1, 0.8, 1.2)
    a = adv.unsqueeze(1)
    per_token = -torch.min(coef_1 * a, coef_2 * a) + BETA_GRPO * (torch.exp(ref - logp) - (ref - logp) - 1)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


# ---- implementations: fn(*inputs) -> loss, or Skip ------------------------------------------------------------------


def _tigon(op, ctx, args):
    from tigon.losses import FusedLinearDPOLoss, FusedLinearGRPOLoss

    if op == OP_DPO:
        dpo = FusedLinearDPOLoss(beta=BETA_DPO)
        return lambda x, w, t, rx, rw: dpo(w, x, t, ref_input=rx, ref_weight=rw)[0]
    grpo = FusedLinearGRPOLoss(beta=BETA_GRPO)
    return lambda x, w, ids, mask, adv, rx, rw: grpo(x, w, ids, mask, adv, ref_input=rx, ref_weight=rw)[0]


def _torch_eager(op, ctx, args):
    return eager_dpo if op == OP_DPO else eager_grpo


def _liger(op, ctx, args):
    if op == OP_DPO:
        loss_cls = liger("liger_kernel.chunked_loss", "LigerFusedLinearDPOLoss", ctx)
        dpo = loss_cls(beta=BETA_DPO)
        return lambda x, w, t, rx, rw: dpo(w, x, t, ref_input=rx, ref_weight=rw)[0]
    loss_cls = liger("liger_kernel.chunked_loss", "LigerFusedLinearGRPOLoss", ctx)
    grpo = loss_cls(beta=BETA_GRPO)
    return lambda x, w, ids, mask, adv, rx, rw: grpo(x, w, ids, mask, adv, ref_input=rx, ref_weight=rw)[0]


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "liger": _liger}


def _inputs(op, shape, ctx) -> tuple:
    b, t, h, v = shape
    gen = torch.Generator(device=ctx.device).manual_seed(0)
    rand = lambda *s: torch.randn(*s, generator=gen, device=ctx.device)  # noqa: E731
    x = rand(b, t, h).to(ctx.dtype)
    w = (rand(v, h) * h**-0.5).to(ctx.dtype)
    rx = (x.float() + 0.1 * rand(b, t, h)).to(ctx.dtype)  # a reference close to the policy, as it starts out
    rw = (w.float() + 0.1 * h**-0.5 * rand(v, h)).to(ctx.dtype)
    ids = torch.randint(0, v, (b, t), generator=gen, device=ctx.device)
    if op == OP_DPO:
        ids[:, : t // 4] = -100  # the prompt
        return x, w, ids, rx, rw
    mask = torch.ones(b, t, device=ctx.device)
    mask[b // 2 :, 3 * t // 4 :] = 0  # half the completions end early
    return x, w, ids, mask, rand(b), rx, rw


def _grads(fn, inputs):
    x, w = (t.detach().requires_grad_(True) for t in inputs[:2])
    loss = fn(x, w, *inputs[2:])
    return (loss.detach(),) + torch.autograd.grad(loss, (x, w))


def _errors(got, ref) -> dict:
    """Max abs difference of the loss, dX and dW against torch_eager (in float32)."""
    return {f"err_{k}": (g.float() - r.float()).abs().max().item() for k, g, r in zip(("y", "dx", "dw"), got, ref)}


def time_with_tflops(label, fn, inputs, flop, ctx) -> dict:
    """time_fwd_bwd of fn(*inputs) with gradients of the first two inputs, plus TFLOP/s of flop per call."""
    times = time_fwd_bwd(label, fn, inputs, (0, 1), None, ctx)
    for key in ("full", "full_graph", "full_dev"):
        ms = times.get(f"{key}_ms")
        times[f"tflops_{key}"] = flop / (ms * 1e-3) / 1e12 if ms else None
    if ctx.device.type == "cuda":
        progress(f"{label}: {times['full_ms']:.1f} ms forward + backward, peak {times['peak_mib'] / 1024:.2f} GiB")
    return times


def run(args, ctx) -> list[dict]:
    results = []
    for op in (OP_DPO, OP_GRPO):
        fns = make_impls(op, IMPLS, args, ctx, op)
        for shape in bench_shapes(op, args, ctx, GPU_SHAPES[op], CPU_SHAPES, "sequences x tokens x hidden x vocab"):
            b, t, h, v = shape
            inputs = _inputs(op, shape, ctx)
            n = b * t
            moved = (2 * n * h + 2 * v * h) * inputs[0].element_size()  # x, the reference's x, W, W_ref read
            nbytes = {"fwd": moved, "bwd": moved, "full": moved + (n * h + v * h) * inputs[0].element_size()}
            flop = 8 * n * h * v
            label = f"{op} {'x'.join(map(str, shape))}"

            ref = _grads(eager_dpo if op == OP_DPO else eager_grpo, inputs)
            checks = run_checks(fns, lambda fn: _errors(_grads(fn, inputs), ref))
            del ref

            def time_one(fn, label=label, inputs=inputs):
                return time_with_tflops(label, fn, inputs, flop, ctx)

            results += time_checked(op, label, shape, fns, checks, time_one, nbytes, ctx)
            del inputs
    return results
