"""python -m tigon.generate --model PATH_OR_NAME --prompt TEXT [--max-new-tokens N]: text generation on
tigon.optimize_model, with its speed.

--model is a local Hugging Face checkpoint (its tokenizer too, when it has one; nothing is downloaded) or the name of
a built-in shape (tigon.inference.configs: tiny-llama, ..., llama-3-8b) with random weights. Without a tokenizer the
prompt is token ids (space-separated integers) or, otherwise, its UTF-8 bytes, and the output is printed as ids.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_args(argv=None) -> argparse.Namespace:
    from tigon.inference.configs import CONFIGS

    p = argparse.ArgumentParser(prog="python -m tigon.generate", description=__doc__)
    p.add_argument("--model", required=True, help=f"a local checkpoint, or one of {', '.join(CONFIGS)}")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--dtype", choices=DTYPES, default=None, help="default: bf16 on a GPU, fp32 on the CPU")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available")
    p.add_argument("--sample", action="store_true", help="sample (default: greedy)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=50)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def load(name: str, dtype: torch.dtype, device: str):
    """(model, tokenizer or None)."""
    from tigon.inference import configs

    if name in configs.CONFIGS:
        return configs.build(name, dtype, device), None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, local_files_only=True).to(device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError):
        tokenizer = None
    return model, tokenizer


def encode(prompt: str, tokenizer, vocab: int) -> list[int]:
    if tokenizer is not None:
        return tokenizer(prompt)["input_ids"]
    words = prompt.split()
    if words and all(w.isdigit() for w in words):
        return [int(w) % vocab for w in words]
    return [3 + b % (vocab - 3) for b in prompt.encode()]  # clear of the usual special ids 0-2


def main(argv=None) -> int:
    import tigon

    args = parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if device == "cuda" else torch.float32)
    model, tokenizer = load(args.model, dtype, device)
    ids = torch.tensor([encode(args.prompt, tokenizer, model.config.vocab_size)], device=device)
    t0 = time.perf_counter()
    tigon.optimize_model(model, max_seq_len=ids.shape[1] + args.max_new_tokens)
    optimize_s = time.perf_counter() - t0
    options = dict(max_new_tokens=args.max_new_tokens, do_sample=args.sample)
    if args.sample:
        options.update(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)

    def run():
        torch.manual_seed(args.seed)
        t = time.perf_counter()
        out = model.generate(ids, **options)
        if device == "cuda":
            torch.cuda.synchronize()
        return out, time.perf_counter() - t

    _, first_s = run()  # on a GPU this one captures the CUDA graphs
    out, seconds = run()
    new = out[0, ids.shape[1] :]
    print(
        tokenizer.decode(new, skip_special_tokens=True) if tokenizer is not None else " ".join(map(str, new.tolist()))
    )
    print(
        f"{len(new)} tokens in {seconds:.3f} s: {len(new) / seconds:.1f} tokens/s "
        f"(first call {first_s:.3f} s, optimize_model {optimize_s:.3f} s; {device}, {str(dtype)[6:]})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
