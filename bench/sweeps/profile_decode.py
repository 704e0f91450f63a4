"""Where a decode step's time goes: tigon.optimize_model's step on a model shape from tigon.inference.configs, its
kernels counted and timed by the PyTorch profiler over a few steps run eagerly (the CUDA graph replays the same
kernels back to back), beside the step's time replayed from its graph.

    python bench/sweeps/profile_decode.py [--model llama-3-8b] [--batch 1] [--prompt 128] [--steps 8]

Prints: kernels per step and their summed device time, the graph replay's time per step, and the kernels grouped by
name (calls per step, device µs per step, share). The gap between the replay and the kernels' sum is what launches and
dependencies cost inside the graph; the groups say which ops make up the launches.
"""

from __future__ import annotations

import argparse
import collections
import time

import torch

import tigon
from tigon.inference import configs
from tigon.inference._engine import MIN_CACHE_BUCKET, bucket
from tigon.inference._sampling import Sampling


@torch.inference_mode()  # the eager step below runs the decode ops, which refuse inputs that require grad
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="llama-3-8b")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--device", default="cuda", help="cuda; cpu only checks that the script runs (no kernels to count)")
    args = p.parse_args()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    model = configs.build(args.model, dtype=torch.bfloat16, device=args.device)
    tigon.optimize_model(model, max_batch_size=args.batch, max_seq_len=args.prompt + 8 * args.steps + 8)
    engine = model.tigon_inference
    ids = torch.randint(3, model.config.vocab_size - 1, (args.batch, args.prompt), device=args.device)

    def generate(n: int) -> None:
        engine.generate(ids, None, n, Sampling(), [], 0)
        sync()

    generate(2 * args.steps)  # captures the graphs the timed call replays
    t0 = time.perf_counter()
    generate(2 * args.steps)
    t1 = time.perf_counter()
    generate(args.steps)
    replay_ms = ((t1 - t0) - (time.perf_counter() - t1)) / args.steps * 1e3  # the prompt pass cancels out

    # the same step eagerly, continuing the last call's sequences, so the profiler sees each kernel
    generate(args.steps)
    rows, slot = bucket(args.batch, engine.max_batch_size), int(engine.slot)
    length = bucket(slot + args.steps + 1, engine.max_seq_len, MIN_CACHE_BUCKET)
    step = lambda: engine._decode(rows, length, Sampling())  # noqa: E731
    step()
    sync()
    activity = torch.profiler.ProfilerActivity.CUDA if args.device == "cuda" else torch.profiler.ProfilerActivity.CPU
    with torch.profiler.profile(activities=[activity]) as prof:
        for _ in range(args.steps - 1):
            step()
        sync()
    kernels = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels[e.name[:90]]
            k[0] += 1
            k[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    steps = args.steps - 1
    per_step = {name: (n / steps, us / steps) for name, (n, us) in kernels.items()}
    total_n = sum(n for n, _ in per_step.values())
    total_us = sum(us for _, us in per_step.values())
    print(f"{args.model}, batch {args.batch}, prompt {args.prompt}: graph replay {replay_ms:.3f} ms per step")
    print(f"kernels per step {total_n:.0f}, their device time {total_us / 1e3:.3f} ms")
    total_us = max(total_us, 1e-9)
    print(f"{'calls':>7} {'us':>9} {'share':>6}  kernel")
    for name, (n, us) in sorted(per_step.items(), key=lambda kv: -kv[1][1])[:30]:
        print(f"{n:7.1f} {us:9.1f} {us / total_us:6.1%}  {name}")


if __name__ == "__main__":
    main()
