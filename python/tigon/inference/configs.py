"""Model shapes by name, for random-weight models built without a download: tiny ones for tests and CPU runs, and the
Llama-3-8B, Qwen3-30B-A3B and BERT-base shapes the decode and encoder benchmarks measure on a GPU."""

from __future__ import annotations

import torch

TINY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
GEMMA = dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=16)
# Qwen3-30B-A3B: 128 experts, 8 per token; ~3.3 B parameters read per token of its 30.5 B (the training benchmark
# takes 8 of its layers)
QWEN3_30B_A3B = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=6144,
    moe_intermediate_size=768,
    num_hidden_layers=48,
    num_attention_heads=32,
    num_key_value_heads=4,
    head_dim=128,
    num_experts=128,
    num_experts_per_tok=8,
    norm_topk_prob=True,
    max_position_embeddings=40960,
    rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
    bos_token_id=151643,
    eos_token_id=151645,
)
CONFIGS = {
    "tiny-llama": ("LlamaConfig", TINY),
    "tiny-qwen3": ("Qwen3Config", dict(TINY, head_dim=16)),
    "tiny-gemma2": ("Gemma2Config", dict(TINY, **GEMMA, final_logit_softcapping=30.0, attn_logit_softcapping=50.0)),
    "tiny-gemma3": ("Gemma3TextConfig", dict(TINY, **GEMMA)),
    "tiny-phi3": ("Phi3Config", TINY),
    "tiny-qwen3-moe": (
        "Qwen3MoeConfig",
        dict(TINY, head_dim=16, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2),
    ),
    "llama-3-8b": (
        "LlamaConfig",
        dict(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            max_position_embeddings=8192,
            rope_parameters=dict(rope_type="default", rope_theta=500000.0),
            bos_token_id=128000,
            eos_token_id=128001,
        ),
    ),
    "qwen3-30b-a3b": ("Qwen3MoeConfig", QWEN3_30B_A3B),
}


def build(name: str, dtype: torch.dtype = torch.float32, device="cpu", seed: int = 0):
    """A causal LM of the named shape with random weights (initialised on the device, in dtype)."""
    import transformers

    cls, kwargs = CONFIGS[name]
    config = getattr(transformers, cls)(**kwargs)
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


# Encoders: (config class, config arguments), built with a head by build_encoder.
_TINY_ENCODER = dict(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=512,
    type_vocab_size=2,
)
ENCODERS = {
    "tiny-bert": ("BertConfig", _TINY_ENCODER),
    "tiny-roberta": ("RobertaConfig", dict(_TINY_ENCODER, max_position_embeddings=514, pad_token_id=1)),
    "tiny-distilbert": (
        "DistilBertConfig",
        dict(vocab_size=512, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=512),
    ),
    "bert-base": ("BertConfig", dict(vocab_size=30522, max_position_embeddings=512)),  # BertConfig's defaults
}


def build_encoder(
    name: str,
    dtype: torch.dtype = torch.float32,
    device="cpu",
    head: str = "AutoModel",
    seed: int = 0,
    attn_implementation: str = "eager",
):
    """An encoder of the named shape with random weights under transformers' class `head` (AutoModel: no head;
    AutoModelForSequenceClassification, ...), in eval mode."""
    import transformers

    cls, kwargs = ENCODERS[name]
    config = getattr(transformers, cls)(**kwargs)
    torch.manual_seed(seed)
    with torch.device(device):
        model = getattr(transformers, head).from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    return model.eval()
