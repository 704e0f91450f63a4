"""Whole-model training step: a Hugging Face causal LM as transformers builds it, the same model after
tigon.transformers.patch (tigon: attention kept on SDPA, patch's default; tigon_attention: Tigon's attention too, where
this GPU and build have it, so the two rows show what it adds), and (when importable) after Liger-Kernel's
apply_liger_kernel_to_<family>.

One step = forward with labels=input_ids, backward, AdamW step (fused, what current trainers use; outside --quick also
foreach, which holds a temporary per parameter), zero_grad; bf16 weights, SDPA attention (built with
attn_implementation="sdpa"; the tigon_attention row switches it to "tigon"), activation checkpointing (non-reentrant),
random weights and tokens (no download). Configurations: the four models at batch 4 x 2048 (the mixture-of-experts one
in transformers' default grouped_mm experts, with its load-balancing loss), and the Llama-style one at 1 x 16384
tokens and as a padding-free packed batch (documents of mixed lengths in one row, position_ids restarting at each, the
first label of each document ignored, as DataCollatorWithFlattening builds it). step_ms is the mean over the timed
steps (host overhead included: what a training loop sees), after warm-up steps that allocate the optimizer state;
peak_gib is torch.cuda.max_memory_allocated over warm-up and timed steps (weights, gradients and optimizer state
included); peak_fwd_bwd_gib the same over the timed steps' forward and backward alone, before the optimizer step (whose
own peak, weights + gradients + moments (+ foreach AdamW's temporary sqrt of every second moment), no model kernel
changes); states_gib is weights + gradients + moments. GPU only: on a CPU the benchmark notes that it skips. Slow (each
configuration builds a 1-2 B-parameter model, 5.6 B for the mixture of experts, once per implementation), so it is not
in the default op list: python -m tigon.bench --ops train_step [--quick]; --quick runs the Llama-style model alone.
"""

from __future__ import annotations

import gc
import importlib.util
import time
import traceback

import torch

from tigon.bench.report import Skip, progress
from tigon.inference.configs import QWEN3_30B_A3B

OP = "train_step"
BATCH, SEQ = 4, 2048

# Llama-style (the shape the targets name), plus one Gemma-style (Gemma 3 1B's shape: GeGLU, (1 + w) norms in fp32, q/k norms,
# 262k tied vocabulary), one Qwen-style (Qwen3 1.7B's shape: q/k norms, 152k tied vocabulary) and one mixture of experts
# (Qwen3-30B-A3B's layers: 128 SwiGLU experts, 8 per token, beside the same attention).
MODELS = {
    "llama": (
        "LlamaConfig",
        dict(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=500000.0),
        ),
    ),
    "gemma3_text": (
        "Gemma3TextConfig",
        dict(
            hidden_size=1152,
            intermediate_size=6912,
            num_hidden_layers=26,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
            vocab_size=262144,
            sliding_window=512,
            query_pre_attn_scalar=256,
        ),
    ),
    "qwen3": (
        "Qwen3Config",
        dict(
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
    ),
    # Qwen3-30B-A3B's shape with 8 of its 48 layers (5.6 B parameters, 1.1 B active per token: its states fit one GPU).
    # The released config leaves output_router_logits off (inference); training adds the load-balancing loss, at the
    # released coefficient, and so pays for the router logits of every layer.
    "qwen3_moe": (
        "Qwen3MoeConfig",
        dict(
            QWEN3_30B_A3B,
            num_hidden_layers=8,
            output_router_logits=True,
            router_aux_loss_coef=0.001,
            tie_word_embeddings=False,
        ),
    ),
}
# Run configurations: (model, batch, tokens per row, packed document lengths or None).
CONFIGS = {
    "llama": ("llama", BATCH, SEQ, None),
    "gemma3_text": ("gemma3_text", BATCH, SEQ, None),
    "qwen3": ("qwen3", BATCH, SEQ, None),
    "qwen3_moe": ("qwen3_moe", BATCH, SEQ, None),
    "llama_16k": ("llama", 1, 16384, None),
    "llama_packed": ("llama", 1, BATCH * SEQ, (1024, 3072, 512, 2560, 1024)),
}
OPTIMIZERS = ("fused", "foreach")
LIGER = {
    "llama": "apply_liger_kernel_to_llama",
    "gemma3_text": "apply_liger_kernel_to_gemma3_text",
    "qwen3": "apply_liger_kernel_to_qwen3",
    "qwen3_moe": "apply_liger_kernel_to_qwen3_moe",
}


def _config(name: str, seq: int):
    import transformers

    cls, kwargs = MODELS[name]
    return getattr(transformers, cls)(**{**kwargs, "max_position_embeddings": seq})


def _batch(model, batch: int, seq: int, docs, device) -> dict:
    """input_ids and labels (and, packed, position_ids restarting at each document, whose first label is ignored)."""
    gen = torch.Generator(device=device).manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen, device=device)
    if docs is None:
        return {"input_ids": ids, "labels": ids}
    assert sum(docs) == seq, "packed documents must fill the row"
    pos = torch.cat([torch.arange(n, device=device) for n in docs]).unsqueeze(0)
    labels = ids.masked_fill(pos == 0, -100)
    return {"input_ids": ids, "labels": labels, "position_ids": pos}


def _enable_checkpointing(model) -> None:
    if hasattr(model, "activation_checkpointing_enable"):  # newer transformers; the old name is deprecated there
        model.activation_checkpointing_enable({"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


# ---- implementations: prepare(name) before the model is built, patch(model) after ---------------------------------


def _hf(name):
    return lambda model: model


def _tigon(name):
    import tigon.transformers

    return lambda model: tigon.transformers.patch(model)


def _tigon_attention(name):
    import tigon.transformers
    from tigon.transformers import attention

    def patch(model):
        if not attention.available(next(model.parameters()).device):
            raise Skip("Tigon's attention is not available here (no flash_attention op, or not an sm_90 GPU)")
        return tigon.transformers.patch(model, attention=True)

    return patch


def _liger(name):
    try:
        import liger_kernel.transformers as liger
    except Exception as e:  # ImportError, or Triton failing to initialise
        raise Skip(f"liger_kernel not importable ({type(e).__name__}: {e})")
    apply = getattr(liger, LIGER[name], None)
    if apply is None:
        raise Skip(f"this liger_kernel has no {LIGER[name]}")
    apply()  # class level, before the model is built (so Liger runs last for each family)
    return lambda model: model


IMPLS = {
    "hf": _hf,
    "tigon": _tigon,
    "tigon_attention": _tigon_attention,
    "liger": _liger,
}  # this order: Liger's class-level patch stays in the process


def build(config: str, prepare, device, dtype, optimizer: str = "fused"):
    """The configuration's model (checkpointed, in training mode) patched by prepare (an IMPLS entry), its AdamW and
    its batch: what a step runs (the diagnostics in bench/sweeps build theirs here too)."""
    from transformers import AutoModelForCausalLM

    name, batch, seq, docs = CONFIGS[config]
    finish = prepare(name)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(_config(name, seq), dtype=dtype, attn_implementation="sdpa")
    _enable_checkpointing(model)
    model = finish(model.train())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **{optimizer: True})
    return model, opt, _batch(model, batch, seq, docs, device)


def _measure(config: str, optimizer: str, prepare, ctx, warmup: int, steps: int) -> dict:
    _, batch, seq, _ = CONFIGS[config]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(ctx.device)
    model, opt, inputs = build(config, prepare, ctx.device, ctx.dtype, optimizer)

    peak_all = peak_model = 0

    def step():
        # The peak of the forward and backward alone as well (the model's activations and the loss, what the patch
        # changes), apart from the optimizer step's: AdamW holds weights, gradients and both moments (foreach also one
        # temporary per parameter, its sqrt of the second moment) at once, whatever the model's kernels.
        nonlocal peak_all, peak_model
        torch.cuda.reset_peak_memory_stats(ctx.device)  # the previous step's peak is in peak_all already
        loss = model(**inputs, use_cache=False).loss
        loss.backward()
        peak_model = max(peak_model, torch.cuda.max_memory_allocated(ctx.device))
        opt.step()
        opt.zero_grad(set_to_none=True)
        peak_all = max(peak_all, torch.cuda.max_memory_allocated(ctx.device))
        return loss.detach()

    losses = [step() for _ in range(warmup)]
    torch.cuda.synchronize(ctx.device)
    peak_model = 0  # the timed steps' peaks (the first step's includes allocating the optimizer state)
    t0 = time.perf_counter()
    losses += [step() for _ in range(steps)]
    torch.cuda.synchronize(ctx.device)
    step_ms = (time.perf_counter() - t0) * 1e3 / steps
    n_params = sum(p.numel() for p in model.parameters())
    out = {
        "step_ms": step_ms,
        "tokens_per_s": batch * seq / (step_ms * 1e-3),
        "peak_gib": peak_all / 2**30,
        "peak_fwd_bwd_gib": peak_model / 2**30,
        # weights + gradients + two AdamW moments, in the weights' dtype: the floor of any step's peak
        "states_gib": 4 * sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30,
        "loss_first": losses[0].item(),
        "loss_last": losses[-1].item(),
        "params": n_params,
    }
    return out


def _record(ctx, config, optimizer, impl, steps, **fields) -> dict:
    import transformers

    name, batch, seq, docs = CONFIGS[config]
    return {
        "op": OP,
        "model": config,
        "family": name,
        "impl": impl,
        "batch": batch,
        "seq": seq,
        "packed": list(docs) if docs else None,
        "optimizer": optimizer,
        "dtype": str(ctx.dtype).replace("torch.", ""),
        "steps": steps,
        "step_ms": None,
        "tokens_per_s": None,
        "peak_gib": None,
        "error": None,
        **fields,
        "transformers": transformers.__version__,
        **ctx.env,
    }


def run(args, ctx) -> list[dict]:
    if ctx.device.type != "cuda":
        ctx.note(f"{OP}: skipped: a whole-model training step needs a CUDA device")
        return []
    if importlib.util.find_spec("transformers") is None:
        ctx.note(f"{OP}: skipped: transformers is not installed (pip install '.[hf]')")
        return []
    if args.shapes:
        ctx.note(f"{OP}: --shapes does not apply (fixed model configurations: {', '.join(CONFIGS)})")
    # --configs: those, with fused AdamW; quick: the Llama-style model with fused AdamW; else every configuration, and
    # the first also with foreach AdamW
    if args.configs:
        runs = [(c, "fused") for c in args.configs if c in CONFIGS]  # the rest name decode models
    else:
        runs = [("llama", "fused")] if args.quick else [(c, "fused") for c in CONFIGS] + [("llama", "foreach")]
    warmup, steps = (2, 5) if args.quick else (3, 10)
    results = []
    for config, optimizer in runs:
        for impl, make in IMPLS.items():
            if args.impls and impl not in args.impls:
                continue
            name = f"{config} ({optimizer} AdamW)"
            try:
                rec = _record(
                    ctx, config, optimizer, impl, steps, **_measure(config, optimizer, make, ctx, warmup, steps)
                )
                progress(
                    f"{OP} {name} {impl}: {rec['step_ms']:.1f} ms/step, {rec['tokens_per_s']:.0f} tokens/s, "
                    f"peak {rec['peak_gib']:.2f} GiB (forward + backward {rec['peak_fwd_bwd_gib']:.2f}, states "
                    f"{rec['states_gib']:.2f}), loss {rec['loss_first']:.4f} -> {rec['loss_last']:.4f}"
                )
            except Skip as s:
                ctx.note(f"{OP} {name}: {impl} skipped: {s}")
                continue
            except Exception as e:  # an OOM or a broken baseline must not lose the other rows
                traceback.print_exc()
                progress(f"{OP} {name} {impl}: FAILED {type(e).__name__}: {e}")
                rec = _record(ctx, config, optimizer, impl, steps, error=f"{type(e).__name__}: {str(e)[:200]}")
            results.append(rec)
            gc.collect()
            torch.cuda.empty_cache()
    return results


def print_table(results: list[dict]) -> None:
    """The train-step rows in their own tables, one per op (train_step; train_step_fsdp2 and train_step_ddp, whose
    batch is per GPU and whose tokens/s count every GPU's): the per-op table's shapes and GB/s do not apply."""
    for op in sorted({r["op"] for r in results if r["op"].startswith(OP)}):
        _print_op_table([r for r in results if r["op"] == op])


def _print_op_table(rows: list[dict]) -> None:
    r0 = rows[0]
    gpus = f" | {r0['wrapper']} on {r0['world']} GPUs, batch per GPU" if "world" in r0 else ""
    print(
        f"\n{r0['op']}: {r0['gpu']} | {r0['dtype']}{gpus} | activation checkpointing, SDPA | torch {r0['torch']} | "
        f"transformers {r0['transformers']} | git {r0['git_sha']}"
    )
    cols = [
        ("model", 14),
        ("AdamW", 7),
        ("tokens", 9),
        ("impl", 15),
        ("step ms", 9),
        ("tokens/s", 9),
        ("peak GiB", 9),
        ("fwd+bwd", 8),
        ("states", 7),
        ("x hf", 6),
        ("loss first/last", 17),
    ]
    print("  ".join(n.ljust(w) if i < 4 else n.rjust(w) for i, (n, w) in enumerate(cols)))
    same = lambda a, b: (a["model"], a.get("optimizer")) == (b["model"], b.get("optimizer"))  # noqa: E731
    for r in rows:
        tokens = f"{r['batch']}x{r['seq']}" + ("p" if r.get("packed") else "")
        optimizer = r.get("optimizer") or "foreach"  # rows before the option measured foreach
        head = [r["model"].ljust(14), optimizer.ljust(7), tokens.ljust(9), r["impl"].ljust(15)]
        if r.get("error"):
            print("  ".join(head + [f"FAILED: {r['error']}"[:100]]))
            continue
        hf = next((h for h in rows if same(h, r) and h["impl"] == "hf" and not h.get("error")), None)
        speedup = f"{r['tokens_per_s'] / hf['tokens_per_s']:.2f}" if hf else "-"
        gib = lambda k: f"{r[k]:.2f}" if r.get(k) is not None else "-"  # noqa: E731
        cells = [
            f"{r['step_ms']:.1f}",
            f"{r['tokens_per_s']:.0f}",
            gib("peak_gib"),
            gib("peak_fwd_bwd_gib"),
            gib("states_gib"),
            speedup,
            f"{r['loss_first']:.3f}/{r['loss_last']:.3f}",
        ]
        print("  ".join(head + [c.rjust(w) for c, (_, w) in zip(cells, cols[4:])]))
