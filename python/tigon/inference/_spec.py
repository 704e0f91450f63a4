"""What the decode loop needs to know about one Hugging Face model, read from its own modules and config.

A Spec holds references to the model's modules and parameters (never copies) plus the per-family constants the
forward applies outside its modules (Granite's multipliers, Gemma's softcaps, sliding windows). read_spec returns a
reason string instead where the model is outside what the loop reproduces exactly.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
from torch import nn

# model_type -> where each block's norms sit: "pre" (norm, sublayer, residual), "sandwich" (Gemma 2/3, GLM 4: norms
# before and after each sublayer), "post" (OLMo 2: the sublayer's output normed before the residual add)
NORM_PLACEMENT = {
    "llama": "pre",
    "mistral": "pre",
    "ministral": "pre",
    "ministral3": "pre",
    "seed_oss": "pre",
    "qwen2": "pre",
    "qwen3": "pre",
    "granite": "pre",
    "gemma": "pre",
    "phi3": "pre",
    "gemma2": "sandwich",
    "gemma3_text": "sandwich",
    "olmo2": "post",
    "qwen3_moe": "pre",
    "mixtral": "pre",
    "olmoe": "pre",
    "helium": "pre",
    "ernie4_5": "pre",
    "glm": "pre",
    "olmo3": "post",
    "smollm3": "pre",
    "hunyuan_v1_dense": "pre",
    "exaone4": "post",
    "glm4": "sandwich",
    "qwen2_moe": "pre",
    "ernie4_5_moe": "pre",
    "glm4_moe": "pre",
    "dots1": "pre",
    "hunyuan_v1_moe": "pre",
    "granitemoe": "pre",
    "starcoder2": "pre",
    "stablelm": "pre",
    "cohere": "pre",
    "cohere2": "pre",
    "granitemoeshared": "pre",
}
# transformers' activation names -> the activation of Tigon's GLU kernels (tigon.ops.swiglu / geglu)
GLU_KERNELS = {
    "silu": "silu",
    "swish": "silu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu": "gelu",
}
# RoPE types whose angles depend on the position alone; "dynamic" and "longrope" also qualify while every position
# stays within the pre-training length (they rescale only past it)
POSITION_ONLY_ROPE = {"default", "linear", "llama3", "yarn"}
LENGTH_DEPENDENT_ROPE = {"dynamic", "longrope"}
# families whose config.sliding_window applies to every layer (the others name sliding layers in layer_types)
WINDOW_ON_EVERY_LAYER = {"mistral", "phi3"}
# families that softcap attention scores by config.attn_logit_softcapping (Gemma 3 keeps the field but not the cap)
ATTENTION_SOFTCAP = {"gemma2"}


@dataclass
class Layer:
    block: nn.Module
    attn: nn.Module
    mlp: nn.Module
    window: int | None  # sliding window (keys within window - 1 slots before the query), None: full
    rope: str  # key into Spec's RoPE tables
    head_norm: bool  # q/k norms over each head (Qwen3, Gemma 3) rather than over the whole projection (OLMo 2)
    rotary: bool = True  # SmolLM3 leaves RoPE out of some layers (no_rope_layers), EXAONE 4 out of its global ones


@dataclass
class Spec:
    model: nn.Module
    model_type: str
    placement: str
    layers: list[Layer]
    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    activation: object
    glu: str | None  # the gated MLP's activation as Tigon's GLU kernels name it ("silu", "gelu_tanh", "gelu"), or None
    norm: tuple | None  # the family's RMSNorm as Tigon's kernel takes it: (offset, casting mode), or None
    attn_softcap: float | None
    final_softcap: float | None
    embed_multiplier: float | None  # Granite's embedding_multiplier, or sqrt(hidden) for a Gemma unscaled embedding
    embed_multiplier_rounded: bool  # Gemma rounds its multiplier to the activations' dtype first
    residual_multiplier: float  # Granite
    logits_divisor: float  # Granite's logits_scaling
    rope_modules: dict = field(default_factory=dict)  # rope key -> (rotary module, its layer_type argument or None)
    rope_pairs: str = "halves"  # "halves" (i, i + R/2); "glm" / "interleaved": (2i, 2i + 1), see inference._ops._rope
    rope_fp32: bool = False  # q and k rotate in fp32 whatever the tables' dtype (Cohere)
    logit_scale: float | None = None  # Cohere multiplies the logits by config.logit_scale

    @property
    def backbone(self) -> nn.Module:
        return self.model.model

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.lm_head.weight.dtype


def _rope_parameters(config) -> list[dict]:
    params = getattr(config, "rope_parameters", None) or {"rope_type": "default"}
    nested = all(isinstance(v, dict) for v in params.values())  # Gemma 3: one entry per layer type
    return [p for p in params.values() if p] if nested and params else [params]


def _rope_problem(config, max_seq_len: int) -> str | None:
    for p in _rope_parameters(config):
        kind = p.get("rope_type", p.get("type", "default"))
        if kind in POSITION_ONLY_ROPE:
            continue
        original = p.get("original_max_position_embeddings") or getattr(
            config, "original_max_position_embeddings", None
        )
        if kind in LENGTH_DEPENDENT_ROPE and original and max_seq_len <= original:
            continue
        return f"RoPE type {kind!r}" + (f" past {original} positions" if kind in LENGTH_DEPENDENT_ROPE else "")
    return None


def _linears(layer) -> list[nn.Module | None]:
    a, m = layer.self_attn, block_mlp(layer)
    qkv = ["qkv_proj"] if hasattr(a, "qkv_proj") else ["q_proj", "k_proj", "v_proj"]
    if hasattr(m, "c_fc"):  # StarCoder 2's ungated MLP
        names = ["c_fc", "c_proj"]
    else:
        names = (["gate_up_proj"] if hasattr(m, "gate_up_proj") else ["gate_proj", "up_proj"]) + ["down_proj"]
    mlp = [] if is_moe(m) else [getattr(m, n, None) for n in names]
    shared = getattr(layer, "shared_mlp", None)  # Granite MoE Shared's, beside its MoE block
    mlp += [] if shared is None else [getattr(shared, n, None) for n in ("input_linear", "output_linear")]
    return [getattr(a, n, None) for n in qkv + ["o_proj"]] + mlp


def block_mlp(block: nn.Module) -> nn.Module:
    """A decoder block's MLP or MoE block (Granite MoE names it block_sparse_moe)."""
    return block.mlp if hasattr(block, "mlp") else block.block_sparse_moe


def router(mlp: nn.Module) -> nn.Module:
    """An MoE block's router (gate, or Granite MoE's router)."""
    return mlp.gate if hasattr(mlp, "gate") else mlp.router


def is_moe(mlp: nn.Module) -> bool:
    """A sparse MoE block (a router + `experts`) rather than a dense MLP (Qwen3-MoE mixes both)."""
    return hasattr(mlp, "experts") and (hasattr(mlp, "gate") or hasattr(mlp, "router"))


SHARED = ("shared_expert", "shared_experts", "shared_mlp")  # the names of MoE blocks' shared (dense) MLPs


def _routes(gate: nn.Module) -> bool:
    """Whether the router returns (logits, weights, expert ids) for a token, as transformers' top-k routers do."""
    weight = next(gate.parameters(), None)
    if weight is None or weight.dim() != 2:
        return False
    with torch.no_grad():
        out = gate(weight.new_zeros(1, weight.shape[-1]))
    return (
        isinstance(out, tuple)
        and len(out) == 3
        and all(torch.is_tensor(t) for t in out)
        and out[1].shape == out[2].shape
        and not out[2].is_floating_point()
    )


def shared_experts(mlp: nn.Module) -> nn.Module | None:
    """The MoE block's shared expert, a dense MLP every token runs (Qwen2-MoE's shared_expert, ERNIE 4.5's, GLM 4
    MoE's and dots.llm1's shared_experts, HunYuan's shared_mlp), or None."""
    return next((m for n in SHARED if (m := getattr(mlp, n, None)) is not None), None)


def _moe_problem(mlp: nn.Module) -> str | None:
    """Why the decode loop cannot run this MoE block as router + tigon.ops.moe_experts, or None."""
    from tigon.ops.moe import experts_activation

    # transformers' top-k router modules return (logits, routing weights, expert ids); a plain nn.Linear gate (older
    # releases) leaves the softmax and top-k to the block's own forward: one token through the router tells which
    if not _routes(router(mlp)):
        return f"the MoE router {type(router(mlp)).__name__} (a router returning the routing weights and ids is needed)"
    # the block's forward is replayed as router + experts (+ shared MLP): a part beyond those would be left out
    extra = {n for n, _ in mlp.named_children()} - {"gate", "router", "experts", *SHARED, "shared_expert_gate"}
    if extra:
        return f"MoE block parts {sorted(extra)} beside the router, the experts and a shared MLP"
    shared, gate = shared_experts(mlp), getattr(mlp, "shared_expert_gate", None)
    parts = [] if shared is None else [getattr(shared, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    if any(type(m) is not nn.Linear for m in parts + ([] if gate is None else [gate])):
        return "shared experts other than a gated MLP of plain nn.Linear projections"
    if experts_activation(mlp.experts) is None:
        return f"{type(mlp.experts).__name__} outside what tigon.ops.moe_experts computes (layout, activation, dtype)"
    return None


# what a decoder block may hold for the decode loop to replay it: anything else would be left out, so such a model
# stays transformers'
BLOCK_PARTS = {
    "self_attn",
    "mlp",
    "block_sparse_moe",
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
    "post_self_attn_layernorm",
    "post_mlp_layernorm",
    "shared_mlp",  # Granite MoE Shared: a gated MLP beside the MoE block
}


def _layer_problem(layer) -> str | None:
    extra = {n for n, m in layer.named_children() if not isinstance(m, nn.Dropout)} - BLOCK_PARTS  # eval: identities
    if extra:
        return f"decoder block parts {sorted(extra)}"
    if any(type(m) is not nn.Linear for m in _linears(layer)):  # LoRA, quantized or remote-code projections
        return "projections that are not plain nn.Linear modules (adapters, quantization or remote code)"
    if is_moe(block_mlp(layer)) and (problem := _moe_problem(block_mlp(layer))):
        return problem
    kind = _attention_type(layer.self_attn)
    if kind not in (None, "full_attention", "sliding_attention"):
        return f"attention layer type {kind!r}"
    return None


def _model_problem(model, config, max_seq_len: int) -> str | None:
    model_type = getattr(config, "model_type", None)
    if model_type not in NORM_PLACEMENT:
        return f"model type {model_type!r} (supported: {', '.join(sorted(NORM_PLACEMENT))})"
    backbone, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if type(head) is not nn.Linear or not hasattr(backbone, "layers") or not hasattr(backbone, "embed_tokens"):
        return f"{type(model).__name__} is not a decoder-only causal LM with the usual model / lm_head layout"
    if getattr(config, "use_bidirectional_attention", False):
        return "use_bidirectional_attention=True"
    devices = {p.device for p in model.parameters()}
    if len(devices) != 1 or next(iter(devices)).type == "meta":
        return f"parameters spread over {sorted(map(str, devices))} (one device only)"
    if not head.weight.is_floating_point():
        return f"{head.weight.dtype} weights"
    if getattr(config, "mlp_bias", False) and model_type not in ("llama", "granite"):
        return "mlp_bias=True"
    return _rope_problem(config, max_seq_len)


def _attention_type(attn) -> str | None:
    """The layer's attention type, full_attention or sliding_attention, where the family names it (OLMo 3 names it
    attention_type), else None."""
    return getattr(attn, "layer_type", None) or getattr(attn, "attention_type", None)


def _rope_key(backbone, attn) -> tuple[str, tuple]:
    """Which RoPE table a layer reads: Gemma 3's local and global layers have their own base frequencies."""
    kind = _attention_type(attn)
    rotary = backbone.rotary_emb
    if "layer_type" in inspect.signature(rotary.forward).parameters:
        return kind, (rotary, kind)
    if kind == "sliding_attention" and hasattr(backbone, "rotary_emb_local"):  # older Gemma 3 releases
        return kind, (backbone.rotary_emb_local, None)
    return "global", (rotary, None)


def read_spec(model, max_seq_len: int) -> Spec | str:
    """The model's Spec, or why the decode loop cannot run it exactly (one line)."""
    config = model.config
    problem = _model_problem(model, config, max_seq_len)
    backbone = model.model
    for block in [] if problem else backbone.layers:
        problem = problem or _layer_problem(block)
    if problem:
        return problem
    from tigon.transformers._families import BY_MODEL_TYPE, NORMS
    from transformers.activations import ACT2FN

    model_type = config.model_type
    family = BY_MODEL_TYPE[model_type]
    every_layer_window = getattr(config, "sliding_window", None) if model_type in WINDOW_ON_EVERY_LAYER else None
    layers, ropes = [], {}
    for block in backbone.layers:
        attn = block.self_attn
        key, rope = _rope_key(backbone, attn)
        ropes[key] = rope
        q_norm = getattr(attn, "q_norm", None)
        window = getattr(attn, "sliding_window", None) or every_layer_window
        rotary = bool(getattr(attn, "use_rope", True))
        sliding = getattr(attn, "is_sliding", None)
        if sliding is not None:  # EXAONE 4: the window is set on every layer; with one, only sliding layers rotate
            window, rotary = (window if sliding else None), (window is None or sliding)
        if model_type == "cohere2":  # RoPE on the sliding layers only
            rotary = window is not None
        layers.append(
            Layer(
                block=block,
                attn=attn,
                mlp=block_mlp(block),
                window=window,
                rope=key,
                head_norm=q_norm is not None and q_norm.weight.shape[-1] == attn.head_dim,
                rotary=rotary,
            )
        )
    first = layers[0].attn
    scaled = "Scaled" in type(backbone.embed_tokens).__name__
    embed_multiplier = getattr(config, "embedding_multiplier", None)
    legacy_gemma = model_type.startswith("gemma") and not scaled  # releases that scale in the model's forward
    if legacy_gemma:
        embed_multiplier = config.hidden_size**0.5
    return Spec(
        model=model,
        model_type=model_type,
        placement=NORM_PLACEMENT[model_type],
        layers=layers,
        heads=config.num_attention_heads,
        kv_heads=config.num_key_value_heads,
        head_dim=first.head_dim,
        scale=first.scaling,
        activation=ACT2FN[getattr(config, family.act_attr)],
        glu=GLU_KERNELS.get(getattr(config, family.act_attr)),
        norm=NORMS[family.norm][:2] if family.norm else None,
        attn_softcap=getattr(config, "attn_logit_softcapping", None) if model_type in ATTENTION_SOFTCAP else None,
        final_softcap=getattr(config, "final_logit_softcapping", None),
        embed_multiplier=embed_multiplier,
        embed_multiplier_rounded=legacy_gemma,
        residual_multiplier=getattr(config, "residual_multiplier", 1.0),
        logits_divisor=getattr(config, "logits_scaling", 1.0),
        rope_modules=ropes,
        rope_pairs=family.rope if family.rope in ("glm", "interleaved") else "halves",
        rope_fp32=model_type in ("cohere", "cohere2"),
        logit_scale=getattr(config, family.logit_scale) if family.logit_scale else None,
    )
