"""Hugging Face transformers models on Tigon's kernels, in one line.

    import tigon.transformers
    model = tigon.transformers.patch(model)             # any supported model (PEFT-wrapped too), in place
    tigon.transformers.apply_tigon_to_llama()          # class level: Llama models built from now on
    model = tigon.transformers.AutoTigonForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B")

apply_tigon_to_<family>(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=True,
model=None, geglu=None, check_targets=False, attention=None): without model, rebinds the family's RMSNorm (or
LayerNorm: rms_norm= switches the family's norms), MLP and apply_rotary_pos_emb in its transformers modeling module (and its MoE experts' gate and its ForCausalLM.forward), so build the model afterwards
(RoPE, the experts' gate and the loss are looked up at call time: they switch for models already built too); with
model=, replaces that model's modules in place (same parameters, same state dict) and reroutes its RoPE and loss
only. swiglu switches the family's gated MLP, whatever its activation (geglu= is the same switch under Gemma's
name). fused_linear_cross_entropy: the loss in training with labels skips the logits (returned as None);
cross_entropy: Tigon's cross entropy on the logits where they are computed (eval with labels, or instead of the
fused loss). check_targets=True validates the labels first (one synchronisation per step; an out-of-range label
otherwise gives a NaN loss on a GPU). attention (instance level only): True puts the model on
attn_implementation="tigon" (tigon.ops.flash_attention; see tigon.transformers.attention); None (the default) and
False keep the model's own (SDPA, ...) while Tigon's attention backward trails cuDNN's.
Importing tigon.transformers registers "tigon" with transformers, so attn_implementation="tigon" also works in
from_pretrained / from_config. revert() undoes the class-level patches; revert(model=m) gives m its attention back.
What was replaced is logged at INFO on the "tigon.transformers" logger.
"""

try:
    import transformers as _transformers  # noqa: F401  (checked first: the error below says what to install)
except ImportError as _e:
    raise ImportError(
        "tigon.transformers needs Hugging Face transformers, which is not installed: "
        "pip install 'tigon[hf]' (from a checkout: pip install \".[hf]\")"
    ) from _e

from tigon.transformers import attention as _attention
from tigon.transformers._families import BY_MODEL_TYPE, FAMILIES
from tigon.transformers._patch import apply, patch, revert
from tigon.transformers.auto import AutoTigonForCausalLM

_attention.register()  # attn_implementation="tigon"

SUPPORTED_MODEL_TYPES = tuple(sorted(BY_MODEL_TYPE))


def _entry(name: str):
    def apply_tigon(
        rope: bool = True,
        rms_norm: bool = True,
        swiglu: bool = True,
        cross_entropy: bool = False,
        fused_linear_cross_entropy: bool = True,
        model=None,
        geglu: bool | None = None,
        check_targets: bool = False,
        attention: bool | None = None,
        tiled_mlp: bool | int = False,
    ):
        return apply(
            name,
            rope,
            rms_norm,
            swiglu,
            cross_entropy,
            fused_linear_cross_entropy,
            model,
            geglu,
            check_targets,
            attention,
            tiled_mlp,
        )

    apply_tigon.__name__ = apply_tigon.__qualname__ = f"apply_tigon_to_{name}"
    apply_tigon.__doc__ = (
        f"Tigon for transformers' {FAMILIES[name].prefix} models: class level without model=, "
        f"instance level with it (see tigon.transformers)."
    )
    return apply_tigon


apply_tigon_to_llama = _entry("llama")
apply_tigon_to_mistral = _entry("mistral")
apply_tigon_to_mixtral = _entry("mixtral")
apply_tigon_to_qwen2 = _entry("qwen2")
apply_tigon_to_qwen3 = _entry("qwen3")
apply_tigon_to_qwen3_moe = _entry("qwen3_moe")
apply_tigon_to_gemma = _entry("gemma")
apply_tigon_to_gemma2 = _entry("gemma2")
apply_tigon_to_gemma3 = _entry("gemma3")  # Gemma 3 text (model type gemma3_text, Gemma3ForCausalLM)
apply_tigon_to_gemma4 = _entry("gemma4")  # Gemma 4 text (model type gemma4_text, Gemma4ForCausalLM)
apply_tigon_to_phi3 = _entry("phi3")
apply_tigon_to_olmo2 = _entry("olmo2")
apply_tigon_to_granite = _entry("granite")
apply_tigon_to_ministral = _entry("ministral")
apply_tigon_to_ministral3 = _entry("ministral3")
apply_tigon_to_smollm3 = _entry("smollm3")
apply_tigon_to_exaone4 = _entry("exaone4")
apply_tigon_to_hunyuan_v1_dense = _entry("hunyuan_v1_dense")
apply_tigon_to_hunyuan_v1_moe = _entry("hunyuan_v1_moe")
apply_tigon_to_olmo3 = _entry("olmo3")
apply_tigon_to_glm = _entry("glm")
apply_tigon_to_glm4 = _entry("glm4")
apply_tigon_to_deepseek_v3 = _entry("deepseek_v3")
apply_tigon_to_deepseek_v2 = _entry("deepseek_v2")  # MLA with complex RoPE; its router stays transformers'
apply_tigon_to_helium = _entry("helium")
apply_tigon_to_seed_oss = _entry("seed_oss")
apply_tigon_to_ernie4_5 = _entry("ernie4_5")
apply_tigon_to_qwen2_moe = _entry("qwen2_moe")
apply_tigon_to_olmoe = _entry("olmoe")
apply_tigon_to_ernie4_5_moe = _entry("ernie4_5_moe")
apply_tigon_to_dots1 = _entry("dots1")
apply_tigon_to_glm4_moe = _entry("glm4_moe")
apply_tigon_to_granitemoe = _entry("granitemoe")
apply_tigon_to_granitemoeshared = _entry("granitemoeshared")
apply_tigon_to_gpt_oss = _entry("gpt_oss")
apply_tigon_to_cohere = _entry("cohere")
apply_tigon_to_cohere2 = _entry("cohere2")
apply_tigon_to_nemotron = _entry("nemotron")
apply_tigon_to_starcoder2 = _entry("starcoder2")
apply_tigon_to_stablelm = _entry("stablelm")
apply_tigon_to_falcon_h1 = _entry("falcon_h1")  # norms, MLP, RoPE, loss; the Mamba-2 mixer stays transformers'
apply_tigon_to_llama4 = _entry("llama4")  # Llama 4 text (model type llama4_text, Llama4ForCausalLM)
apply_tigon_to_qwen3_next = _entry("qwen3_next")  # the Gated DeltaNet layers and gated norms stay transformers'
apply_tigon_to_qwen3_5 = _entry("qwen3_5")  # Qwen3_5ForCausalLM with the fused loss; in the VLM, the language model
apply_tigon_to_qwen3_5_moe = _entry("qwen3_5_moe")
apply_tigon_to_qwen2_vl = _entry("qwen2_vl")  # the language model; vision tower, mRoPE tables and loss transformers'
apply_tigon_to_qwen2_5_vl = _entry("qwen2_5_vl")
apply_tigon_to_qwen3_vl = _entry("qwen3_vl")
apply_tigon_to_qwen3_vl_moe = _entry("qwen3_vl_moe")
apply_tigon_to_mllama = _entry("mllama")  # MllamaForCausalLM with the fused loss; in the VLM, the language model

__all__ = ["AutoTigonForCausalLM", "SUPPORTED_MODEL_TYPES", "TigonCallback", "patch", "revert"] + [
    f"apply_tigon_to_{n}" for n in FAMILIES
]


def __getattr__(name: str):
    if name == "TigonCallback":  # imported on use: transformers' trainer modules are heavier than the models'
        from tigon.transformers.trainer import TigonCallback

        return TigonCallback
    raise AttributeError(f"module 'tigon.transformers' has no attribute {name!r}")
