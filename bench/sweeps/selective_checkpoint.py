"""What activation checkpointing costs a training step, and how much of it a selective policy wins back: the
train-step benchmark's model and batch, patched by one implementation, stepped under each checkpointing policy in
turn (step ms, forward + backward peak, the loss and a gradient checksum, which must agree across policies).

Policies (torch.utils.checkpoint's selective checkpointing, one decoder layer per checkpoint, non-reentrant):
  full       every layer recomputed whole (what the benchmark and trainers run)
  attention  attention's outputs kept (SDPA's output and log-sum-exp): its forward is not run again
  attn_proj  also the first N GEMM outputs of a layer kept (q, k, v, o in the families' order): the layer's recompute
             is then its norms, RoPE and the MLP
  none       no checkpointing (the speed ceiling; the peak is the activations')

Tigon's in-place RoPE writes over the q and k projections; attn_proj turns it off, as a saved output must not change.
Diagnostic only (GPU).

  python bench/sweeps/selective_checkpoint.py --config llama --impl tigon [--policies full,attention,attn_proj,none]
"""

from __future__ import annotations

import argparse
import gc
import time

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from tigon.bench import train_step

ATTENTION_OPS = {
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
}


def context_fn(policy: str, n_proj: int):
    def make():
        seen = {False: 0, True: 0}  # GEMMs met so far in this layer's forward and in its recompute

        def decide(ctx, func, *args, **kwargs):
            if func in ATTENTION_OPS:
                return CheckpointPolicy.MUST_SAVE
            if policy == "attn_proj" and func is torch.ops.aten.mm.default:
                n = seen[ctx.is_recompute]
                seen[ctx.is_recompute] += 1
                if n < n_proj:
                    return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(decide)

    return make


def apply(model, policy: str, n_proj: int) -> None:
    new = hasattr(model, "activation_checkpointing_enable")  # the old names are deprecated in newer transformers
    (model.activation_checkpointing_disable if new else model.gradient_checkpointing_disable)()
    if policy == "none":
        return
    kwargs = {"use_reentrant": False}
    if policy != "full":
        kwargs["context_fn"] = context_fn(policy, n_proj)
    if new:
        model.activation_checkpointing_enable(kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def measure(model, opt, inputs, warmup: int, steps: int) -> dict:
    peak = 0

    def step():
        nonlocal peak
        torch.cuda.reset_peak_memory_stats()
        model(**inputs, use_cache=False).loss.backward()
        peak = max(peak, torch.cuda.max_memory_allocated())
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    peak = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    return {"step_ms": ms, "peak_fwd_bwd_gib": peak / 2**30}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="llama", choices=list(train_step.CONFIGS))
    p.add_argument("--impl", default="tigon", choices=list(train_step.IMPLS))
    p.add_argument("--policies", default="full,attention,attn_proj,none")
    p.add_argument("--n-proj", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()

    if args.impl.startswith("tigon") and "attn_proj" in args.policies:
        import tigon.transformers._modules as modules

        modules._rotates_in_place = lambda q, k: False  # a saved projection must not be rotated over
    model, opt, inputs = train_step.build(args.config, train_step.IMPLS[args.impl], "cuda", torch.bfloat16)
    tokens = inputs["input_ids"].numel()
    for policy in args.policies.split(","):
        # the same weights and the same first step for every policy: the loss and gradient checksum must agree
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        apply(model, policy, args.n_proj)
        try:
            torch.cuda.empty_cache()
            loss = model(**inputs, use_cache=False).loss
            loss.backward()
            check = sum(p.grad.float().square().sum() for p in model.parameters() if p.grad is not None).item()
            model.zero_grad(set_to_none=True)
            r = measure(model, opt, inputs, 2, args.steps)
            print(
                f"{args.config} {args.impl} {policy:<10} {r['step_ms']:7.1f} ms/step  {tokens / r['step_ms'] * 1e3:8.0f}"
                f" tokens/s  fwd+bwd peak {r['peak_fwd_bwd_gib']:6.2f} GiB  loss {loss.item():.5f}  |grad|^2 {check:.6e}",
                flush=True,
            )
        except Exception as e:  # a policy the model cannot run (e.g. a saved output written over)
            print(f"{args.config} {args.impl} {policy:<10} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        model.zero_grad(set_to_none=True)
        model.load_state_dict(state)
        del state
        gc.collect()


if __name__ == "__main__":
    main()
