"""model.forward on the optimized model: a prompt-shaped call (no cache passed in, no labels, no gradients) runs
through Tigon's prompt pass; everything else, and any call it cannot reproduce, runs the model's own forward."""

from __future__ import annotations

import functools

import torch

# Keyword arguments the prompt pass understands; any other one (labels, a cache, inputs_embeds, output_* flags set)
# sends the call to the model's own forward.
OWN = {"attention_mask", "position_ids", "use_cache", "logits_to_keep", "return_dict"}


def _takes(engine, args: tuple, kwargs: dict):
    """input_ids when the prompt pass can answer this call, else None."""
    ids = args[0] if len(args) == 1 else kwargs.get("input_ids") if not args else None
    others = [k for k, v in kwargs.items() if k != "input_ids" and k not in OWN and v is not None and v is not False]
    if others or torch.is_grad_enabled() or kwargs.get("return_dict") is False:
        return None
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.device != engine.spec.device:
        return None
    positions = kwargs.get("position_ids")
    longest = ids.shape[1] if positions is None else int(positions.max()) + 1
    return ids if longest <= engine.max_seq_len else None


def _cache_of(model, kv: list):
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    for i, (k, v) in enumerate(kv):
        cache.update(k, v, i)
    return cache


def make_forward(model, engine, original):
    from transformers.modeling_outputs import CausalLMOutputWithPast

    cache_field = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

    @functools.wraps(original)
    def forward(*args, **kwargs):
        ids = _takes(engine, args, kwargs)
        if ids is None:
            return original(*args, **kwargs)
        mask, positions = kwargs.get("attention_mask"), kwargs.get("position_ids")
        valid = None if mask is None or bool(mask.all()) else mask.bool()
        if positions is None:
            positions = torch.arange(ids.shape[1], device=ids.device)[None]
        use_cache = kwargs.get("use_cache")
        kv = [] if (model.config.use_cache if use_cache is None else use_cache) else None
        h = engine.hidden(ids, positions, valid, kv=kv)
        keep = kwargs.get("logits_to_keep", 0)
        if isinstance(keep, int):
            h = h[:, -keep:] if keep else h
        else:
            h = h[:, keep]
        cache = None if kv is None else _cache_of(model, kv)
        return CausalLMOutputWithPast(logits=engine.decoder.logits(h), **{cache_field: cache})

    return forward
