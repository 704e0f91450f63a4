"""TRL's DPOTrainer and GRPOTrainer with their loss computed by tigon.losses from the last hidden states.

TRL (1.16) has no hook for a loss module: its trainers score tokens with a fused LM head of their own, and
`use_liger_kernel` only applies Liger's layer kernels. These subclasses override the one method that computes the
loss, `_compute_loss`: they call the model (through its DDP/FSDP wrapper) for the last hidden states of its backbone
(`base_model`: the decoder with its final norm), with the LM head projecting no position, and pass those states and
the LM head's weight to FusedLinearDPOLoss / FusedLinearGRPOLoss, which never materialise the logits. Everything else (data, generation, rewards, advantages, reference log-probabilities, optimisation) is TRL's.

Supported: DPO with one loss type among tigon.losses.DPO_LOSS_TYPES, the reverse-KL divergence, no WPO weighting, no
LD-DPO (ld_alpha) and no MoE aux loss; GRPO with a loss type among tigon.losses.GRPO_LOSS_TYPES, no entropy mask or
bonus, no off-policy mask and no MoE aux loss. Anything else is refused at construction. Only the loss and the reward
metrics are logged. Importing this module needs trl. Tested in one process (tests/python/test_losses_trl.py); the
FSDP2 gather of the LM head is tested outside TRL (tests/python/test_losses_distributed.py).
"""

from __future__ import annotations

import torch
from trl import DPOTrainer, GRPOTrainer

from tigon.losses.dpo import DPO_LOSS_TYPES, FusedLinearDPOLoss
from tigon.losses.grpo import GRPO_LOSS_TYPES, FusedLinearGRPOLoss

__all__ = ["TigonDPOTrainer", "TigonGRPOTrainer"]

# TRL's DPO sigmoid ignores label_smoothing; only these two read it
_SMOOTHED_DPO = ("robust", "exo_pair")


def _refuse(trainer: str, what: str) -> None:
    raise ValueError(f"{trainer}: {what} is not supported with the tigon.losses loss; use the TRL trainer itself")


def _head(model) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The LM head's weight and bias, gathered when FSDP2 still holds them sharded (the fused op takes plain tensors).
    Each rank's gradient is then a part of the mean over ranks, reduce-scattered averaged as FSDP2 does its own."""
    head = model.get_output_embeddings()
    weight, bias = head.weight, head.bias
    if hasattr(weight, "full_tensor"):
        from torch.distributed.tensor import Partial

        weight = weight.full_tensor(grad_placements=[Partial("avg")])
        bias = None if bias is None else bias.full_tensor(grad_placements=[Partial("avg")])
    return weight, bias


def _hidden(trainer, model, **inputs) -> torch.Tensor:
    """The backbone's last hidden states [B, T, H], the LM head's input. The model is called whole, through its
    DDP/FSDP wrapper (whose forward hooks gather parameters and prepare the gradient reduction), with an empty
    logits_to_keep so that the LM head projects no position; a hook on the backbone takes its output."""
    captured = []
    backbone = trainer.accelerator.unwrap_model(model).base_model
    handle = backbone.register_forward_hook(lambda module, args, out: captured.append(out.last_hidden_state))
    try:
        keep = torch.empty(0, dtype=torch.long, device=inputs["input_ids"].device)
        model(**inputs, use_cache=False, logits_to_keep=keep)
    finally:
        handle.remove()
    return captured[-1]


class TigonDPOTrainer(DPOTrainer):
    """DPOTrainer whose loss is tigon.losses.FusedLinearDPOLoss (same arguments, same loss as TRL's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        name = type(self).__name__
        if len(self.loss_types) != 1 or self.loss_types[0] not in DPO_LOSS_TYPES:
            _refuse(name, f"loss_type {self.loss_types!r} (one of {list(DPO_LOSS_TYPES)})")
        if self.f_divergence_type != "reverse_kl":
            _refuse(name, f"f_divergence_type {self.f_divergence_type!r}")
        if self.ld_alpha is not None or self.use_weighting or self.aux_loss_enabled:
            _refuse(name, "ld_alpha, use_weighting or the MoE aux loss")
        loss_type = self.loss_types[0]
        self.tigon_loss = FusedLinearDPOLoss(
            beta=self.beta,
            loss_type=loss_type,
            label_smoothing=self.label_smoothing if loss_type in _SMOOTHED_DPO else 0.0,
            discopop_tau=self.args.discopop_tau,
        )

    def _compute_loss(self, model, inputs, return_outputs):
        mode = "train" if self.model.training else "eval"
        model_inputs = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
        # Shifted targets: the completion's tokens, the prompt's and the padding ignored
        target = inputs["input_ids"].masked_fill(inputs["completion_mask"] == 0, -100)[:, 1:]
        hidden = _hidden(self, model, **model_inputs)[:, :-1]
        weight, bias = _head(self.accelerator.unwrap_model(model))
        reference = {}
        if self.precompute_ref_logps:
            reference = {
                "ref_chosen_logps": inputs["ref_chosen_logps"],
                "ref_rejected_logps": inputs["ref_rejected_logps"],
            }
        else:
            if self.ref_model is None:
                _refuse(type(self).__name__, "a PEFT model without a separate reference model")
            with torch.no_grad():
                ref_weight, ref_bias = _head(self.accelerator.unwrap_model(self.ref_model))
                reference = {
                    "ref_input": _hidden(self, self.ref_model, **model_inputs)[:, :-1],
                    "ref_weight": ref_weight,
                    "ref_bias": ref_bias,
                }
        loss, aux = self.tigon_loss(weight, hidden, target, bias, **reference)
        chosen_rewards, rejected_rewards = aux[5].detach(), aux[6].detach()
        gather = self.accelerator.gather
        self._metrics[mode]["rewards/chosen"].append(gather(chosen_rewards).mean().item())
        self._metrics[mode]["rewards/rejected"].append(gather(rejected_rewards).mean().item())
        accuracies = (chosen_rewards > rejected_rewards).float()
        self._metrics[mode]["rewards/accuracies"].append(gather(accuracies).mean().item())
        self._metrics[mode]["rewards/margins"].append(gather(chosen_rewards - rejected_rewards).mean().item())
        return (loss, {}) if return_outputs else loss


class TigonGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose loss is tigon.losses.FusedLinearGRPOLoss (same arguments, same loss as TRL's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        name = type(self).__name__
        if self.loss_type not in GRPO_LOSS_TYPES:
            _refuse(name, f"loss_type {self.loss_type!r} (one of {list(GRPO_LOSS_TYPES)})")
        if self.top_entropy_quantile < 1.0 or self._entropy_bonus_enabled or self.off_policy_mask_threshold is not None:
            _refuse(name, "the entropy mask, the entropy bonus or the off-policy mask")
        if self.aux_loss_enabled:
            _refuse(name, "the MoE aux loss")
        self.tigon_loss = FusedLinearGRPOLoss(
            beta=self.beta,
            epsilon_low=self.epsilon_low,
            epsilon_high=self.epsilon_high,
            loss_type=self.loss_type,
            max_completion_length=self.max_completion_length,
            importance_sampling_level=self.importance_sampling_level,
            sapo_temperature_pos=self.args.sapo_temperature_pos,
            sapo_temperature_neg=self.args.sapo_temperature_neg,
            temperature=self.temperature,
            delta=self.args.delta,
            use_bias_correction_kl=self.args.use_bias_correction_kl,
        )

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        completion_ids = inputs["completion_ids"]
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        n = completion_ids.size(1)
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        # The hidden state before each completion token predicts it
        hidden = _hidden(self, model, input_ids=input_ids, attention_mask=attention_mask)[:, -n - 1 : -1]
        weight, bias = _head(self.accelerator.unwrap_model(model))
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        num_items = None
        if self.loss_type in ("dapo", "cispo"):
            # TRL's count spans the generation batch: rescale it to one accumulation window (the loss divides it by
            # the world size itself)
            num_items = inputs["num_items_in_batch"].float()
            if mode == "train":
                num_items = num_items * accumulation / self.args.steps_per_generation
        is_ratio = inputs.get("importance_sampling_ratio") if self.use_vllm else None
        loss, _ = self.tigon_loss(
            hidden,
            weight,
            completion_ids,
            mask,
            inputs["advantages"],
            bias,
            ref_per_token_logps=inputs.get("ref_per_token_logps") if self.beta != 0.0 else None,
            old_per_token_logps=inputs.get("old_per_token_logps"),
            vllm_is_ratio=is_ratio if self.vllm_importance_sampling_correction else None,
            num_items_in_batch=num_items,
        )
        self._metrics[mode]["policy_loss"].append(self.accelerator.gather(loss.detach()).nanmean().item())
        # TRL divides these by the accumulation steps in its loss (the Trainer's own scaling is off for GRPO)
        return loss if self.loss_type in ("dapo", "cispo") else loss / accumulation
