"""optimize_model and revert: the engine attached to a model instance, its forward and generate rerouted."""

from __future__ import annotations

import functools
import logging
import warnings

import torch

from tigon.inference._cnn import optimize_cnn
from tigon.inference._encoder import ENCODER_MODEL_TYPES, optimize_encoder
from tigon.inference._engine import Engine
from tigon.inference._forward import make_forward
from tigon.inference._options import resolve
from tigon.inference._spec import read_spec

log = logging.getLogger("tigon.inference")
DEFAULT_MAX_SEQ_LEN = 4096  # the cache's length when not given: the model's context, capped here
_MISSING = object()
_ROUTED = ("forward", "generate")


def _make_generate(model, engine: Engine, original):
    @functools.wraps(original)
    def generate(*args, **kwargs):
        request = resolve(engine, model.generation_config, args, kwargs)
        if isinstance(request, str):
            warnings.warn(
                f"tigon.inference: {request} is not supported by the decode loop; running transformers' generate",
                stacklevel=2,
            )
            return original(*args, **kwargs)
        r = request
        if r.streamer is not None:
            r.streamer.put(r.input_ids.cpu())
        out = engine.generate(r.input_ids, r.valid, r.new_tokens, r.sampling, r.stop, r.pad, r.streamer)
        if r.streamer is not None:
            r.streamer.end()
        return out

    return generate


def optimize_model(
    model,
    max_batch_size: int = 1,
    max_seq_len: int | None = None,
    dtype: torch.dtype | None = None,
    check_every: int = 16,
):
    """Runs a Hugging Face causal LM's generate() (and prompt-shaped forward() calls) on Tigon's static-cache decode
    loop, in place; returns the model. max_batch_size and max_seq_len (default: the model's context, at most 4096)
    size the KV cache, allocated here once; dtype converts the model first (model.to(dtype)); check_every: tokens
    between the host's checks for stop tokens. Models and options the loop does not reproduce exactly warn and keep
    transformers' behaviour. tigon.inference.revert(model) undoes it.

    A BERT, RoBERTa or DistilBERT model (any head) runs its encoder layers on Tigon's ops instead, one CUDA graph per
    (batch, sequence length) bucket on a GPU; max_seq_len caps the sequence buckets (default and at most
    max_position_embeddings); max_batch_size and check_every do not apply.

    A model without a config that has Conv2d layers (a CNN: torchvision's ResNets, or any Sequential of Conv2d,
    BatchNorm2d, ReLU) is put in eval mode and runs each Conv2d with the BatchNorm2d and ReLU after it as one
    tigon.nn.Conv2d (batch norm folded, ReLU in the epilogue), a ResNet block's shortcut add in its last convolution's
    epilogue; on a GPU its forward of one tensor without gradients replays a CUDA graph per input shape (weights read
    where they are: moving them, e.g. model.to(...), captures again); only dtype applies."""
    if not isinstance(max_batch_size, int) or max_batch_size < 1:
        raise ValueError(f"optimize_model: max_batch_size must be a positive int, got {max_batch_size!r}")
    if not isinstance(check_every, int) or check_every < 1:
        raise ValueError(f"optimize_model: check_every must be a positive int, got {check_every!r}")
    revert(model)
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) in ENCODER_MODEL_TYPES:
        return _optimize_encoder(model, max_seq_len, dtype)
    if config is None and any(type(m) is torch.nn.Conv2d for m in model.modules()):
        model.tigon_inference = optimize_cnn(model, dtype, _MISSING)
        return model
    if max_seq_len is None:
        max_seq_len = min(getattr(config, "max_position_embeddings", None) or DEFAULT_MAX_SEQ_LEN, DEFAULT_MAX_SEQ_LEN)
    spec = read_spec(model, max_seq_len) if config is not None else f"{type(model).__name__} has no config"
    if isinstance(spec, str):
        warnings.warn(f"tigon.inference: not supported for inference yet: {spec}", stacklevel=2)
        return model
    if dtype is not None and dtype != spec.dtype:
        model.to(dtype)
    engine = Engine(spec, max_batch_size, max_seq_len, check_every)
    saved = {name: model.__dict__.get(name, _MISSING) for name in _ROUTED}
    model.forward = make_forward(model, engine, model.forward)
    model.generate = _make_generate(model, engine, model.generate)
    model.tigon_inference = engine
    model._tigon_inference_saved = [(model, saved)]
    log.info(
        "tigon.inference: %s on the decode loop; KV cache %.1f MiB (batch %d x %d tokens, %s)",
        type(model).__name__,
        engine.cache.nbytes / 2**20,
        max_batch_size,
        max_seq_len,
        str(spec.dtype).replace("torch.", ""),
    )
    return model


def _optimize_encoder(model, max_seq_len: int | None, dtype: torch.dtype | None):
    spec_dtype = next(model.parameters()).dtype
    runner = optimize_encoder(model, max_seq_len, _MISSING)
    if isinstance(runner, str):
        warnings.warn(f"tigon.inference: not supported for inference yet: {runner}", stacklevel=3)
        return model
    if dtype is not None and dtype != spec_dtype:
        model.to(dtype)
    log.info(
        "tigon.inference: %s's %d encoder layers on Tigon's ops (%s, sequence buckets up to %d)",
        type(model).__name__,
        len(runner.spec.layers),
        "CUDA graphs" if runner.graphs.enabled else "eager",
        runner.max_seq_len,
    )
    return model


def revert(model):
    """Gives an optimized model its own forward (and generate) back and frees the engine (cache, graphs); returns
    the model. A model that was not optimized is returned as it is."""
    saved = model.__dict__.pop("_tigon_inference_saved", None)
    if saved is None:
        return model
    for module, names in saved:
        for name, value in names.items():
            if value is _MISSING:
                module.__dict__.pop(name, None)
            else:
                module.__dict__[name] = value
    engine = model.__dict__.pop("tigon_inference", None)
    if engine is not None:
        getattr(engine, "clear", engine.graphs.clear)()
    return model
