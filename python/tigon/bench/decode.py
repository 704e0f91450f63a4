"""Generation speed: a Llama-3-8B-shaped model (random bf16 weights, no download) decoding 256 new tokens after a
128-token prompt at batch 1, 8 and 32, on

- tigon: tigon.optimize_model's decode loop called directly (the engine's generate: no option parsing);
- tigon_generate: the same loop through model.generate (what users call);
- hf: transformers' generate as it comes (eager, dynamic cache);
- hf_static: transformers' generate with cache_implementation="static" (transformers compiles the forward);
- compile_lean: a hand-written greedy loop over the model with transformers' StaticCache, its decode step under
  torch.compile(mode="max-autotune").

Greedy, every row forced to the full length (no stop token). tokens_per_s counts the new tokens of the batch over the
whole call (prompt pass included); ttft_ms is a call for one new token (the prompt pass and the first token); setup_s
is what a row pays once: optimize_model, or the first call's compilation or graph capture. agree: the fraction of new
tokens equal to hf's (bf16 rounding differs between implementations, so long greedy runs drift apart). On the CPU (or
with --quick there) a tiny Llama runs in seconds; compile rows on the CPU only with --cpu-compile. Not in the default
op list: python -m tigon.bench --ops decode [--quick]; --shapes 1,8 or 32x128x256 (batch[xprompt[xnew tokens]]) runs
those batch sizes only, so the full comparison (minutes of compilation per batch) can be split over runs.
"""

from __future__ import annotations

import gc
import inspect
import time
import traceback

import torch

from tigon.bench.report import Skip, progress
from tigon.bench.timing import synchronize, time_ms

OP = "decode"
GPU_SHAPE = ("llama-3-8b", 128, 256, (1, 8, 32))  # model, prompt, new tokens, batches
GPU_QUICK = ("llama-3-8b", 128, 128, (1, 8))
CPU_SHAPE = ("tiny-llama", 32, 64, (1, 4))
CPU_QUICK = ("tiny-llama", 16, 32, (1, 4))


def _timed_s(fn, device) -> float:
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


# ---- implementations: make(model, batch, length, ctx, args) -> (generate(ids, n) -> ids, setup seconds) ---------


def _tigon(model, batch, length, ctx, args, direct=True):
    import tigon

    setup = _timed_s(lambda: tigon.optimize_model(model, max_batch_size=batch, max_seq_len=length), ctx.device)
    engine = model.tigon_inference
    if direct:
        from tigon.inference._sampling import Sampling

        return lambda ids, n: engine.generate(ids, None, n, Sampling(), [], 0), setup
    return lambda ids, n: model.generate(ids, max_new_tokens=n, do_sample=False), setup


def _tigon_generate(model, batch, length, ctx, args):
    return _tigon(model, batch, length, ctx, args, direct=False)


def _hf(model, batch, length, ctx, args):
    return lambda ids, n: model.generate(ids, max_new_tokens=n, do_sample=False), 0.0


def _compiling(ctx, args):
    if ctx.device.type != "cuda" and not args.cpu_compile:
        raise Skip("torch.compile on the CPU is slow to compile: --cpu-compile runs it")


def _hf_static(model, batch, length, ctx, args):
    _compiling(ctx, args)
    return lambda ids, n: model.generate(ids, max_new_tokens=n, do_sample=False, cache_implementation="static"), 0.0


def _compile_lean(model, batch, length, ctx, args):
    _compiling(ctx, args)
    from transformers import StaticCache

    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    caches = {}

    def step(tokens, positions, cache):
        logits = model(input_ids=tokens, position_ids=positions, use_cache=True, **{key: cache}).logits
        return logits[:, -1].argmax(-1, keepdim=True)

    mode = "max-autotune" if ctx.device.type == "cuda" else None
    decode = torch.compile(step, mode=mode, fullgraph=True)

    @torch.no_grad()
    def generate(ids, n):
        cache = caches.get(ids.shape[1] + n)
        if cache is None:
            cache = caches[ids.shape[1] + n] = StaticCache(config=model.config, max_cache_len=ids.shape[1] + n)
        cache.reset()
        t = ids.shape[1]
        token = step(ids, torch.arange(t, device=ids.device)[None], cache)  # the prompt: eager
        out = [token]
        for i in range(n - 1):
            position = torch.full((ids.shape[0], 1), t + i, device=ids.device)
            token = decode(token, position, cache).clone()  # clone: a CUDA-graph replay reuses its output
            out.append(token)
        return torch.cat([ids] + out, dim=1)

    return generate, 0.0


IMPLS = {  # hf first: the others' agree is against its tokens
    "hf": _hf,
    "tigon": _tigon,
    "tigon_generate": _tigon_generate,
    "hf_static": _hf_static,
    "compile_lean": _compile_lean,
}


def _measure(make, model, batch, prompt, new, ctx, args) -> dict:
    gen = torch.Generator(device=ctx.device).manual_seed(batch)
    ids = torch.randint(3, model.config.vocab_size, (batch, prompt), generator=gen, device=ctx.device)
    generate, setup = make(model, batch, prompt + new, ctx, args)
    with torch.no_grad():
        first = _timed_s(lambda: generate(ids, new), ctx.device)  # compilation, graph capture
        reps = 1 if ctx.device.type == "cuda" and args.quick else 3
        total_ms = time_ms(lambda: generate(ids, new), ctx.device, reps=reps, warmup=0, flush=False)
        ttft_ms = time_ms(lambda: generate(ids, 1), ctx.device, reps=reps, warmup=1, flush=False)
        out = generate(ids, new)
    assert out.shape == (batch, prompt + new), f"generated {tuple(out.shape)}, expected {(batch, prompt + new)}"
    return {
        "tokens_per_s": batch * new / (total_ms * 1e-3),
        "ms_per_token": total_ms / new,
        "ttft_ms": ttft_ms,
        "setup_s": setup + max(0.0, first - total_ms * 1e-3),
        "tokens": out[:, prompt:].cpu(),
    }


def guarded_row(op: str, impl: str, model, ctx, measure, failed) -> dict | None:
    """One row of a whole-model benchmark: measure() -> its record. A Skip leaves the row out (noted); any other
    error becomes failed(message)'s record, so one failing row does not lose the others. Afterwards the model has
    its own code back and compiled code and cached GPU memory are released."""
    from tigon.inference import revert

    try:
        return measure()
    except Skip as s:
        ctx.note(f"{op}: {impl} skipped: {s}")
        return None
    except Exception as e:
        traceback.print_exc()
        return failed(f"{type(e).__name__}: {str(e)[:200]}")
    finally:
        revert(model)
        torch._dynamo.reset()
        gc.collect()
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()


def _record(ctx, name, dtype, impl, batch, prompt, new, **fields) -> dict:
    import transformers

    return {
        "op": OP,
        "model": name,
        "impl": impl,
        "shape": [batch, prompt, new],
        "batch": batch,
        "prompt": prompt,
        "new_tokens": new,
        "dtype": str(dtype).replace("torch.", ""),
        "tokens_per_s": None,
        "error": None,
        **fields,
        "transformers": transformers.__version__,
        **ctx.env,
    }


def run(args, ctx) -> list[dict]:
    from tigon.inference import configs

    gpu = ctx.device.type == "cuda"
    name, prompt, new, batches = (
        (GPU_QUICK if args.quick else GPU_SHAPE) if gpu else (CPU_QUICK if args.quick else CPU_SHAPE)
    )
    runs = {(prompt, new): batches}  # (prompt, new tokens) -> batch sizes
    if args.shapes:  # batch[xprompt[xnew tokens]] each: a bar's batch sizes over several runs (compiles are long)
        if any(not 1 <= len(s) <= 3 or min(s) < 1 for s in args.shapes):
            raise ValueError(f"{OP}: --shapes takes batch[xprompt[xnew_tokens]] entries, e.g. 1,8 or 32x128x256")
        runs = {}
        for s in args.shapes:
            runs.setdefault((s[1] if len(s) > 1 else prompt, s[2] if len(s) > 2 else new), []).append(s[0])
    names = [c for c in args.configs or [] if c in configs.CONFIGS] or [name]  # --configs: other model shapes
    results = []
    for name in names:
        for (p, n), b in runs.items():
            results += _run_model(args, ctx, name, p, n, b)
    return results


def _run_model(args, ctx, name, prompt, new, batches) -> list[dict]:
    from tigon.inference import configs

    gpu = ctx.device.type == "cuda"
    dtype = ctx.dtype if gpu else torch.float32
    model = configs.build(name, dtype, ctx.device)
    model.generation_config.eos_token_id = None  # every row decodes the full length
    results = []
    for batch in batches:
        reference = None
        for impl, make in IMPLS.items():
            if args.impls and impl not in args.impls:
                continue

            def measure():
                nonlocal reference
                m = _measure(make, model, batch, prompt, new, ctx, args)
                tokens = m.pop("tokens")
                reference = tokens if impl == "hf" else reference
                agree = None if reference is None else (tokens == reference).double().mean().item()
                progress(
                    f"{OP} {name} batch {batch} {impl}: {m['tokens_per_s']:.0f} tokens/s, "
                    f"{m['ms_per_token']:.2f} ms/token, first token {m['ttft_ms']:.1f} ms, setup {m['setup_s']:.1f} s"
                )
                return _record(ctx, name, dtype, impl, batch, prompt, new, **m, agree=agree)

            failed = lambda error: _record(ctx, name, dtype, impl, batch, prompt, new, error=error)  # noqa: E731
            rec = guarded_row(OP, impl, model, ctx, measure, failed)
            results += [rec] if rec is not None else []
    return results


def print_rows(rows: list[dict], what: str, cols: list[tuple[str, int]], key, cells, base: str = "hf") -> None:
    """A whole-model benchmark's table: a title (device, model, dtype, what was run, versions), then per row key(r)
    and the implementation, then cells(r, hf) (hf: the same shape's row of the `base` implementation, or None) or the
    row's error."""
    r0 = rows[0]
    print(
        f"\n{r0['op']}: {r0['gpu']} | {r0['model']} {r0['dtype']} | {what} | torch {r0['torch']} | "
        f"transformers {r0['transformers']} | git {r0['git_sha']}"
    )
    print("  ".join(n.ljust(w) if i == 1 else n.rjust(w) for i, (n, w) in enumerate(cols)))
    for r in rows:
        head = [key(r).rjust(cols[0][1]), r["impl"].ljust(cols[1][1])]
        if r.get("error"):
            print("  ".join(head + [f"FAILED: {r['error']}"[:100]]))
            continue
        hf = next((h for h in rows if h["shape"] == r["shape"] and h["impl"] == base and not h.get("error")), None)
        print("  ".join(head + [c.rjust(w) for c, (_, w) in zip(cells(r, hf), cols[2:])]))


def print_table(results: list[dict]) -> None:
    """One table per (model, prompt, new tokens)."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        if r["op"] == OP:
            groups.setdefault((r["model"], r["prompt"], r["new_tokens"]), []).append(r)
    for rows in groups.values():
        _print_group(rows)


def _print_group(rows: list[dict]) -> None:
    r0 = rows[0]
    cols = [("batch", 5), ("impl", 15), ("tokens/s", 9), ("ms/token", 9), ("x hf", 6), ("ttft ms", 8)]
    cols += [("setup s", 8), ("agree", 6)]
    print_rows(
        rows,
        f"prompt {r0['prompt']}, {r0['new_tokens']} new tokens, greedy",
        cols,
        lambda r: str(r["batch"]),
        lambda r, hf: [
            f"{r['tokens_per_s']:.0f}",
            f"{r['ms_per_token']:.2f}",
            f"{r['tokens_per_s'] / hf['tokens_per_s']:.2f}" if hf else "-",
            f"{r['ttft_ms']:.1f}",
            f"{r['setup_s']:.1f}",
            "-" if r.get("agree") is None else f"{r['agree']:.2f}",
        ],
    )
