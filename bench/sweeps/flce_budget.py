"""Fused linear + cross entropy's speed against its memory: the forward + backward time and peak extra memory of one
pass at several logits budgets (the bytes of logits one chunk may hold), beside Liger's in the same run. The default
budget should be the smallest at which the GEMMs still run at full speed (docs/design/fused-linear-cross-entropy.md).

    python3 bench/sweeps/flce_budget.py [--shapes 4096x4096x128256,16384x4096x128256] [--budgets-mib 128,...] [--reps 10]

One line per (shape, budget): tokens per chunk, chunks, ms, peak MiB, and time and peak relative to the default
budget's; then Liger's. --device cpu is a smoke test of the script (small shape, no memory statistics).
"""

import argparse

import torch

import tigon  # noqa: F401  (registers the ops)
from tigon.bench.timing import peak_extra_mib, time_ms
from tigon.ops.fused_linear_cross_entropy import DEFAULT_MEMORY_BUDGET, chunk_plan, fused_linear_cross_entropy

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="4096x4096x128256,16384x4096x128256,8192x4096x32000")
ap.add_argument("--budgets-mib", default="128,256,384,512,768,1024,1536")
ap.add_argument("--reps", type=int, default=10)
ap.add_argument("--device", default="cuda")
args = ap.parse_args()
dev, dt = torch.device(args.device), torch.bfloat16
if dev.type == "cpu":
    args.shapes, args.budgets_mib, args.reps = "64x32x1000", "0.0625,0.125", 2

try:
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
except ImportError:
    LigerFusedLinearCrossEntropyLoss = None

for shape in args.shapes.split(","):
    n, h, v = map(int, shape.split("x"))
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, h, generator=gen, device=dev).to(dt).requires_grad_()
    w = (torch.randn(v, h, generator=gen, device=dev) / h**0.5).to(dt).requires_grad_()
    t = torch.randint(0, v, (n,), generator=gen, device=dev)

    def step(budget):
        loss = fused_linear_cross_entropy(x, w, t, memory_budget=budget)
        return torch.autograd.grad(loss, (x, w))

    budgets = sorted({int(float(b) * (1 << 20)) for b in args.budgets_mib.split(",")} | {DEFAULT_MEMORY_BUDGET})
    rows = {}
    for budget in budgets:
        _, chunk = chunk_plan(x, w, memory_budget=budget)
        ms = time_ms(lambda: step(budget), dev, args.reps, 2)
        peak = peak_extra_mib(lambda: step(budget), dev)
        rows[budget] = (chunk, ms, peak)
    base_ms, base_peak = rows[DEFAULT_MEMORY_BUDGET][1], rows[DEFAULT_MEMORY_BUDGET][2]
    print(f"\n{shape} (tokens x hidden x vocab), bf16, forward + backward, median of {args.reps}")
    print(f"{'budget MiB':>10} {'chunk':>7} {'chunks':>6} {'ms':>9} {'peak MiB':>9} {'x time':>7} {'x peak':>7}")
    for budget, (chunk, ms, peak) in rows.items():
        mark = " (default)" if budget == DEFAULT_MEMORY_BUDGET else ""
        rel_peak = f"{peak / base_peak:7.2f}" if peak is not None and base_peak else "      -"
        peak_s = f"{peak:9.0f}" if peak is not None else "        -"
        print(
            f"{budget / (1 << 20):10.0f} {chunk:7d} {-(-n // chunk):6d} {ms:9.3f} {peak_s} {ms / base_ms:7.3f} "
            f"{rel_peak}{mark}"
        )
    if LigerFusedLinearCrossEntropyLoss is not None and dev.type == "cuda":
        liger_loss = LigerFusedLinearCrossEntropyLoss()

        def liger():  # (lin_weight, _input, target), the order Liger's loss module takes
            out = liger_loss(w, x, t)
            out = out[0] if isinstance(out, tuple) else getattr(out, "loss", out)
            return torch.autograd.grad(out, (x, w))

        ms, peak = time_ms(liger, dev, args.reps, 2), peak_extra_mib(liger, dev)
        print(f"{'liger':>10} {'':>7} {'':>6} {ms:9.3f} {peak:9.0f} {ms / base_ms:7.3f} {peak / base_peak:7.2f}")
