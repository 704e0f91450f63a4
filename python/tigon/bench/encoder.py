"""Encoder inference speed: a BERT-base-shaped model (random weights, no download) over batch x sequence 1 x 128,
8 x 512 and 32 x 256, on

- tigon: tigon.optimize_model's encoder path (CUDA-graph buckets on a GPU);
- hf: transformers' forward as it comes (SDPA attention, eager);
- compile: torch.compile(model) with the default mode;
- compile_max_autotune: torch.compile(model, mode="max-autotune").

Every row runs one forward under torch.no_grad() on full-length sequences (an all-ones attention mask). ms is the
median latency of one call, sequences_per_s the batch over it; setup_s is what a row pays once (optimize_model, or
the first call's compilation or graph capture); max_diff: the largest difference of the last hidden state from hf's,
relative to hf's largest magnitude. On the CPU a tiny BERT runs in seconds; compile rows on the CPU only with
--cpu-compile. Not in the default op list: python -m tigon.bench --ops encoder [--quick].
"""

from __future__ import annotations

import copy
import time

import torch

from tigon.bench.decode import guarded_row, print_rows
from tigon.bench.report import Skip, progress
from tigon.bench.timing import synchronize, time_ms

OP = "encoder"
GPU_SHAPE = ("bert-base", ((1, 128), (8, 512), (32, 256)))  # model, (batch, sequence) pairs
GPU_QUICK = ("bert-base", ((1, 128), (8, 512)))
CPU_SHAPE = ("tiny-bert", ((1, 32), (4, 64)))
CPU_QUICK = ("tiny-bert", ((1, 16), (2, 32)))


# ---- implementations: make(model, ctx, args) -> the model to call -------------------------------------------------


def _tigon(model, ctx, args):
    import tigon

    return tigon.optimize_model(model)


def _hf(model, ctx, args):
    return model


def _compiled(mode):
    def make(model, ctx, args):
        if ctx.device.type != "cuda" and not args.cpu_compile:
            raise Skip("torch.compile on the CPU is slow to compile: --cpu-compile runs it")
        compiled = torch.compile(model, mode=mode)
        if mode != "max-autotune":
            return compiled

        def call(*args, **kwargs):  # its CUDA graphs' outputs live until the next call's step begins: mark each call
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(*args, **kwargs)

        return call

    return make


IMPLS = {  # hf first: the others' max_diff is against its output
    "hf": _hf,
    "tigon": _tigon,
    "compile": _compiled(None),
    "compile_max_autotune": _compiled("max-autotune"),
}


def _measure(make, model, batch, seq, ctx, args) -> dict:
    gen = torch.Generator(device=ctx.device).manual_seed(batch * seq)
    ids = torch.randint(3, model.config.vocab_size, (batch, seq), generator=gen, device=ctx.device)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        t0 = time.perf_counter()
        run = make(model, ctx, args)
        first = run(ids, attention_mask=mask).last_hidden_state.clone()  # compilation, graph capture; kept past reruns
        synchronize(ctx.device)
        setup = time.perf_counter() - t0
        reps, warmup = (ctx.reps, ctx.warmup) if ctx.device.type == "cuda" else (3 if args.quick else 5, 1)
        ms = time_ms(lambda: run(ids, attention_mask=mask), ctx.device, reps=reps, warmup=warmup, flush=False)
    return {"ms": ms, "sequences_per_s": batch / (ms * 1e-3), "setup_s": max(0.0, setup - ms * 1e-3), "out": first}


def _record(ctx, name, dtype, impl, batch, seq, **fields) -> dict:
    import transformers

    return {
        "op": OP,
        "model": name,
        "impl": impl,
        "shape": [batch, seq],
        "batch": batch,
        "seq": seq,
        "dtype": str(dtype).replace("torch.", ""),
        "ms": None,
        "sequences_per_s": None,
        "error": None,
        **fields,
        "transformers": transformers.__version__,
        **ctx.env,
    }


def run(args, ctx) -> list[dict]:
    from tigon.inference import configs

    gpu = ctx.device.type == "cuda"
    name, shapes = (GPU_QUICK if args.quick else GPU_SHAPE) if gpu else (CPU_QUICK if args.quick else CPU_SHAPE)
    if args.shapes:
        shapes = [s for s in args.shapes if len(s) == 2] or shapes
    dtype = ctx.dtype if gpu else torch.float32
    base = configs.build_encoder(name, dtype, ctx.device, attn_implementation="sdpa")
    results = []
    for batch, seq in shapes:
        reference = None
        for impl, make in IMPLS.items():
            if args.impls and impl not in args.impls:
                continue
            model = copy.deepcopy(base)  # a compiled or optimized model never leaks into the next row

            def measure():
                nonlocal reference
                m = _measure(make, model, batch, seq, ctx, args)
                out = m.pop("out").float()
                reference = out if impl == "hf" else reference
                diff = None if reference is None else ((out - reference).abs().max() / reference.abs().max()).item()
                progress(
                    f"{OP} {name} {batch}x{seq} {impl}: {m['ms']:.2f} ms, {m['sequences_per_s']:.0f} sequences/s, "
                    f"setup {m['setup_s']:.1f} s"
                )
                return _record(ctx, name, dtype, impl, batch, seq, **m, max_diff=diff)

            failed = lambda error: _record(ctx, name, dtype, impl, batch, seq, error=error)  # noqa: E731
            rec = guarded_row(OP, impl, model, ctx, measure, failed)
            results += [rec] if rec is not None else []
    return results


def print_table(results: list[dict]) -> None:
    rows = [r for r in results if r["op"] == OP]
    if not rows:
        return
    cols = [("batch x seq", 11), ("impl", 21), ("ms", 9), ("seq/s", 9), ("x hf", 6), ("setup s", 8), ("max diff", 9)]
    print_rows(
        rows,
        "forward, no_grad, full-length sequences",
        cols,
        lambda r: f"{r['batch']}x{r['seq']}",
        lambda r, hf: [
            f"{r['ms']:.2f}",
            f"{r['sequences_per_s']:.0f}",
            f"{hf['ms'] / r['ms']:.2f}" if hf else "-",
            f"{r['setup_s']:.1f}",
            "-" if r.get("max_diff") is None else f"{r['max_diff']:.1e}",
        ],
    )
