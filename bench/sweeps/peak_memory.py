"""What is alive at a training step's forward + backward peak: the train-step benchmark's model and batch, one warm
step, then one step under torch's allocation recorder; the recorded trace is replayed to the moment the allocated
bytes peak, and the blocks alive then are listed by size with the Python frame that allocated them. Run it for two
implementations to see where their peaks differ. Diagnostic only (GPU).

  python bench/sweeps/peak_memory.py --config llama --impl tigon [--top 25]
"""

from __future__ import annotations

import argparse
import collections

import torch

from tigon.bench import train_step


def _frame(entry) -> str:
    """The innermost frame of the allocation's stack that is not torch's own machinery."""
    for f in entry.get("frames", []):
        name = f.get("filename", "")
        if "/torch/" not in name and "<" not in name:
            return f"{'/'.join(name.split('/')[-2:])}:{f.get('line')} {f.get('name')}"
    return "?"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="llama", choices=list(train_step.CONFIGS))
    p.add_argument("--impl", default="tigon", choices=list(train_step.IMPLS))
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    model, opt, inputs = train_step.build(args.config, train_step.IMPLS[args.impl], "cuda", torch.bfloat16)

    def step(record: bool):
        if record:
            torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=2_000_000)
        model(**inputs, use_cache=False).loss.backward()
        if record:
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
        opt.step()
        opt.zero_grad(set_to_none=True)  # as the benchmark steps: gradients are allocated in the backward
        return snap if record else None

    step(False)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    snap = step(True)
    live, now, peak, at_peak = {}, 0, 0, {}
    for ev in snap["device_traces"][0]:
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
            now += ev["size"]
            if now > peak:
                peak, at_peak = now, dict(live)
        elif ev["action"] == "free_completed":
            gone = live.pop(ev["addr"], None)
            now -= gone["size"] if gone else 0
    by_site = collections.Counter()
    for ev in at_peak.values():
        by_site[_frame(ev)] += ev["size"]
    print(f"{args.config} {args.impl}: {base / 2**30:.2f} GiB before the step, +{peak / 2**20:.0f} MiB at its peak")
    for site, size in by_site.most_common(args.top):
        print(f"  {size / 2**20:9.1f} MiB  {site}")


if __name__ == "__main__":
    main()
