"""Tigon on a Hugging Face model in a few seconds, on a CPU or a GPU; nothing is downloaded.

    pip install ".[hf]"          # or, without nvcc / on a CPU-only machine: see the README's CPU-only install
    python examples/quickstart.py

Builds a tiny random Llama, patches it with Tigon's kernels (RMSNorm, RoPE, SwiGLU, and the fused linear + cross
entropy loss that never materialises the logits), trains a few steps and generates a few tokens. On a CPU the ops run
Tigon's float64-accumulating reference path: correct, not fast (it warns once).
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import tigon.transformers


def main(steps: int = 5) -> None:
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = LlamaForCausalLM(config).to(device)
    tigon.transformers.patch(model)  # in place: same parameters, same state dict

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = torch.randint(0, config.vocab_size, (4, 32), device=device)
    for step in range(steps):
        loss = model(input_ids=tokens, labels=tokens).loss  # the fused loss: output.logits is None here
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}: loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        out = model.generate(tokens[:1, :8], max_new_tokens=8, do_sample=False)
    print("generated:", out[0, 8:].tolist())


if __name__ == "__main__":
    main()
