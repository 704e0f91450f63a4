"""The model's forward as plain tensor code over its own modules and parameters: embedding, decoder blocks (pre-norm,
Gemma's sandwich norms or OLMo 2's post-norms), final norm and logits with the family's multipliers and softcaps.

The attention step is passed in (`attend(index, layer, q, k, v)`), so the prompt (SDPA, the cache written in one
copy) and the decode step (one token against the static cache) share every other line.
"""

from __future__ import annotations

import torch

from tigon.inference._ops import _add_rms_norm, _glu, _linear, _projections, _rms_norm, _rope, _tigon_kernels
from tigon.inference._spec import Layer, Spec, is_moe, router, shared_experts


def _sandwich_norms(block) -> tuple[str, str, str]:
    """The norms after attention, before the MLP and after it: Gemma 2/3's names, or GLM 4's for the same places."""
    if hasattr(block, "post_self_attn_layernorm"):
        return "post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm"
    return "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"


def _parallel(block) -> bool:
    """Attention and MLP both read the input norm's output and join the residual together (Cohere; StableLM's option):
    such blocks have no norm between the two."""
    return getattr(block, "post_attention_layernorm", None) is None and not hasattr(block, "post_feedforward_layernorm")


class Decoder:
    def __init__(self, spec: Spec, max_seq_len: int) -> None:
        self.spec = spec
        # pre-norm blocks of RMSNorms in a row, each residual add foldable into the norm after it (_fused_pre_norm)
        self.fusable = (
            spec.placement == "pre"
            and spec.residual_multiplier == 1.0
            and spec.norm is not None
            and not any(_parallel(layer.block) for layer in spec.layers)
        )
        self.rope_tables = {}  # rope key -> (cos, sin) [max_seq_len, R] in the model's dtype, as transformers rounds
        positions = torch.arange(max_seq_len, device=spec.device)[None]
        probe = torch.empty(0, dtype=spec.dtype, device=spec.device)
        with torch.no_grad():
            for key, (rotary, layer_type) in spec.rope_modules.items():
                extra = () if layer_type is None else (layer_type,)
                cos, sin = rotary(probe, positions, *extra)
                self.rope_tables[key] = (cos[0], sin[0])

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        s = self.spec
        h = s.backbone.embed_tokens(ids)
        if s.embed_multiplier is not None:
            m = s.embed_multiplier
            h = h * (torch.tensor(m, dtype=h.dtype) if s.embed_multiplier_rounded else m)
        return h

    def hidden(self, h: torch.Tensor, positions: torch.Tensor, attend) -> torch.Tensor:
        """h [B, T, hidden] at positions [B, T] through every block and the final norm."""
        s = self.spec
        angles = {key: (cos[positions], sin[positions]) for key, (cos, sin) in self.rope_tables.items()}
        if self.fusable and _tigon_kernels(h):
            return self._fused_pre_norm(h, angles, attend)
        for i, layer in enumerate(s.layers):
            h = self._block(i, layer, h, *angles[layer.rope], attend)
        return _rms_norm(h, s.backbone.norm, s.norm)

    def _fused_pre_norm(self, h: torch.Tensor, angles: dict, attend) -> torch.Tensor:
        """Pre-norm blocks with every residual add fused into the norm after it (Tigon's add_rms_norm): a block's
        MLP output joins the stream in the next block's input norm, the last one in the final norm."""
        s = self.spec
        pending = None
        for i, layer in enumerate(s.layers):
            block = layer.block
            if pending is None:
                x = _rms_norm(h, block.input_layernorm, s.norm)
            else:
                x, h = _add_rms_norm(pending, h, block.input_layernorm, s.norm)
            a = self._attention(i, layer, x, *angles[layer.rope], attend)
            x, h = _add_rms_norm(a, h, block.post_attention_layernorm, s.norm)
            pending = self._feed_forward(layer, x)
        return _add_rms_norm(pending, h, s.backbone.norm, s.norm)[0]

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        s = self.spec
        logits = _linear(h, s.model.lm_head.weight, s.model.lm_head.bias)
        if s.logits_divisor != 1.0:
            logits = logits / s.logits_divisor
        if s.logit_scale is not None:  # Cohere
            logits = logits * s.logit_scale
        if s.final_softcap is not None:
            logits = torch.tanh(logits / s.final_softcap) * s.final_softcap
        return logits

    def _residual(self, h: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        m = self.spec.residual_multiplier
        return h + (branch if m == 1.0 else branch * m)

    def _norm(self, module, x: torch.Tensor) -> torch.Tensor:
        return _rms_norm(x, module, self.spec.norm)

    def _block(self, i: int, layer: Layer, h, cos, sin, attend) -> torch.Tensor:
        block, placement, norm = layer.block, self.spec.placement, self._norm
        if placement == "post":
            h = h + norm(block.post_attention_layernorm, self._attention(i, layer, h, cos, sin, attend))
            return h + norm(block.post_feedforward_layernorm, self._feed_forward(layer, h))
        x = norm(block.input_layernorm, h)
        a = self._attention(i, layer, x, cos, sin, attend)
        if _parallel(block):
            return h + a + self._feed_forward(layer, x)
        if placement == "sandwich":
            after_attn, before_mlp, after_mlp = (getattr(block, n) for n in _sandwich_norms(block))
            h = h + norm(after_attn, a)
            return h + norm(after_mlp, self._feed_forward(layer, norm(before_mlp, h)))
        h = self._residual(h, a)
        return self._residual(h, self._feed_forward(layer, norm(block.post_attention_layernorm, h)))

    def _attention(self, i: int, layer: Layer, x, cos, sin, attend) -> torch.Tensor:
        s, a = self.spec, layer.attn
        b, t = x.shape[:2]
        d = s.head_dim
        if hasattr(a, "qkv_proj"):
            q, k, v = _linear(x, a.qkv_proj.weight, a.qkv_proj.bias).split(
                [s.heads * d, s.kv_heads * d, s.kv_heads * d], dim=-1
            )
        else:
            q, k, v = _projections(x, [a.q_proj, a.k_proj, a.v_proj])
        has_norms = hasattr(a, "q_norm")
        if has_norms and not layer.head_norm:  # OLMo 2: over the whole projection
            q, k = self._norm(a.q_norm, q), self._norm(a.k_norm, k)
        q, k, v = (y.reshape(b, t, -1, d) for y in (q, k, v))
        if has_norms and layer.head_norm:
            q, k = self._norm(a.q_norm, q), self._norm(a.k_norm, k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        if getattr(a, "qk_layernorm", False):  # StableLM: a LayerNorm per head, before RoPE
            q, k = a.q_layernorm(q), a.k_layernorm(k)
        if layer.rotary:
            q, k = _rope(q, k, cos, sin, s.rope_pairs, s.rope_fp32)
        if hasattr(a, "query_layernorm"):  # HunYuan: per-head norms after RoPE
            q, k = self._norm(a.query_layernorm, q), self._norm(a.key_layernorm, k)
        out = attend(i, layer, q, k, v.transpose(1, 2))
        return _linear(out.transpose(1, 2).reshape(b, t, -1), a.o_proj.weight, a.o_proj.bias)

    def _feed_forward(self, layer: Layer, x: torch.Tensor) -> torch.Tensor:
        """The block's MLP or MoE block, plus Granite MoE Shared's shared MLP beside it."""
        out = self._mlp(layer.mlp, x)
        shared = getattr(layer.block, "shared_mlp", None)
        return out if shared is None else out + self._mlp(shared, x)

    def _mlp(self, mlp, x: torch.Tensor) -> torch.Tensor:
        if is_moe(mlp):
            return self._experts(mlp, x)
        if hasattr(mlp, "c_fc"):  # StarCoder 2's ungated MLP
            return _linear(
                self.spec.activation(_linear(x, mlp.c_fc.weight, mlp.c_fc.bias)), mlp.c_proj.weight, mlp.c_proj.bias
            )
        fused = getattr(mlp, "gate_up_proj", None) or getattr(mlp, "input_linear", None)
        if fused is not None:  # Phi-3's fused projection, Granite MoE Shared's input_linear: gate first
            gate, up = _linear(x, fused.weight, fused.bias).chunk(2, dim=-1)
        else:
            gate, up = _projections(x, [mlp.gate_proj, mlp.up_proj])
        s = self.spec
        down = mlp.down_proj if hasattr(mlp, "down_proj") else mlp.output_linear
        return _linear(_glu(gate, up, s.glu, s.activation), down.weight, down.bias)

    def _experts(self, mlp, x: torch.Tensor) -> torch.Tensor:
        """A sparse MoE block: the model's own router, then every token's experts in one tigon.ops.moe_experts (routing
        on the device: nothing synchronises, so the step stays one CUDA graph)."""
        from tigon.ops.moe import experts_activation, moe_experts

        x2 = x.reshape(-1, x.shape[-1])
        _, weights, ids = router(mlp)(x2)
        e = mlp.experts
        out = moe_experts(x2, ids, weights, e.gate_up_proj, e.down_proj, activation=experts_activation(e))
        shared = shared_experts(mlp)
        if shared is not None:  # Qwen2-MoE's (under a sigmoid gate) and ERNIE 4.5's: a dense MLP every token runs
            dense = self._mlp(shared, x2)
            gate = getattr(mlp, "shared_expert_gate", None)
            if gate is not None:
                dense = torch.sigmoid(_linear(x2, gate.weight, gate.bias)) * dense
            out = out + dense
        return out.reshape(x.shape)
