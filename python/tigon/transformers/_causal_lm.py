"""The causal-LM forward with Tigon's loss.

Training with labels: the decoder runs as transformers runs it, then the lm_head projection and the loss are one
fused linear + cross entropy, so the [tokens, vocab] logits never exist (the output's logits are None). The loss
matches transformers' ForCausalLMLoss (loss/loss_utils.py): labels shifted left with ignore_index (-100) padding unless
shift_labels is given, mean over the non-ignored tokens, or a sum divided by num_items_in_batch when the Trainer
passes it (gradient accumulation); logits_to_keep slices the hidden states first; Gemma 2/3's final-logit softcap is
the op's softcap; Granite's logits / config.logits_scaling and Cohere's logits * config.logit_scale (Falcon-H1's * config.lm_head_multiplier) are applied to the hidden states (the same product, one
rounding elsewhere); MoE families add router_aux_loss_coef * the load-balancing loss as transformers does.

Everything else (eval, no labels, a custom loss_function, an lm_head that is not a plain float nn.Linear, e.g.
LoRA-wrapped or quantised) goes to transformers' own forward, optionally with Tigon's cross entropy on its logits.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect

import torch
import torch.nn.functional as F
from transformers.loss.loss_utils import ForCausalLMLoss
from transformers.modeling_outputs import CausalLMOutputWithPast, MoeCausalLMOutputWithPast

from tigon.ops._common import FLOAT_DTYPES
from tigon.ops.cross_entropy import cross_entropy
from tigon.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
from tigon.transformers._families import Family

# Logits per chunk in a patched model's loss: a third of the op's default. Beside a model's activations, weights and
# optimizer state the loss must hold no more than Liger's chunked loss does; 512 MiB keeps >= 2048 tokens per chunk
# up to a 128k vocabulary, where the GEMMs still run at full speed (docs/design/fused-linear-cross-entropy.md).
MODEL_MEMORY_BUDGET = 512 << 20

try:  # transformers >= 5.2x; older releases slice inline (the 2-D tensor forms came with the helper)
    from transformers.modeling_utils import slice_logits_to_keep
except ImportError:

    def slice_logits_to_keep(hidden_states: torch.Tensor, logits_to_keep) -> torch.Tensor:
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        return hidden_states[:, keep, :]


def _shifted_targets(labels, device, ignore_index=-100, shift_labels=None):
    if shift_labels is None:  # tokens < n predict n; the last position has nothing to predict
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    return shift_labels.reshape(-1).to(device)


def _divide(loss, num_items_in_batch):
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def fused_loss(
    model,
    family: Family,
    hidden: torch.Tensor,
    labels,
    num_items_in_batch=None,
    ignore_index=-100,
    shift_labels=None,
    check_targets=False,
    **_,
) -> torch.Tensor:
    """ForCausalLMLoss(lm_head(hidden) [softcapped / scaled as the family does], labels) without the logits."""
    target = _shifted_targets(labels, hidden.device, ignore_index, shift_labels).view(hidden.shape[:-1])
    x = hidden  # unreshaped: the op's input gradient then reaches the final norm as a tensor it may write over
    config = model.config
    if family.logits_scaling:
        x = x / config.logits_scaling
    if family.logit_scale:
        x = x * getattr(config, family.logit_scale)
    softcap = getattr(config, "final_logit_softcapping", None) if family.softcap else None
    weight, bias = model.lm_head.weight, model.lm_head.bias
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = fused_linear_cross_entropy(
        x,
        weight,
        target,
        bias,
        ignore_index=ignore_index,
        softcap=softcap,
        reduction=reduction,
        check_targets=check_targets,
        memory_budget=MODEL_MEMORY_BUDGET,
        # dW in the weight's dtype across chunks, as the unpatched model's autograd (and Liger) hold it: an fp32
        # V x H buffer would be the largest thing the loss holds
        dw_accumulation="weight",
    )
    return loss if num_items_in_batch is None else _divide(loss, num_items_in_batch)


def logits_loss(
    logits: torch.Tensor,
    labels,
    num_items_in_batch=None,
    ignore_index=-100,
    shift_labels=None,
    check_targets=False,
    **_,
) -> torch.Tensor:
    """ForCausalLMLoss on materialised logits with Tigon's cross entropy (fp32 math on logits of any float dtype,
    so no fp32 copy of them; not in place: the logits go back to the caller)."""
    target = _shifted_targets(labels, logits.device, ignore_index, shift_labels)
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        target,
        ignore_index=ignore_index,
        reduction=reduction,
        check_targets=check_targets,
    )
    return loss if num_items_in_batch is None else _divide(loss, num_items_in_batch)


def _hf_loss(model) -> bool:
    """Whether the model computes transformers' default causal-LM loss (not a loss_function set by the user)."""
    return "_loss_function" not in model.__dict__ and model.loss_function is ForCausalLMLoss


def _fusable(model) -> bool:
    head = model.lm_head
    if not isinstance(head, torch.nn.Linear) or head.weight.dtype not in FLOAT_DTYPES:
        return False  # LoRA / modules_to_save wrappers, quantised weights: transformers' own lm_head call
    return head.weight.device.type in ("cpu", "cuda")


# the output classes' field names, read once here: torch.compile cannot trace dataclasses.fields
_FIELDS = {
    cls: frozenset(f.name for f in dataclasses.fields(cls))
    for cls in (CausalLMOutputWithPast, MoeCausalLMOutputWithPast)
}


def _output(cls, outputs, **fields):
    """cls (a CausalLM output) from the decoder's outputs (cache, hidden states, attentions, router logits: whatever
    this transformers release names them) plus the given fields."""
    kept = {k: v for k, v in outputs.items() if k in _FIELDS[cls] and k != "last_hidden_state"}
    return cls(**kept, **fields)


def _finish(model, out, return_dict):
    if return_dict is None:  # as transformers' can_return_tuple decides
        return_dict = getattr(model.config, "return_dict", True)
    return out if return_dict else out.to_tuple()


def _fused_forward(model, family: Family, balance, kwargs: dict, check_targets: bool):
    return_dict = kwargs.pop("return_dict", None)
    labels = kwargs.pop("labels")
    logits_to_keep = kwargs.pop("logits_to_keep", 0)
    if family.experts and balance is not None:
        router = kwargs.pop("output_router_logits", None)
        kwargs["output_router_logits"] = model.config.output_router_logits if router is None else router
    outputs = model.model(**kwargs)  # the loss kwargs go along, as transformers passes them
    hidden = slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep)
    loss = fused_loss(model, family, hidden, labels, check_targets=check_targets, **kwargs)
    if not family.experts:
        return _finish(model, _output(CausalLMOutputWithPast, outputs, loss=loss, logits=None), return_dict)
    aux_loss = None
    if balance is not None and kwargs["output_router_logits"]:
        aux_loss = balance(
            outputs.router_logits, model.num_experts, model.num_experts_per_tok, kwargs.get("attention_mask")
        )
        loss = loss + model.router_aux_loss_coef * aux_loss.to(loss.device)
    out = _output(MoeCausalLMOutputWithPast, outputs, loss=loss, aux_loss=aux_loss, logits=None)
    return _finish(model, out, return_dict)


def _ce_forward(model, original, kwargs: dict, check_targets: bool):
    return_dict = kwargs.pop("return_dict", None)
    labels = kwargs.pop("labels")
    out = original(model, return_dict=True, **kwargs)  # logits (softcapped / scaled) and aux_loss, no loss
    loss = logits_loss(out.logits, labels, check_targets=check_targets, **kwargs)
    if getattr(out, "aux_loss", None) is not None:
        loss = loss + model.router_aux_loss_coef * out.aux_loss.to(loss.device)
    fields = dict(out.items())
    fields["loss"] = loss
    return _finish(model, type(out)(**fields), return_dict)


def make_forward(original, family: Family, fused: bool, ce: bool, check_targets: bool = False):
    """A <Family>ForCausalLM.forward routing the loss through Tigon (fused: linear + CE in training; ce: Tigon's
    cross entropy on the logits otherwise; check_targets: labels validated first, one synchronisation per step);
    transformers' forward for everything it does not cover."""
    original = getattr(original, "_tigon_original", original)
    params = list(inspect.signature(original).parameters.values())[1:]
    # the MoE families' router load-balancing loss, from their own modeling module
    balance = getattr(importlib.import_module(family.module), "load_balancing_loss_func", None)
    positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]

    @functools.wraps(original)  # keeps the signature (with **kwargs) that the Trainer inspects for loss kwargs
    def forward(self, *args, **kwargs):
        if len(args) > len(positional) or any(name in kwargs for name in positional[: len(args)]):
            return original(self, *args, **kwargs)  # let transformers raise its own TypeError
        kwargs.update(zip(positional, args))
        if kwargs.get("labels") is None or not _hf_loss(self):
            return original(self, **kwargs)
        if fused and self.training and _fusable(self):
            return _fused_forward(self, family, balance, kwargs, check_targets)
        if ce:
            return _ce_forward(self, original, kwargs, check_targets)
        return original(self, **kwargs)

    forward._tigon_original = original
    return forward
