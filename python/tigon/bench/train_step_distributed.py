"""Whole-model training step on several GPUs: the train_step configurations under FSDP2 (`fully_shard` on
every decoder layer and on the root) or DDP, one process per GPU (NCCL), transformers' model against the same model
after tigon.transformers.patch.

Each rank trains on its own batch × seq tokens (data parallel: the global batch grows with the GPUs), so tokens_per_s
counts all ranks' tokens; step_ms is the mean over the timed steps of the slowest rank's wall time (ranks meet at a
barrier before and after); peak_gib is the largest torch.cuda.max_memory_allocated over the ranks (memory per GPU).
The rest is train_step's: bf16 weights, SDPA, activation checkpointing, AdamW (foreach), random weights and tokens.
Needs 2 or more CUDA GPUs (the benchmark says it skips otherwise):

    python -m tigon.bench --ops train_step_fsdp2 [--quick]        # also train_step_ddp

`measure(...)` is the whole per-configuration run; tests call it on the CPU with gloo and a tiny model.
"""

from __future__ import annotations

import datetime
import os
import sys
import tempfile
import time

import torch

from tigon.bench import train_step
from tigon.bench.report import progress

WRAPPERS = ("fsdp2", "ddp")
IMPLS = ("hf", "tigon")


def wrap(model, wrapper: str, device: torch.device, world: int):
    """model under DDP, or under FSDP2 with fully_shard on every decoder layer and on the root (embeddings, final norm,
    lm_head), on a 1-D mesh of `world` ranks. The process group must be up."""
    if wrapper == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=None if device.type == "cpu" else [device])
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def finish() -> None:
    """A worker's clean end: every rank past its last collective, the group torn down, then the process ends without
    the interpreter's finalisation. Gloo's worker threads can still hold tensors of finished async work (DTensor's
    functional collectives) when Python tears down, and that teardown aborts the process (SIGABRT, "terminate called
    without an active exception") now and then on a loaded machine: CI saw it once."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _worker(
    rank: int,
    world: int,
    config,
    impl: str,
    wrapper: str,
    batch: int,
    seq: int,
    warmup: int,
    steps: int,
    dtype: torch.dtype,
    backend: str,
    init: str,
    out: str,
) -> None:
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    cuda = backend == "nccl"
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)  # several processes on one CPU
    dist.init_process_group(
        backend, init_method=init, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300)
    )
    try:
        torch.manual_seed(0)  # the same weights on every rank before sharding
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
        train_step._enable_checkpointing(model)
        model = train_step.IMPLS[impl]("")(model.train())
        model = wrap(model, wrapper, device, world)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
        gen = torch.Generator(device=device).manual_seed(1 + rank)  # each rank its own tokens
        ids = torch.randint(0, config.vocab_size, (batch, seq), generator=gen, device=device)

        def step():
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

        def sync():
            if cuda:
                torch.cuda.synchronize(device)
            dist.barrier()

        losses = [step() for _ in range(warmup)]
        sync()
        t0 = time.perf_counter()
        losses += [step() for _ in range(steps)]
        sync()
        step_ms = (time.perf_counter() - t0) * 1e3 / steps
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else 0.0
        mine = torch.tensor(
            [step_ms, peak, losses[0].float().item(), losses[-1].float().item()], dtype=torch.float64, device=device
        )
        everyone = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(everyone, mine)
        if rank == 0:
            rows = torch.stack(everyone).cpu()
            torch.save(
                {
                    "step_ms": rows[:, 0].max().item(),
                    "peak_gib": rows[:, 1].max().item(),
                    "loss_first": rows[:, 2].mean().item(),
                    "loss_last": rows[:, 3].mean().item(),
                    "params": sum(p.numel() for p in model.parameters()),
                },  # a DTensor counts its whole
                out,
            )
    except BaseException:
        dist.destroy_process_group()
        raise
    finish()


def measure(
    config,
    impl: str,
    wrapper: str,
    world: int,
    batch: int,
    seq: int,
    warmup: int,
    steps: int,
    dtype: torch.dtype,
    backend: str = "nccl",
) -> dict:
    """One configuration on `world` processes; rank 0's summary (step_ms, peak_gib, first/last mean loss)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        init = f"file://{os.path.join(tmp, 'rendezvous')}"
        mp.spawn(
            _worker,
            args=(world, config, impl, wrapper, batch, seq, warmup, steps, dtype, backend, init, out),
            nprocs=world,
            join=True,
        )
        res = torch.load(out)
    res["tokens_per_s"] = world * batch * seq / (res["step_ms"] * 1e-3)
    return res


def _run(wrapper: str, args, ctx) -> list[dict]:
    op = f"train_step_{wrapper}"
    world = torch.cuda.device_count() if ctx.device.type == "cuda" else 0
    if world < 2:
        ctx.note(f"{op}: skipped: needs 2 or more CUDA GPUs (found {world})")
        return []
    names = ["llama"] if args.quick else list(train_step.MODELS)
    warmup, steps = (2, 5) if args.quick else (3, 10)
    results = []
    for name in names:
        for impl in IMPLS:
            if args.impls and impl not in args.impls:
                continue
            rec = train_step._record(ctx, name, "foreach", impl, steps, world=world, wrapper=wrapper)
            rec["op"] = op
            try:
                rec.update(
                    measure(
                        train_step._config(name, train_step.SEQ),
                        impl,
                        wrapper,
                        world,
                        train_step.BATCH,
                        train_step.SEQ,
                        warmup,
                        steps,
                        ctx.dtype,
                    )
                )
                progress(
                    f"{op} {name} {impl} x{world}: {rec['step_ms']:.1f} ms/step, {rec['tokens_per_s']:.0f} "
                    f"tokens/s, peak {rec['peak_gib']:.2f} GiB per GPU, loss {rec['loss_first']:.4f} -> "
                    f"{rec['loss_last']:.4f}"
                )
            except Exception as e:  # an OOM or a failed rank must not lose the other rows
                progress(f"{op} {name} {impl}: FAILED {type(e).__name__}: {e}")
                rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            results.append(rec)
    return results


def run_fsdp2(args, ctx) -> list[dict]:
    return _run("fsdp2", args, ctx)


def run_ddp(args, ctx) -> list[dict]:
    return _run("ddp", args, ctx)
