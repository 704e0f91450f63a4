"""Where a training step's device time goes: the train-step benchmark's model and batch, patched by each named
implementation in turn, warm steps, then steps under the PyTorch profiler; the kernels grouped by what they do (GEMMs,
attention, norms, RoPE, the MLP's activation, the loss, the optimizer, embedding, torch's elementwise and copy kernels,
the rest), device ms per step, and the heaviest kernels by name. Side by side, the groups say where two step times
differ. Diagnostic only (GPU).

  python bench/sweeps/profile_train_step.py --config llama --impls tigon,liger [--steps 2] [--top 10]
      [--ops 'copy|clone|add'] (also: the torch ops whose names match, by device ms, input shapes and call site)
"""

from __future__ import annotations

import argparse
import collections
import gc
import re

import torch

from tigon.bench import train_step

# First match wins: cuDNN's attention kernels name GEMMs too, Tigon's fused loss runs cuBLAS GEMMs (counted as GEMMs).
GROUPS = (
    ("attention", r"flash|fmha|sdpa|attn|attention"),
    ("optimizer", r"adam|multi_tensor"),
    ("gemm", r"gemm|gemv|xmma|cutlass|nvjet|cublas|matmul|splitk"),
    ("norm", r"rms|norm"),
    ("rope", r"rope|rotary"),
    ("mlp activation", r"swiglu|geglu|silu|gelu|glu|activation"),
    ("loss", r"cross_?entropy|softmax|lce|nll|logsumexp"),
    ("embedding", r"embedding|index"),
    ("elementwise / copy", r"elementwise|vectorized|copy|fill|cat|reduce|memcpy|memset"),
)


def group_of(kernel: str) -> str:
    name = kernel.lower()
    return next((g for g, pattern in GROUPS if re.search(pattern, name)), "other")


def profile(config: str, impl: str, steps: int, ops: str | None = None, top: int = 10) -> dict[str, float]:
    """Device µs per step by kernel name, for one implementation (and, with ops, the matching torch ops printed)."""
    model, opt, inputs = train_step.build(config, train_step.IMPLS[impl], "cuda", torch.bfloat16)

    def step():
        model(**inputs, use_cache=False).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA] + ([torch.profiler.ProfilerActivity.CPU] if ops else [])
    with torch.profiler.profile(activities=activities, record_shapes=bool(ops), with_stack=bool(ops)) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    per_kernel = collections.Counter()
    for ev in prof.key_averages():
        us = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if us and ev.key:
            per_kernel[ev.key] += us / steps
    if ops:
        print(f"{impl}: torch ops matching {ops!r} (device ms per step, input shapes, call site)")
        matched = [
            ev
            for ev in prof.key_averages(group_by_input_shape=True, group_by_stack_n=6)
            if re.search(ops, ev.key) and (getattr(ev, "device_time_total", 0) or 0) > 0
        ]
        for ev in sorted(matched, key=lambda e: -e.device_time_total)[:top]:
            site = " <- ".join(f for f in ev.stack if "site-packages/torch/" not in f)[:400] if ev.stack else ""
            print(
                f"  {ev.device_time_total / steps / 1e3:8.2f}  {ev.key} {str(ev.input_shapes)[:120]}\n            {site}"
            )
    return per_kernel


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="llama", choices=list(train_step.CONFIGS))
    p.add_argument(
        "--impls", default="tigon,liger", help=f"in this order (Liger's class patch stays): {list(train_step.IMPLS)}"
    )
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--ops", default=None, help="regex: also list the torch ops (aten::...) matching it")
    args = p.parse_args()
    impls = [i for i in train_step.IMPLS if i in args.impls.split(",")]  # the benchmark's order
    kernels = {}
    for impl in impls:
        kernels[impl] = profile(args.config, impl, args.steps, args.ops, args.top)
        gc.collect()  # the last implementation's model, before the next one's
        torch.cuda.empty_cache()
    groups = {impl: collections.Counter() for impl in impls}
    for impl, per_kernel in kernels.items():
        for kernel, us in per_kernel.items():
            groups[impl][group_of(kernel)] += us
    print(f"{args.config}: device ms per step by group")
    print(f"  {'group':20s}" + "".join(f"{impl:>12s}" for impl in impls))
    for g in [g for g, _ in GROUPS] + ["other", "total"]:
        row = [sum(groups[i].values()) if g == "total" else groups[i][g] for i in impls]
        print(f"  {g:20s}" + "".join(f"{us / 1e3:12.2f}" for us in row))
    for impl in impls:
        print(f"{impl}: heaviest kernels (ms per step, group)")
        for kernel, us in kernels[impl].most_common(args.top):
            print(f"  {us / 1e3:8.2f}  {group_of(kernel):18s} {kernel[:110]}")


if __name__ == "__main__":
    main()
