"""What differs between the model families Tigon patches: one Family record each, read by _patch.py.

Class names follow transformers' own pattern (<prefix>RMSNorm, <prefix>MLP, <prefix>Attention, <prefix>Experts,
<prefix>ForCausalLM in transformers.models.<name>.modeling_<name>); the flags say which quirk each family has. The
modeling modules are imported only when a family is patched.
"""

from __future__ import annotations

from dataclasses import dataclass

# RMSNorm variants: (offset, casting_mode, initial weight) for tigon.nn.RMSNorm.
NORMS = {
    "llama": (0.0, "llama", 1.0),  # weight * x_normed.to(input dtype)
    "gemma": (1.0, "gemma", 0.0),  # (x_normed * (1 + weight)) in fp32, one rounding
    "olmo2": (0.0, "gemma", 1.0),  # (weight * x_normed).to(input dtype): fp32 throughout, no offset
}


@dataclass(frozen=True)
class Family:
    name: str  # apply_tigon_to_<name>; transformers.models.<name>
    prefix: str  # class-name prefix in the modeling module
    model_types: tuple[str, ...]  # config.model_type values patch() maps here
    norm: str | None = "llama"  # key of NORMS; None: the family's norms are not RMSNorms Tigon reproduces
    # dX written over dY in the RMSNorm backward: only safe where no norm's output feeds a residual add directly
    # (pre-norm blocks). Sandwich norms (Gemma 2/3) and post-norms (OLMo 2) share dY with the residual branch.
    norm_in_place: bool = True
    # LayerNorm families: the class Tigon's layer_norm takes over ("LayerNorm": torch.nn.LayerNorm as the modeling
    # module builds it), and the offset added to its weight (Nemotron's LayerNorm1P: weight + 1)
    layer_norm: str | None = None
    layer_norm_offset: float = 0.0
    # "llama" (gate/up/down), "gemma" (GeGLU, no bias), "phi3" (fused gate_up), "falcon_h1" (config.mlp_multipliers
    # on the gate and the output), None
    mlp: str | None = "llama"
    # "llama": rotate-half pairs (i, i + R/2); "glm": adjacent pairs (2i, 2i + 1), each pair's angle from the first
    # half of the table (GLM's repeat_interleave); "interleaved": adjacent pairs on the table as given (Cohere);
    # "halves": rotate-half with a half-width table (GPT-OSS); "complex": adjacent pairs turned by a complex table
    # (Llama 4's freqs_cis; "complex_heads_first": DeepSeek-V2's, on [B, H, T, D]); None: transformers' own
    rope: str | None = "llama"
    rope_fn: str = "apply_rotary_pos_emb"  # the modeling module's name for it
    # mRoPE (Qwen2-VL, Qwen2.5-VL): transformers releases that merge the temporal, height and width sections into the
    # table at apply time call apply_multimodal_rotary_pos_emb; that is rerouted too where the module has it
    mrope: bool = False
    # a non-gated MLP's activation module attribute (Nemotron's act_fn), taken over by Tigon's pointwise kernel where
    # the config names an activation it has one for (_modules.POINTWISE_ACTS: the squared ReLU)
    mlp_act_attr: str | None = None
    mlp_bias: str | None = None  # the config attribute that gives the family's MLP biases (None: never biased)
    mlp_layer_idx: bool = False  # the MLP is built as (config, layer_idx), its width per layer (Gemma 4)
    act_attr: str = "hidden_act"  # config attribute naming the MLP activation
    # MoE: <prefix>Experts with 3-D gate_up_proj, gated through _apply_gate; the router's load-balancing loss is added
    # where the modeling module has load_balancing_loss_func (not every MoE family trains with one)
    experts: bool = False
    # the experts' gate is act(gate) * up (GPT-OSS's clamped gate is not): their forward becomes one fused
    # tigon.ops.moe_experts where the module allows it, and _apply_gate Tigon's for the rest
    experts_gate: bool = True
    softcap: bool = False  # config.final_logit_softcapping applies to the logits
    logits_scaling: bool = False  # logits divided by config.logits_scaling (Granite)
    logit_scale: str | None = None  # config attribute the logits are multiplied by (Cohere, Falcon-H1)
    # class names where the family departs from <prefix>MLP / <prefix>Attention / <prefix>ForCausalLM (the VLMs'
    # language models); causal_lm None: no causal-LM class, the loss stays transformers'
    mlp_name: str = ""
    attention_name: str = ""
    causal_lm: str | None = ""

    @property
    def module(self) -> str:
        return f"transformers.models.{self.name}.modeling_{self.name}"

    @property
    def norm_cls(self) -> str:
        return f"{self.prefix}RMSNorm"

    @property
    def mlp_cls(self) -> str:
        return self.mlp_name or f"{self.prefix}MLP"

    @property
    def attention_cls(self) -> str:
        return self.attention_name or f"{self.prefix}Attention"

    @property
    def causal_lm_cls(self) -> str | None:
        return f"{self.prefix}ForCausalLM" if self.causal_lm == "" else self.causal_lm


FAMILIES = {
    f.name: f
    for f in [
        Family("llama", "Llama", ("llama",), mlp_bias="mlp_bias"),
        Family("mistral", "Mistral", ("mistral",)),
        Family("mixtral", "Mixtral", ("mixtral",), mlp=None, experts=True),
        Family("qwen2", "Qwen2", ("qwen2",)),
        Family("qwen3", "Qwen3", ("qwen3",)),
        Family("qwen3_moe", "Qwen3Moe", ("qwen3_moe",), experts=True),
        Family("gemma", "Gemma", ("gemma",), norm="gemma", mlp="gemma"),
        Family(
            "gemma2",
            "Gemma2",
            ("gemma2",),
            norm="gemma",
            norm_in_place=False,
            mlp="gemma",
            act_attr="hidden_activation",
            softcap=True,
        ),
        Family(
            "gemma3",
            "Gemma3",
            ("gemma3_text",),
            norm="gemma",
            norm_in_place=False,
            mlp="gemma",
            act_attr="hidden_activation",
            softcap=True,
        ),
        Family(
            "gemma4",
            "Gemma4",
            ("gemma4_text",),
            norm="olmo2",  # Gemma 4's norm is OLMo 2's: fp32 throughout, weight without offset
            norm_in_place=False,
            mlp="gemma",
            rope="single",
            act_attr="hidden_activation",
            softcap=True,
            mlp_layer_idx=True,
            mlp_name="Gemma4TextMLP",
            attention_name="Gemma4TextAttention",
        ),
        Family("phi3", "Phi3", ("phi3",), mlp="phi3"),
        Family("olmo2", "Olmo2", ("olmo2",), norm="olmo2", norm_in_place=False),
        Family("granite", "Granite", ("granite",), mlp_bias="mlp_bias", logits_scaling=True),
        Family("ministral", "Ministral", ("ministral",)),
        Family("ministral3", "Ministral3", ("ministral3",)),
        Family("smollm3", "SmolLM3", ("smollm3",)),  # its NoPE layers call no RoPE
        Family("exaone4", "Exaone4", ("exaone4",), norm_in_place=False),  # post-norms, q/k norms
        Family("hunyuan_v1_dense", "HunYuanDenseV1", ("hunyuan_v1_dense",)),
        Family("hunyuan_v1_moe", "HunYuanMoEV1", ("hunyuan_v1_moe",), experts=True),  # shared MLP too
        Family("olmo3", "Olmo3", ("olmo3",), norm="olmo2", norm_in_place=False),
        Family("glm", "Glm", ("glm",), mlp="phi3", rope="glm"),
        Family("glm4", "Glm4", ("glm4",), norm_in_place=False, mlp="phi3", rope="glm"),  # sandwich norms
        # MLA attention; its RoPE is Llama's where config.rope_interleave is False (otherwise transformers' own)
        Family("deepseek_v3", "DeepseekV3", ("deepseek_v3",), experts=True),
        # MLA attention whose RoPE turns complex pairs (Llama 4's rotation, heads first); its router stays
        Family(
            "deepseek_v2",
            "DeepseekV2",
            ("deepseek_v2",),
            rope="complex_heads_first",
            rope_fn="apply_rotary_emb",
            experts=True,
        ),
        Family("helium", "Helium", ("helium",), mlp_bias="mlp_bias", rope="glm"),  # GLM's adjacent pairs
        Family("seed_oss", "SeedOss", ("seed_oss",), mlp=None),  # the MLP ends in a residual dropout: kept as it is
        Family("ernie4_5", "Ernie4_5", ("ernie4_5",), mlp_bias="use_bias", rope="glm"),
        # MoE families with shared or dense-layer MLPs beside their experts (those MLPs are Tigon's too)
        Family("qwen2_moe", "Qwen2Moe", ("qwen2_moe",), experts=True),
        Family("olmoe", "Olmoe", ("olmoe",), experts=True),  # its q/k norms span all heads: RMSNorms all the same
        Family("ernie4_5_moe", "Ernie4_5_Moe", ("ernie4_5_moe",), mlp_bias="use_bias", rope="glm", experts=True),
        Family("dots1", "Dots1", ("dots1",), experts=True),
        Family("glm4_moe", "Glm4Moe", ("glm4_moe",), experts=True),  # rotate-half on a partial rotary dim
        # Granite's multipliers and logits scaling; their MLPs (the shared one's input_linear / output_linear) stay
        Family("granitemoe", "GraniteMoe", ("granitemoe",), mlp=None, experts=True, logits_scaling=True),
        Family(
            "granitemoeshared", "GraniteMoeShared", ("granitemoeshared",), mlp=None, experts=True, logits_scaling=True
        ),
        # attention sinks and a clamped gate stay transformers'
        Family(
            "gpt_oss", "GptOss", ("gpt_oss",), norm="olmo2", mlp=None, rope="halves", experts=True, experts_gate=False
        ),
        # LayerNorm families (Cohere's without bias in fp32, Nemotron's 1 + w, nn.LayerNorm); non-gated MLPs stay
        # transformers' but for Nemotron's squared ReLU
        Family(
            "cohere",
            "Cohere",
            ("cohere",),
            norm=None,
            layer_norm="CohereLayerNorm",
            rope="interleaved",
            logit_scale="logit_scale",
        ),
        Family(
            "cohere2",
            "Cohere2",
            ("cohere2",),
            norm=None,
            layer_norm="Cohere2LayerNorm",
            rope="interleaved",
            logit_scale="logit_scale",
        ),
        Family(
            "nemotron",
            "Nemotron",
            ("nemotron",),
            norm=None,
            layer_norm="NemotronLayerNorm1P",
            layer_norm_offset=1.0,
            mlp=None,
            mlp_act_attr="act_fn",  # up, squared ReLU, down
        ),
        Family("starcoder2", "Starcoder2", ("starcoder2",), norm=None, layer_norm="LayerNorm", mlp=None),
        Family("stablelm", "StableLm", ("stablelm",), norm=None, layer_norm="LayerNorm"),
        # Mamba-2 mixer, its gated norm and the muP multipliers outside the MLP stay transformers'; one norm feeds both
        # the mixer and the attention, so norms out of place
        Family(
            "falcon_h1",
            "FalconH1",
            ("falcon_h1",),
            norm_in_place=False,
            mlp="falcon_h1",
            logit_scale="lm_head_multiplier",
        ),
        # its experts run their gate inline and it trains without a router loss; qk L2 norms and chunked attention stay
        Family(
            "llama4",
            "Llama4Text",
            ("llama4_text",),
            rope="complex",
            rope_fn="apply_rotary_emb",
            experts=True,
            experts_gate=False,
            causal_lm="Llama4ForCausalLM",
        ),
        # Zero-centred (1 + w) norms in fp32 (Gemma's); the gated norms and the Gated DeltaNet linear attention stay
        # transformers'. Qwen3.5's rotary embedding merges its mRoPE sections into one table; the rotation is Tigon's
        Family("qwen3_next", "Qwen3Next", ("qwen3_next",), norm="gemma", experts=True),
        Family("qwen3_5", "Qwen3_5", ("qwen3_5", "qwen3_5_text"), norm="gemma"),
        Family("qwen3_5_moe", "Qwen3_5Moe", ("qwen3_5_moe", "qwen3_5_moe_text"), norm="gemma", experts=True),
        # The language models of VLMs (the vision towers' own classes are left alone; Qwen2.5-VL's vision blocks
        # share its RMSNorm class, the same math). mRoPE's tables (position ids per temporal, height and width axis)
        # stay transformers'; the rotation by them is Tigon's; ForConditionalGeneration's loss stays transformers'.
        Family("qwen2_vl", "Qwen2VL", ("qwen2_vl", "qwen2_vl_text"), mlp_name="Qwen2MLP", mrope=True, causal_lm=None),
        Family(
            "qwen2_5_vl",
            "Qwen2_5_VL",
            ("qwen2_5_vl", "qwen2_5_vl_text"),
            mlp_name="Qwen2MLP",
            mrope=True,
            causal_lm=None,
        ),
        Family("qwen3_vl", "Qwen3VLText", ("qwen3_vl", "qwen3_vl_text"), causal_lm=None),
        Family("qwen3_vl_moe", "Qwen3VLMoeText", ("qwen3_vl_moe", "qwen3_vl_moe_text"), causal_lm=None, experts=True),
        # cross-attention layers gate their residual branches with tanh: norms out of place
        Family(
            "mllama",
            "MllamaText",
            ("mllama", "mllama_text_model"),
            norm_in_place=False,
            attention_name="MllamaTextSelfAttention",
            causal_lm="MllamaForCausalLM",
        ),
    ]
}

BY_MODEL_TYPE = {t: f for f in FAMILIES.values() for t in f.model_types}
