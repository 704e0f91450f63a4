"""DPO's and GRPO's speed against their memory: forward + backward time and peak extra memory at several logits
budgets (the bytes of logits one chunk of sequence groups may hold; tigon.losses._in_forward.DEFAULT_BUDGET), beside
torch eager in the same run, on the benchmark's shapes and inputs (python -m tigon.bench --ops post_training). Each
chunk's dW GEMM reads and writes the whole [V, H] gradient, so fewer, larger chunks move less; the default should be
the smallest budget past which the time stops falling.

    python3 bench/sweeps/post_training_budget.py [--budgets-mib 256,512,1024,2048] [--reps 5]

One line per (loss, budget): chunks, ms, peak MiB, time and peak relative to the default budget's, and torch eager's
time over Tigon's. --device cpu is a smoke test of the script (tiny shapes, no memory statistics).
"""

import argparse
import types

import torch

from tigon.bench import post_training as pt
from tigon.bench.timing import peak_extra_mib, time_ms
from tigon.losses import _in_forward

ap = argparse.ArgumentParser()
ap.add_argument("--budgets-mib", default="256,512,1024,2048")
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--device", default="cuda")
args = ap.parse_args()
dev = torch.device(args.device)
ctx = types.SimpleNamespace(device=dev, dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32)
if dev.type == "cpu":
    args.budgets_mib, args.reps = "0.0625,0.25", 2
default = _in_forward.DEFAULT_BUDGET
budgets = sorted({int(float(b) * (1 << 20)) for b in args.budgets_mib.split(",")} | {default})

for op in (pt.OP_DPO, pt.OP_GRPO):
    shape = pt.GPU_SHAPES[op][0] if dev.type == "cuda" else pt.CPU_SHAPES[0]
    inputs = pt._inputs(op, shape, ctx)
    tigon_fn, eager_fn = pt._tigon(op, ctx, args), pt.eager_dpo if op == pt.OP_DPO else pt.eager_grpo
    groups = _in_forward.pair_groups(shape[0] // 2) if op == pt.OP_DPO else _in_forward.sequence_groups(shape[0])
    row_bytes = shape[1] * shape[3] * inputs[0].element_size()

    def step(fn):
        return pt._grads(fn, inputs)

    eager_ms = time_ms(lambda: step(eager_fn), dev, args.reps, 1)
    rows = {}
    for budget in budgets:
        _in_forward.DEFAULT_BUDGET = budget
        chunks = len(_in_forward._chunks(groups, row_bytes, budget))
        rows[budget] = (
            chunks,
            time_ms(lambda: step(tigon_fn), dev, args.reps, 1),
            peak_extra_mib(lambda: step(tigon_fn), dev),
        )
    _in_forward.DEFAULT_BUDGET = default
    base_ms, base_peak = rows[default][1], rows[default][2]
    print(
        f"\n{op} {'x'.join(map(str, shape))} (sequences x tokens x hidden x vocab), forward + backward, median of {args.reps}; torch eager {eager_ms:.2f} ms"
    )
    print(f"{'budget MiB':>10} {'chunks':>6} {'ms':>9} {'peak MiB':>9} {'x time':>7} {'x peak':>7} {'eager/tigon':>11}")
    for budget, (chunks, ms, peak) in rows.items():
        mark = " (default)" if budget == default else ""
        peak_s = f"{peak:9.0f}" if peak is not None else "        -"
        rel_peak = f"{peak / base_peak:7.2f}" if peak is not None and base_peak else "      -"
        print(
            f"{budget / (1 << 20):10.4g} {chunks:6d} {ms:9.2f} {peak_s} {ms / base_ms:7.3f} {rel_peak} {eager_ms / ms:11.3f}{mark}"
        )
