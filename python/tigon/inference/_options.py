"""transformers' generate() arguments, sorted into what the lean loop runs and what it leaves to transformers.

resolve() merges the call's keyword arguments into a copy of the model's generation config (as transformers does) and
returns either a Request or the name of the first option the loop does not implement, so the caller falls back.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from tigon.inference._engine import MAX_STOP_TOKENS
from tigon.inference._sampling import Sampling

DEFAULT_MAX_LENGTH = 20  # transformers' default when neither max_length nor max_new_tokens is given
DEFAULT_TOP_K = 50  # transformers' top_k when sampling without one
# Options the loop implements (read below) or that do not change the tokens chosen.
HANDLED = {
    "max_length",
    "max_new_tokens",
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "eos_token_id",
    "pad_token_id",
    "bos_token_id",
    "decoder_start_token_id",
    "use_cache",
    "cache_implementation",  # the loop's own static cache replaces any
    "cache_config",
    "max_cache_len",
    "compile_config",
    "disable_compile",
    "transformers_version",
    "_from_model_config",
}
# Other options at these values are off.
NEUTRAL = {
    "min_length": 0,
    "min_new_tokens": 0,
    "num_beams": 1,
    "num_return_sequences": 1,
    "num_beam_groups": 1,
    "early_stopping": False,
    "typical_p": 1.0,
    "min_p": 0.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "length_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "encoder_repetition_penalty": 1.0,
    "diversity_penalty": 0.0,
    "output_scores": False,
    "output_logits": False,
    "output_attentions": False,
    "output_hidden_states": False,
    "return_dict_in_generate": False,
    "remove_invalid_values": False,
    "renormalize_logits": False,
    "low_memory": False,
    "token_healing": False,
    "num_assistant_tokens": 20,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.4,
    "assistant_lookbehind": 10,
    "target_lookbehind": 10,
    "is_assistant": False,
}


@dataclass
class Request:
    input_ids: torch.Tensor
    valid: torch.Tensor | None  # [B, T] bool, False at left padding; None: no padding
    new_tokens: int
    sampling: Sampling
    stop: list[int]
    pad: int
    streamer: object


def _ids(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.flatten().tolist()]
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


# generate() arguments outside the generation config that change nothing here
INERT = {"tokenizer", "use_model_defaults"}


def _empty(value) -> bool:
    return value is None or value is False or (isinstance(value, (list, tuple, dict)) and not value)


def _config_option(config) -> str | None:
    for name, value in config.to_dict().items():
        if name in HANDLED or value is None or NEUTRAL.get(name, object()) == value:
            continue
        return f"{name}={value!r}"
    return None


def _input_option(ids, mask, engine) -> str | None:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
        return "input_ids that are not a [batch, length] LongTensor"
    if ids.device != engine.spec.device:
        return f"input_ids on {ids.device}, the model on {engine.spec.device}"
    if ids.shape[0] > engine.max_batch_size:
        return f"batch {ids.shape[0]} > max_batch_size {engine.max_batch_size}"
    if mask is not None and (mask.shape != ids.shape or mask.device != ids.device):
        return "an attention_mask of another shape or device than input_ids"
    return None


def _left_padded(valid: torch.Tensor) -> bool:
    return bool((valid[:, 1:] >= valid[:, :-1]).all())  # each row: False... then True...


def resolve(engine, base_config, args: tuple, kwargs: dict) -> Request | str:
    """A Request for the loop, or the option (as "name=value") that makes transformers' own generate run instead."""
    kwargs = dict(kwargs)
    if len(args) > 1:
        return f"{len(args)} positional arguments"
    ids = args[0] if args else kwargs.pop("inputs", None)
    ids = kwargs.pop("input_ids", None) if ids is None else ids
    mask, streamer = kwargs.pop("attention_mask", None), kwargs.pop("streamer", None)
    config = copy.deepcopy(kwargs.pop("generation_config", None) or base_config)
    unused = config.update(**kwargs)
    extra = next((f"{k}=" + type(v).__name__ for k, v in unused.items() if k not in INERT and not _empty(v)), None)
    problem = extra or _config_option(config) or _input_option(ids, mask, engine)
    if problem:
        return problem
    t = ids.shape[1]
    new = config.max_new_tokens
    new = new if new is not None else (config.max_length or DEFAULT_MAX_LENGTH) - t
    if new < 1:
        return f"no tokens to generate (max_length {config.max_length} for a {t}-token prompt)"
    if t + new > engine.max_seq_len:
        return f"prompt + new tokens ({t} + {new}) > max_seq_len {engine.max_seq_len}"
    stop = _ids(config.eos_token_id)
    if len(stop) > MAX_STOP_TOKENS:
        return f"{len(stop)} eos_token_id values (at most {MAX_STOP_TOKENS})"
    valid = None if mask is None else mask.bool()
    if valid is not None and bool(valid.all()):
        valid = None
    if valid is not None and not _left_padded(valid):
        return "an attention_mask that is not left padding"
    sample = bool(config.do_sample)
    sampling = Sampling(
        do_sample=sample,
        temperature=float(config.temperature if sample and config.temperature is not None else 1.0),
        top_k=int((DEFAULT_TOP_K if config.top_k is None else config.top_k) if sample else 0),
        top_p=float(config.top_p if sample and config.top_p is not None else 1.0),
        repetition_penalty=float(config.repetition_penalty or 1.0),
    )
    if sample and sampling.temperature <= 0:
        return f"temperature={sampling.temperature}"
    pad = config.pad_token_id if config.pad_token_id is not None else (stop[0] if stop else 0)
    return Request(ids, valid, new, sampling, stop, int(pad), streamer)
