"""The Tigon pieces that stand in for a family's modules: RMSNorm, LayerNorm and MLP classes with the family's
constructor signature, apply_rotary_pos_emb with transformers' signature, and the MoE experts' forward and gate."""

from __future__ import annotations

import warnings

import torch

from tigon.nn.activation import ReLUSquared
from tigon.nn.rms_norm import RMSNorm
from tigon.ops.layer_norm import layer_norm as _tigon_layer_norm
from tigon.ops.rope import rope as _tigon_rope
from tigon.ops.rope import rope_projections as _rope_projections
from tigon.ops.rope import rotates_in_place as _rotates_in_place
from tigon.ops.rope import rope_one as _tigon_rope_one
from tigon.nn.swiglu import _HIDDEN_ACT, FalconH1MLP, GemmaMLP, LlamaMLP, Phi3MLP
from tigon.ops._common import FLOAT_DTYPES, rows_ok
from tigon.ops.moe import experts_activation, moe_experts
from tigon.ops.swiglu import ACTIVATIONS, _FusedGLU
from tigon.transformers._families import NORMS, Family

_MLP_BASES = {"llama": LlamaMLP, "gemma": GemmaMLP, "phi3": Phi3MLP, "falcon_h1": FalconH1MLP}


def _register(cls: type, name: str) -> type:
    """Names a generated class and makes it a global of this module, so deepcopy and pickle find it by name."""
    cls.__name__ = cls.__qualname__ = name
    cls.__module__ = __name__
    globals()[name] = cls
    return cls


def norm_class(family: Family) -> type:
    """An RMSNorm class called as the family's (hidden_size, eps=...), one per family. Its name keeps "RMSNorm" in it:
    transformers' _init_weights recognises norms by class name (ones, or zeros for Gemma's 1 + w)."""
    name = f"Tigon{family.prefix}RMSNorm"
    if name in globals():
        return globals()[name]
    offset, casting_mode, init = NORMS[family.norm]
    in_place = family.norm_in_place

    class FamilyRMSNorm(RMSNorm):
        def __init__(
            self, hidden_size: int | None = None, eps: float = 1e-6, with_scale: bool = True, *, dim: int | None = None
        ) -> None:
            # Llama-style norms take hidden_size, Gemma-style ones dim (Gemma 3 passes it by name); Gemma 4's
            # with_scale=False norms have no weight
            super().__init__(
                hidden_size or dim, eps, offset=offset, casting_mode=casting_mode, init=init, in_place=in_place
            )
            self.with_scale = with_scale
            if not with_scale:
                self.weight = None

        @property
        def eps(self) -> float:  # GemmaRMSNorm's attribute name; LlamaRMSNorm's is variance_epsilon
            return self.variance_epsilon

    return _register(FamilyRMSNorm, name)


def layer_norm_base(family: Family, mod) -> type:
    """The LayerNorm class the family's modeling module builds (torch.nn.LayerNorm where it names none of its own)."""
    return torch.nn.LayerNorm if family.layer_norm == "LayerNorm" else getattr(mod, family.layer_norm)


def layer_norm_class(family: Family, base: type) -> type:
    """A subclass of the family's LayerNorm class (base) whose forward is Tigon's layer_norm: the same constructor,
    parameters, state dict and initialisation. What the kernel does not take keeps base's forward: weights of more
    than one dimension (Cohere's per-head q/k norms), other dtypes or devices, and torch.nn.LayerNorm-based classes
    under autocast (whose dtype rules are autocast's)."""
    name = f"Tigon{family.prefix}LayerNorm"
    if name in globals():
        return globals()[name]
    offset, autocast_sensitive = family.layer_norm_offset, issubclass(base, torch.nn.LayerNorm)

    class FamilyLayerNorm(base):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            weight, bias = getattr(self, "weight", None), getattr(self, "bias", None)
            eps = self.variance_epsilon if hasattr(self, "variance_epsilon") else self.eps
            if (
                len(getattr(self, "normalized_shape", (0,))) != 1
                or (weight is not None and (weight.dim() != 1 or weight.shape[0] != x.shape[-1]))
                or x.dtype not in FLOAT_DTYPES
                or x.device.type not in ("cpu", "cuda")
                or (autocast_sensitive and torch.is_autocast_enabled(x.device.type))
            ):
                return super().forward(x)
            if offset and weight is not None:
                weight = weight + offset  # rounded to the weight's dtype, as the family's own forward does
            return _tigon_layer_norm(x, weight, bias, eps)

    return _register(FamilyLayerNorm, name)


# The activations a non-gated MLP's activation module is swapped for (Family.mlp_act_attr), by the config's name. In
# place: it overwrites the up projection's fresh output, and its backward keeps only its own output, which the down
# projection saves anyway (transformers' relu-then-square keeps the relu's output besides).
POINTWISE_ACTS = {"relu2": lambda: ReLUSquared(inplace=True)}


def pointwise_act(config, family: Family) -> torch.nn.Module | None:
    """Tigon's module for the activation the config names for a non-gated MLP; None where Tigon has none."""
    make = POINTWISE_ACTS.get(getattr(config, family.act_attr, None))
    return make() if make else None


def activation_of(config, family: Family) -> str | None:
    name = getattr(config, family.act_attr, None)
    return name if name in _HIDDEN_ACT else None


def mlp_class(family: Family, hf_class: type) -> type:
    """A gated-MLP class called as the family's (config[, intermediate_size=...]), one per family. Where the config
    names an activation Tigon has no kernel for, constructing it warns and builds hf_class (transformers' own)."""
    name = f"Tigon{family.prefix}MLP"
    if name in globals():
        return globals()[name]
    base = _MLP_BASES[family.mlp]

    class FamilyMLP(base):
        def __new__(cls, config=None, *args, **kwargs):  # no arguments: deepcopy and pickle rebuilding one
            if config is not None and activation_of(config, family) is None:
                warnings.warn(
                    f"tigon: {family.prefix}MLP with {family.act_attr}="
                    f"{getattr(config, family.act_attr, None)!r} has no Tigon kernel; keeping "
                    f"transformers' module",
                    stacklevel=2,
                )
                return hf_class(config, *args, **kwargs)  # not a FamilyMLP, so __init__ below is skipped
            return super().__new__(cls)

        def __init__(self, config, *args, intermediate_size: int | None = None) -> None:
            if args and family.mlp_layer_idx:  # called as (config, layer_idx): the layer decides its width
                with torch.device("meta"):
                    intermediate_size = hf_class(config, *args).intermediate_size
            elif args:
                intermediate_size = args[0]
            act = activation_of(config, family)
            if family.mlp == "phi3":
                super().__init__(config, in_place=True, hidden_act=act)
            elif family.mlp in ("gemma", "falcon_h1"):  # biases as their base decides
                super().__init__(config, in_place=True, intermediate_size=intermediate_size, hidden_act=act)
            else:
                super().__init__(
                    config,
                    in_place=True,
                    intermediate_size=intermediate_size,
                    hidden_act=act,
                    bias=bool(getattr(config, family.mlp_bias, False)) if family.mlp_bias else False,
                )

    return _register(FamilyMLP, name)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """transformers' apply_rotary_pos_emb (every family here: rotate-half, partial rotary when cos is narrower than
    the head) as Tigon's kernel. In place where it may be (rotates_in_place): the families' attention rotates fresh
    projections and reads only the results, so attention saves the projections' own memory and no rotated copy of q
    and k stays alive beside it."""
    return _rope(q, k, cos, sin, unsqueeze_dim, interleaved=False)


def _rope_tables(q, cos, sin):
    if cos.dtype != torch.float32 and cos.dtype != q.dtype:  # e.g. fp16 q with bf16 tables: the op takes fp32
        cos, sin = cos.float(), sin.float()
    return cos, sin


def _rope(q, k, cos, sin, unsqueeze_dim: int, interleaved: bool):
    layout = {1: "bhtd", 2: "bthd"}.get(unsqueeze_dim)
    if layout is None:
        raise ValueError(f"apply_rotary_pos_emb: argument 'unsqueeze_dim' must be 1 or 2, got {unsqueeze_dim!r}")
    cos, sin = _rope_tables(q, cos, sin)
    in_place = _rotates_in_place(q, k)
    if in_place and layout == "bhtd":  # over the projections themselves, where q and k are their transposed views
        rotated = _rope_projections(q, k, cos, sin, interleaved=interleaved)
        if rotated is not None:
            return rotated
    return _tigon_rope(q, k, cos, sin, layout=layout, interleaved=interleaved, in_place=in_place)


def apply_rotary_pos_emb_glm(q, k, cos, sin, unsqueeze_dim=1):
    """GLM's apply_rotary_pos_emb: adjacent pairs (2i, 2i + 1) over the first R dims (R = cos's width, the rest pass
    through), pair i turned by the angle at column i of the table (cos[..., :R/2] repeated twice element-wise, as
    GLM builds it). The same rotation as one Tigon kernel in its interleaved mode, on the table GLM would build."""
    half = cos.shape[-1] // 2
    cos, sin = cos[..., :half].repeat_interleave(2, -1), sin[..., :half].repeat_interleave(2, -1)
    return _rope(q, k, cos, sin, unsqueeze_dim, interleaved=True)


def apply_rotary_pos_emb_interleaved(q, k, cos, sin, unsqueeze_dim=1):
    """Cohere's apply_rotary_pos_emb: adjacent pairs (2i, 2i + 1) on a table its rotary embedding already builds
    interleaved (each angle twice in a row); fp32 math, one rounding to q's dtype, as Cohere computes it."""
    return _rope(q, k, cos, sin, unsqueeze_dim, interleaved=True)


def apply_rotary_pos_emb_halves(q, k, cos, sin, unsqueeze_dim=1):
    """GPT-OSS's apply_rotary_pos_emb: rotate-half pairs (i, i + D/2) with a half-width table (one angle per pair);
    the same rotation as Tigon's rotate-half kernel on the table written out for both halves."""
    return _rope(q, k, torch.cat([cos, cos], -1), torch.cat([sin, sin], -1), unsqueeze_dim, interleaved=False)


def apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """Qwen2-VL's mRoPE where transformers merges the sections at apply time: cos and sin are [3, B, T, D] (angles
    from the temporal, height and width position ids), and the i-th of the sections (mrope_section, repeated for the
    second half of the head) takes its columns from axis i mod 3; the rotation by the merged table is rotate-half, as
    one Tigon kernel."""
    if cos.dim() != 4 or cos.shape[0] != 3:
        raise ValueError(
            f"apply_multimodal_rotary_pos_emb: argument 'cos' must be [3, B, T, D] (one table per position axis), got "
            f"{tuple(cos.shape)}"
        )
    sections = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1)
    return _rope(q, k, cos, sin, unsqueeze_dim, interleaved=False)


def _rotary_emb_complex(xq, xk, freqs_cis, unsqueeze_dim: int):
    if not freqs_cis.is_complex() or freqs_cis.dim() != 3:
        raise ValueError(
            f"apply_rotary_emb: argument 'freqs_cis' must be a complex [B, T, D/2] tensor, got {freqs_cis.dtype} "
            f"{tuple(freqs_cis.shape)}"
        )
    cos, sin = freqs_cis.real.repeat_interleave(2, -1), freqs_cis.imag.repeat_interleave(2, -1)
    return _rope(xq, xk, cos.float(), sin.float(), unsqueeze_dim, interleaved=True)


def apply_rotary_emb_complex(xq, xk, freqs_cis):
    """Llama 4's apply_rotary_emb: [B, T, H, D] q and k as complex pairs (2i, 2i + 1) times freqs_cis[..., i] in fp32,
    one rounding back. A complex product is the interleaved rotation by the table's angle (its real part the cos, its
    imaginary part the sin, each once per pair), as one Tigon kernel."""
    return _rotary_emb_complex(xq, xk, freqs_cis, 2)


def apply_rotary_emb_complex_heads_first(xq, xk, freqs_cis):
    """DeepSeek-V2's apply_rotary_emb: Llama 4's complex rotation on [B, H, T, D] q and k (k a single latent head
    beside q's heads)."""
    return _rotary_emb_complex(xq, xk, freqs_cis, 1)


def apply_rotary_pos_emb_single(x, cos, sin, unsqueeze_dim=1):
    """Gemma 4's apply_rotary_pos_emb: one tensor per call (its q and k are rotated apart, each after its norm),
    rotate-half over the table's width, as one Tigon kernel. Calls of other shapes (its vision tower's 2-D rotary
    passes pieces of a head) keep transformers' formula."""
    layout = {1: "bhtd", 2: "bthd"}.get(unsqueeze_dim)
    seq = x.shape[{"bhtd": 2, "bthd": 1}[layout]] if x.dim() == 4 and layout else -1
    if layout is None or cos.dim() != 3 or cos.shape[1] != seq or cos.shape[-1] % 2 or cos.shape[-1] > x.shape[-1]:
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
    cos, sin = _rope_tables(x, cos, sin)
    return _tigon_rope_one(x, cos, sin, layout=layout)


ROPE = {
    "single": apply_rotary_pos_emb_single,
    "complex": apply_rotary_emb_complex,
    "complex_heads_first": apply_rotary_emb_complex_heads_first,
    "llama": apply_rotary_pos_emb,
    "glm": apply_rotary_pos_emb_glm,
    "interleaved": apply_rotary_pos_emb_interleaved,
    "halves": apply_rotary_pos_emb_halves,
}


def rope_functions(family) -> dict:
    """The modeling-module names a family's RoPE is rerouted through, each to Tigon's function."""
    names = {family.rope_fn: ROPE[family.rope]}
    if family.mrope:
        names["apply_multimodal_rotary_pos_emb"] = apply_multimodal_rotary_pos_emb
    return names


def experts_gate(fallback):
    """An _apply_gate for transformers' MoE experts: act(gate) * up over the [S, 2I] output of the fused gate_up
    projection (gate half first, as transformers' default gate splits it) in one Tigon kernel. transformers' grouped_mm
    and batched_mm experts implementations call it; fallback (transformers' gate) takes what the kernel cannot."""
    fallback = getattr(fallback, "_tigon_original", fallback)

    def _apply_gate(self, gate_up_out: torch.Tensor) -> torch.Tensor:
        act = _HIDDEN_ACT.get(getattr(self.config, "hidden_act", None))
        if (
            act is None
            or not getattr(self, "is_concatenated", True)
            or gate_up_out.dtype not in FLOAT_DTYPES
            or gate_up_out.device.type not in ("cpu", "cuda")
            or not rows_ok(gate_up_out)
        ):
            return fallback(self, gate_up_out)
        # In place (dgate_up over gate_up): the projection's output is used by nothing but this gate.
        return _FusedGLU.apply(gate_up_out, ACTIVATIONS[act], True)

    _apply_gate.__qualname__ = "tigon_experts_apply_gate"
    _apply_gate._tigon_original = fallback
    return _apply_gate


# transformers' experts implementations the fused op stands in for: those computing the plain experts with torch ops.
# A kernel picked by name (deepgemm, sonicmoe, one registered by the user) keeps its place.
_FUSED_OVER = (None, "eager", "grouped_mm", "batched_mm")


def _fusable(self, hidden_states, top_k_index, top_k_weights) -> bool:
    """The call's side of experts_forward's choice: the arguments transformers' MoE blocks pass (tokens [T, H],
    ids and weights [T, k]) on a device the op runs on, in a dtype it takes without another cast than autocast's."""
    ok = (
        isinstance(hidden_states, torch.Tensor)
        and isinstance(top_k_index, torch.Tensor)
        and isinstance(top_k_weights, torch.Tensor)
        and getattr(getattr(self, "config", None), "_experts_implementation", None) in _FUSED_OVER
        and hidden_states.dim() == 2
        and hidden_states.dtype in FLOAT_DTYPES
        and hidden_states.device.type in ("cpu", "cuda")
        and top_k_index.dtype in (torch.int32, torch.int64)
        and top_k_index.dim() == 2
        and top_k_index.shape[0] == hidden_states.shape[0]
        and top_k_weights.shape == top_k_index.shape
        and top_k_weights.is_floating_point()
    )
    # experts in another dtype than the activations are transformers' to handle (grouped_mm casts the activations),
    # but under autocast the op casts both
    weight = getattr(self, "gate_up_proj", None)
    return ok and (
        getattr(weight, "dtype", None) == hidden_states.dtype or torch.is_autocast_enabled(hidden_states.device.type)
    )


def experts_forward(fallback):
    """A forward for transformers' MoE experts modules: routing, both projections, the gate and the weighted sum as
    one tigon.ops.moe_experts, where experts_activation() finds the module's math to be the op's. fallback
    (transformers' forward, which dispatches on config._experts_implementation) takes everything else. It replaces
    that dispatcher, so the fused op runs whichever of eager, grouped_mm or batched_mm the config names."""
    fallback = getattr(fallback, "_tigon_original", fallback)

    def forward(self, hidden_states, top_k_index, top_k_weights, *args, **kwargs):
        act = None
        if not args and not kwargs and _fusable(self, hidden_states, top_k_index, top_k_weights):
            act = experts_activation(self)
        if act is None:
            return fallback(self, hidden_states, top_k_index, top_k_weights, *args, **kwargs)
        out = moe_experts(hidden_states, top_k_index, top_k_weights, self.gate_up_proj, self.down_proj, act)
        return out.to(hidden_states.dtype)  # under autocast the op computes in its dtype; transformers returns x's

    forward.__qualname__ = "tigon_experts_forward"
    forward._tigon_original = fallback
    return forward
