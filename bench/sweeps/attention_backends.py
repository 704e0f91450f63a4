"""Which SDPA backend a training step's attention takes, and what each would cost: the train-step benchmark's model
(patched by Tigon) stepped with torch's default SDPA choice, with cuDNN's attention first in SDPA's priority, and with
Tigon's own attention. Diagnostic only (GPU).

  python bench/sweeps/attention_backends.py --configs llama,qwen3 [--steps 10]
"""

from __future__ import annotations

import argparse
import contextlib
import types

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from tigon.bench import train_step

NAMES = {int(getattr(SDPBackend, n)): n for n in ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")}


def _default_choice(name: str, seq: int) -> str:
    """SDPA's own pick for the model's attention call (causal, grouped-query, no mask), as transformers makes it."""
    cfg = train_step._config(name, seq)
    hq, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // hq
    q = torch.randn(train_step.BATCH, hq, seq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(train_step.BATCH, hkv, seq, d, device="cuda", dtype=torch.bfloat16)
    return NAMES.get(torch._fused_sdp_choice(q, k, k, is_causal=True, enable_gqa=True), "?")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default="llama,qwen3")
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    ctx = types.SimpleNamespace(device=torch.device("cuda"), dtype=torch.bfloat16, note=print)
    first = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    ways = {
        "tigon, SDPA default": ("tigon", contextlib.nullcontext),
        "tigon, SDPA cuDNN first": ("tigon", lambda: sdpa_kernel(first, set_priority=True)),
        "tigon attention": ("tigon_attention", contextlib.nullcontext),
    }
    for config in args.configs.split(","):
        name, _, seq, _ = train_step.CONFIGS[config]
        print(f"{config}: SDPA's default choice {_default_choice(name, seq)}")
        for label, (impl, scope) in ways.items():
            try:
                with scope():
                    r = train_step._measure(config, "fused", train_step.IMPLS[impl], ctx, 3, args.steps)
                print(
                    f"  {label:26s} {r['step_ms']:8.1f} ms/step {r['tokens_per_s']:9.0f} tokens/s "
                    f"peak {r['peak_fwd_bwd_gib']:.2f} GiB loss {r['loss_first']:.4f} -> {r['loss_last']:.4f}"
                )
            except Exception as e:  # a backend that refuses the call: say so, measure the rest
                print(f"  {label:26s} failed: {type(e).__name__}: {str(e)[:160]}")


if __name__ == "__main__":
    main()
