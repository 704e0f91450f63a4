"""Encoder inference: a BERT, RoBERTa or DistilBERT model's forward with every encoder layer run as tensor code over
the model's own parameters, the layer stack replayed from a CUDA graph per (batch, sequence length) bucket on a GPU.

Per layer: the Q, K and V projections as one F.linear over a stacked copy of their weights (3 x hidden^2 per layer,
made on first use and again when the weights move), attention through SDPA
with the padding mask (tigon.ops.flash_attention on sm_90 in a 16-bit dtype when no mask is given), the attention
output projection with the residual added in tigon.ops.linear_act and tigon.ops.layer_norm after it, the intermediate
projection and its activation as one linear_act, the output projection with the residual, and layer_norm again.
The embeddings and the pooler are the model's own modules, in the graph too (over the bucket's shape): at a batch of
one sequence their eager kernel launches cost as much as several layers.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tigon.inference._engine import bucket
from tigon.inference._graphs import StepGraphs
from tigon.ops.attention import flash_attention
from tigon.ops.layer_norm import layer_norm
from tigon.ops.linear_act import linear_act

ENCODER_MODEL_TYPES = ("bert", "distilbert", "roberta")
# transformers' hidden_act names -> linear_act's activations ("gelu" is the erf form, transformers' "gelu")
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
FLASH_HEAD_DIMS = (64, 96, 128, 256)
MIN_SEQ_BUCKET = 8
# Arguments of the base model's forward the encoder path answers; any other one given (not None, not False) runs the
# model's own forward after a warning that names it.
OWN = {"input_ids", "attention_mask", "token_type_ids", "position_ids", "return_dict", "use_cache"}
FLAGS = ("output_attentions", "output_hidden_states")


@dataclass
class EncoderLayer:
    q: nn.Linear
    k: nn.Linear
    v: nn.Linear
    out: nn.Linear
    norm1: nn.LayerNorm
    up: nn.Linear
    down: nn.Linear
    norm2: nn.LayerNorm


@dataclass
class EncoderSpec:
    base: nn.Module  # BertModel, RobertaModel or DistilBertModel: the module whose forward is rerouted
    layers: list[EncoderLayer]
    heads: int
    head_dim: int
    activation: str
    device: torch.device
    dtype: torch.dtype


def _layer(model_type: str, layer: nn.Module) -> EncoderLayer:
    if model_type == "distilbert":
        a = layer.attention
        return EncoderLayer(
            a.q_lin, a.k_lin, a.v_lin, a.out_lin, layer.sa_layer_norm, layer.ffn.lin1, layer.ffn.lin2,
            layer.output_layer_norm,
        )  # fmt: skip
    s, o = layer.attention.self, layer.attention.output
    return EncoderLayer(
        s.query, s.key, s.value, o.dense, o.LayerNorm, layer.intermediate.dense, layer.output.dense,
        layer.output.LayerNorm,
    )  # fmt: skip


def read_encoder_spec(model) -> EncoderSpec | str:
    """The encoder's structure read from the model's modules, or why it is not supported."""
    config = model.config
    name = type(model).__name__
    base = model.base_model
    if config.model_type == "distilbert":
        act, stack, heads = config.activation, getattr(base, "transformer", None), config.n_heads
    else:
        act, stack, heads = config.hidden_act, getattr(base, "encoder", None), config.num_attention_heads
        if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
            return f"{name} as a decoder (is_decoder / add_cross_attention)"
        if getattr(config, "position_embedding_type", "absolute") != "absolute":
            return f"{name} with position_embedding_type {config.position_embedding_type!r}"
    if not isinstance(act, str) or act not in ACTIVATIONS:
        return f"{name} with hidden_act {act!r} (supported: {', '.join(ACTIVATIONS)})"
    if stack is None or not hasattr(base, "embeddings"):
        return f"{name} without the embeddings and encoder of {config.model_type}"
    layers = [_layer(config.model_type, layer) for layer in stack.layer]
    for layer in layers:
        for field, module in vars(layer).items():
            kind = nn.LayerNorm if field.startswith("norm") else nn.Linear
            if type(module) is not kind or (kind is nn.LayerNorm and module.weight is None):
                return f"{name} with a {type(module).__name__} in place of {kind.__name__} ({field})"
    params = list(model.parameters())
    devices = {p.device for p in params}
    if len(devices) != 1:
        return f"{name} on several devices"
    hidden = layers[0].q.weight.shape[0]
    return EncoderSpec(base, layers, heads, hidden // heads, ACTIVATIONS[act], devices.pop(), params[0].dtype)


def _flash_ok(q: torch.Tensor) -> bool:
    return (
        q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)
        and q.shape[-1] in FLASH_HEAD_DIMS
        and torch.cuda.get_device_capability(q.device) == (9, 0)
    )


def attention(q, k, v, mask):
    """q, k, v [B, T, H, D]; mask [B, T] (True: a key to attend) or None -> [B, T, H * D]."""
    b, t, h, d = q.shape
    if mask is None and _flash_ok(q):
        return flash_attention(q, k, v).reshape(b, t, h * d)
    keys = None if mask is None else mask[:, None, None, :]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=keys)
    return o.transpose(1, 2).reshape(b, t, h * d)


def fused_qkv(layer: EncoderLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """The query, key and value projections' weights and biases stacked: one GEMM instead of three, which at a
    batch of one sequence are each too small to fill the GPU."""
    projections = (layer.q, layer.k, layer.v)
    biases = [p.bias if p.bias is not None else p.weight.new_zeros(p.weight.shape[0]) for p in projections]
    return torch.cat([p.weight for p in projections]).detach(), torch.cat(biases).detach()


def encoder_layer(spec: EncoderSpec, layer: EncoderLayer, qkv: tuple, h: torch.Tensor, mask) -> torch.Tensor:
    b, t, _ = h.shape
    q, k, v = F.linear(h, *qkv).view(b, t, 3, spec.heads, spec.head_dim).unbind(2)  # strided views: no copies
    a = attention(q, k, v, mask)
    n1, n2 = layer.norm1, layer.norm2
    h = layer_norm(linear_act(a, layer.out.weight, layer.out.bias, "none", residual=h), n1.weight, n1.bias, n1.eps)
    x = linear_act(h, layer.up.weight, layer.up.bias, spec.activation)
    return layer_norm(linear_act(x, layer.down.weight, layer.down.bias, "none", residual=h), n2.weight, n2.bias, n2.eps)


class EncoderRunner:
    """The layer stack of one model: eager off the GPU; on it, one CUDA graph per (batch bucket, sequence bucket,
    masked) over static input, mask and output buffers of that bucket, the graphs sharing one memory pool."""

    def __init__(self, spec: EncoderSpec, max_seq_len: int) -> None:
        self.spec, self.max_seq_len = spec, max_seq_len
        self.graphs = StepGraphs(spec.device)
        self.buffers: dict = {}
        self.warned: set[str] = set()
        self.state = [*spec.base.parameters(), *spec.base.buffers()]
        self.copied = [t for layer in spec.layers for p in (layer.q, layer.k, layer.v) for t in (p.weight, p.bias)]
        self._ptrs: list[int] = []
        self.qkv: list[tuple] = []

    def _refresh(self) -> None:
        """Graphs read the weights where they were at capture, and the fused QKV weights are copies: when a weight has
        moved since (model.to(...), a parameter replaced) or a copied one was changed in place, both are made again."""
        ptrs = [t.data_ptr() for t in self.state] + [t._version for t in self.copied if t is not None]
        if ptrs != self._ptrs:
            self.clear()
            self.qkv = [fused_qkv(layer) for layer in self.spec.layers]
            self._ptrs = ptrs

    def layers(self, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        for layer, qkv in zip(self.spec.layers, self.qkv):
            h = encoder_layer(self.spec, layer, qkv, h, mask)
        return h

    def encode(self, ids, types, positions, valid, embed: Callable, pool: Callable | None):
        """ids [B, T]; types, positions [B, T] or None; valid [B, T] bool (False: padding) or None; embed(ids, types,
        positions) -> the embeddings, pool(last) -> the pooled output (the model's modules) -> (the last hidden
        state, the pooled output or None). In a graph the embeddings and the pooler run over the bucket: a token's
        embedding depends on its row's ids up to it only, the pooler on each row's first token."""
        self._refresh()
        b, t = ids.shape
        tb = bucket(t, self.max_seq_len, MIN_SEQ_BUCKET)
        if not self.graphs.enabled or t > tb:
            last = self.layers(embed(ids, types, positions), valid)
            return last, None if pool is None else pool(last)
        bb = bucket(b, 1 << 30)
        masked = valid is not None or (bb, tb) != (b, t)
        key = (bb, tb, masked, positions is not None)
        buf = self.buffers.get(key)
        if buf is None:
            buf = self.buffers[key] = self._bucket_buffers(bb, tb, ids.device, pool is not None)
        buf["ids"][:b, :t].copy_(ids)
        if types is not None:
            buf["types"][:b, :t].copy_(types)
        elif buf["typed"]:  # left over from the last call: zeros, as when none are given
            buf["types"].zero_()
        buf["typed"] = types is not None
        if positions is not None:
            buf["positions"][:b, :t].copy_(positions)
        mask = buf["mask"]
        if masked:
            mask[:b].fill_(False)
            mask[:b, :t] = True if valid is None else valid
            mask[b:].fill_(True)  # rows past the batch: finite inputs over every key, results dropped

        def step():
            h = embed(buf["ids"], buf["types"], buf["positions"] if positions is not None else None)
            buf["last"].copy_(self.layers(h, mask if masked else None))
            if pool is not None:
                buf["pooled"].copy_(pool(buf["last"]))

        self.graphs.run(key, step)
        return buf["last"][:b, :t].clone(), None if pool is None else buf["pooled"][:b].clone()

    def _bucket_buffers(self, bb: int, tb: int, device, pooled: bool) -> dict:
        width, dtype = self.spec.heads * self.spec.head_dim, self.spec.layers[0].q.weight.dtype
        ids = torch.zeros(bb, tb, dtype=torch.long, device=device)
        return {
            "ids": ids,
            "types": torch.zeros_like(ids),
            "typed": False,
            "positions": torch.zeros_like(ids),
            "mask": torch.ones(bb, tb, dtype=torch.bool, device=device),
            "last": torch.empty(bb, tb, width, dtype=dtype, device=device),
            "pooled": torch.empty(bb, width, dtype=dtype, device=device) if pooled else None,
        }

    def clear(self) -> None:
        self.graphs.clear()
        self.buffers.clear()
        self.qkv, self._ptrs = [], []

    @property
    def nbytes(self) -> int:
        """Device memory of the buckets' static buffers (the graphs' own memory is in their shared pool)."""
        tensors = [t for buf in self.buffers.values() for t in buf.values() if isinstance(t, torch.Tensor)]
        return sum(t.numel() * t.element_size() for t in tensors)


def _arguments(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict | None:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    named = dict(bound.arguments)
    for p in signature.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            named.update(named.pop(p.name, {}))
    return named


def _unsupported(runner: EncoderRunner, config, named: dict | None) -> str | None:
    """The first thing about this call the encoder path does not reproduce, named, or None."""
    if named is None:
        return "these arguments"
    if torch.is_grad_enabled():
        return "a call with gradients enabled (outside torch.no_grad())"
    if runner.spec.base.training:
        return "training mode (dropout)"
    for flag in FLAGS:
        if named.get(flag, getattr(config, flag, False)):
            return flag
    for k, v in named.items():
        if k not in OWN and v is not None and v is not False:
            return k
    ids = named.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return "input_ids other than a [batch, sequence] tensor"
    if ids.device != runner.spec.device:
        return f"input_ids on {ids.device} (the model is on {runner.spec.device})"
    for name in ("attention_mask", "token_type_ids", "position_ids"):
        given = named.get(name)
        if given is not None and (not isinstance(given, torch.Tensor) or given.shape != ids.shape):
            return f"{'an' if name[0] == 'a' else 'a'} {name} other than [batch, sequence]"
        if given is not None and given.device != ids.device:
            return f"{name} on {given.device} (input_ids on {ids.device})"
    return None


def make_encoder_forward(runner: EncoderRunner, original):
    """The base model's forward: transformers' signature and output, the layers run by runner."""
    from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPoolingAndCrossAttentions

    base = runner.spec.base
    config = base.config
    signature = inspect.signature(original)
    distil = config.model_type == "distilbert"
    pool = None if distil else base.pooler

    def embed(ids, types, positions):
        if distil:
            return base.embeddings(ids, None, positions)
        return base.embeddings(input_ids=ids, token_type_ids=types, position_ids=positions)

    @functools.wraps(original)
    def forward(*args, **kwargs):
        named = _arguments(signature, args, kwargs)
        reason = _unsupported(runner, config, named)
        if reason is not None:
            if reason not in runner.warned:
                runner.warned.add(reason)
                warnings.warn(
                    f"tigon.inference: {reason} is not supported by the encoder path; running the model's own forward",
                    stacklevel=4,  # past nn.Module's call: the caller's line
                )
            return original(*args, **kwargs)
        ids, mask, positions = named["input_ids"], named.get("attention_mask"), named.get("position_ids")
        # A given mask takes the masked graph (SDPA with the mask), even when it is all ones: finding that out would
        # be a host sync per call, which stops the host from queueing the next call while the GPU runs this one (as
        # torch.compile does, the mask's values stay on the GPU). Without a mask, full buckets run flash attention.
        valid = None if mask is None else mask.bool()
        types = None if distil else named.get("token_type_ids")
        last, pooled = runner.encode(ids, types, positions, valid, embed, pool)
        if distil:
            out = BaseModelOutput(last_hidden_state=last)
        else:
            out = BaseModelOutputWithPoolingAndCrossAttentions(last_hidden_state=last, pooler_output=pooled)
        return_dict = named.get("return_dict")
        return out if (getattr(config, "return_dict", True) if return_dict is None else return_dict) else out.to_tuple()

    return forward


def optimize_encoder(model, max_seq_len: int | None, saved_marker) -> EncoderRunner | str:
    """Reroutes the base model's forward (the model's own when it is the base); returns the runner, or why the
    model is not supported (then nothing is changed)."""
    spec = read_encoder_spec(model)
    if isinstance(spec, str):
        return spec
    base = spec.base
    cap = model.config.max_position_embeddings
    runner = EncoderRunner(spec, min(max_seq_len or cap, cap))
    saved = {"forward": base.__dict__.get("forward", saved_marker)}
    base.forward = make_encoder_forward(runner, base.forward)
    model.tigon_inference = runner
    model._tigon_inference_saved = [(base, saved)]
    return runner
