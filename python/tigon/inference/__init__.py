"""Generation on a static KV cache: Hugging Face causal LMs decoded by a lean loop, CUDA-graph replayed on a GPU.

    import tigon
    model = tigon.optimize_model(model, max_batch_size=8, max_seq_len=2048)   # in place; returns model
    out = model.generate(input_ids, attention_mask=mask, max_new_tokens=256)    # transformers' signature and result
    tigon.inference.revert(model)                                               # transformers' generate again

Supported: Llama, Mistral, Qwen2, Qwen3, Granite, Gemma, Gemma 2, Gemma 3 (text), Phi-3 and OLMo 2 causal LMs; greedy
and sampled decoding (temperature, top-k, top-p, repetition penalty), stop tokens, left-padded batches, streamers.
BERT, RoBERTa and DistilBERT encoders (any head): the forward's encoder layers on Tigon's ops, one CUDA graph per
(batch, sequence length) bucket on a GPU. Other models and options warn and keep transformers' own behaviour. See
docs/inference.md.
"""

from tigon.inference._encoder import ENCODER_MODEL_TYPES
from tigon.inference._optimize import optimize_model, revert
from tigon.inference._spec import NORM_PLACEMENT

SUPPORTED_MODEL_TYPES = tuple(sorted(NORM_PLACEMENT))  # decoders: generate() on the decode loop
SUPPORTED_ENCODER_TYPES = ENCODER_MODEL_TYPES  # encoders: forward() on Tigon's layers

__all__ = ["optimize_model", "revert", "SUPPORTED_MODEL_TYPES", "SUPPORTED_ENCODER_TYPES"]
