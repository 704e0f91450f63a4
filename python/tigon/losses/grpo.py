"""Group Relative Policy Optimization's loss (Shao et al., 2024, arXiv:2402.03300) and the variants TRL's GRPOTrainer
implements, from the hidden states, as a drop-in for Liger-Kernel's LigerFusedLinearGRPOLoss.

Per completion token, with p the policy's log-probability at the temperature, p_old the sampling policy's (given, else
p detached: one optimisation step per generation), p_ref the reference's and A the sequence's advantage:
  w = p - p_old per token ("token"), or its mean over the completion's mask per sequence ("sequence", GSPO)
  r = exp(w), r_clip = clamp(r, 1 - epsilon_low, 1 + epsilon_high), r = min(r, delta) when delta is given
  loss_t = -min(r A, r_clip A)                                    grpo, bnpo, dr_grpo, dapo
           -stopgrad(min(exp(w), epsilon_high)) A p               cispo
           -4 s(tau (exp(w) - 1)) / tau A,  tau by the sign of A   sapo
  loss_t *= vllm_is_ratio when given;  loss_t += beta (exp(p_ref - p) - (p_ref - p) - 1)   (k3; times exp(w) with
  use_bias_correction_kl)
then, with the mask m: grpo, sapo: mean over sequences of sum_t(loss_t m) / sum_t m; bnpo: sum(loss m) / sum(m);
dr_grpo: sum(loss m) / (B max_completion_length); dapo, cispo: sum(loss m) / (num_items_in_batch / world size), or
sum(m) without num_items_in_batch. TRL's extra division by gradient-accumulation steps is the trainer's, not here.

Tokens with a zero mask never reach the loss: their targets are ignored by the op (so padding ids need not be valid)
and their given reference and old log-probabilities are replaced by the policy's (so junk there cannot make a NaN).
"""

from __future__ import annotations

import torch

from tigon.losses._paired import check_choice, check_number, check_reference, check_sequences, check_tensor
from tigon.losses._in_forward import policy_loss, sequence_groups
from tigon.losses.log_probs import _check_temperature, selective_log_probs

__all__ = ["FusedLinearGRPOLoss", "GRPO_LOSS_TYPES"]

GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo")
_OP = "FusedLinearGRPOLoss"
_IGNORE = -100


def _world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class FusedLinearGRPOLoss(torch.nn.Module):
    """forward(_input [B, T, H], lin_weight, selected_token_ids [B, T], attention_mask [B, T], advantages [B] (or
    [B, T]), bias=None, ref_per_token_logps=None, old_per_token_logps=None, ref_input=None, ref_weight=None,
    ref_bias=None, vllm_is_ratio=None, num_items_in_batch=None) returns (loss, metrics): metrics = (the masked mean
    k3 KL, when beta != 0; the masked fraction of clipped tokens), detached, as Liger returns them.

    With beta != 0 the reference log-probabilities are ref_per_token_logps when given, else computed in the same call
    from ref_input and ref_weight (ref_bias) under no_grad at the temperature when use_ref_model; without either and
    use_ref_model=False the KL term is 0 (Liger's behaviour). compiled and chunk_size: accepted for Liger
    compatibility, unused. Without num_items_in_batch, dapo/cispo normalise by this call's mask (Liger sums the mask
    over ranks)."""

    def __init__(
        self,
        beta: float = 0.04,
        compiled: bool = True,
        use_ref_model: bool = True,
        chunk_size: int = 1,
        epsilon_low: float = 0.2,
        epsilon_high: float = 0.2,
        loss_type: str = "dapo",
        max_completion_length: int | None = None,
        importance_sampling_level: str = "token",
        sapo_temperature_pos: float = 1.0,
        sapo_temperature_neg: float = 1.05,
        temperature: float = 1.0,
        delta: float | None = None,
        use_bias_correction_kl: bool = False,
    ):
        super().__init__()
        check_choice(_OP, "loss_type", loss_type, GRPO_LOSS_TYPES)
        check_choice(_OP, "importance_sampling_level", importance_sampling_level, ("token", "sequence"))
        if importance_sampling_level == "sequence" and loss_type in ("cispo", "sapo"):
            raise ValueError(f"{_OP}: argument 'importance_sampling_level' must be 'token' for loss_type {loss_type!r}")
        if loss_type == "dr_grpo" and (
            isinstance(max_completion_length, bool)
            or not isinstance(max_completion_length, int)
            or max_completion_length <= 0
        ):
            raise ValueError(
                f"{_OP}: argument 'max_completion_length' must be an int > 0 for loss_type 'dr_grpo', got "
                f"{max_completion_length!r}"
            )
        self.beta = check_number(_OP, "beta", beta)
        self.epsilon_low = check_number(_OP, "epsilon_low", epsilon_low)
        self.epsilon_high = check_number(_OP, "epsilon_high", epsilon_high)
        self.delta = check_number(_OP, "delta", delta, 0.0, strict=True, optional=True)
        self.sapo_temperature_pos = check_number(_OP, "sapo_temperature_pos", sapo_temperature_pos, 0.0, strict=True)
        self.sapo_temperature_neg = check_number(_OP, "sapo_temperature_neg", sapo_temperature_neg, 0.0, strict=True)
        self.temperature = _check_temperature(_OP, temperature)
        self.compiled = compiled
        self.use_ref_model = bool(use_ref_model)
        self.chunk_size = chunk_size
        self.loss_type = loss_type
        self.max_completion_length = max_completion_length
        self.importance_sampling_level = importance_sampling_level
        self.use_bias_correction_kl = bool(use_bias_correction_kl)

    def _check(self, x, target, mask, advantages, per_token: dict, vllm_is_ratio) -> torch.Tensor:
        check_tensor(_OP, "attention_mask", mask)
        if mask.shape != target.shape:
            raise ValueError(
                f"{_OP}: argument 'attention_mask' must have shape {tuple(target.shape)}, got {tuple(mask.shape)}"
            )
        check_tensor(_OP, "advantages", advantages)
        b, t = target.shape
        if advantages.shape not in ((b,), (b, t)):
            raise ValueError(
                f"{_OP}: argument 'advantages' must have shape ({b},) or ({b}, {t}), got {tuple(advantages.shape)}"
            )
        for name, v in per_token.items():
            check_tensor(_OP, name, v, optional=True)
            if v is not None and v.shape != (b, t):
                raise ValueError(f"{_OP}: argument '{name}' must have shape ({b}, {t}), got {tuple(v.shape)}")
        check_tensor(_OP, "vllm_is_ratio", vllm_is_ratio, optional=True)
        if vllm_is_ratio is not None and vllm_is_ratio.shape not in ((b, t), (b, 1)):
            raise ValueError(
                f"{_OP}: argument 'vllm_is_ratio' must have shape ({b}, {t}) or ({b}, 1), got "
                f"{tuple(vllm_is_ratio.shape)}"
            )
        return advantages.float().unsqueeze(1) if advantages.dim() == 1 else advantages.float()

    def _normalizer(self, mask, num_items_in_batch) -> torch.Tensor:
        if num_items_in_batch is None:
            return mask.sum().clamp(min=1.0)
        if isinstance(num_items_in_batch, torch.Tensor):
            n = num_items_in_batch.to(device=mask.device, dtype=torch.float32)
        elif isinstance(num_items_in_batch, (int, float)) and not isinstance(num_items_in_batch, bool):
            n = torch.tensor(float(num_items_in_batch), device=mask.device)
        else:
            raise TypeError(
                f"{_OP}: argument 'num_items_in_batch' must be a number, a tensor or None, got "
                f"{type(num_items_in_batch).__name__}"
            )
        return (n / _world_size()).clamp(min=1.0)

    def forward(
        self,
        _input,
        lin_weight,
        selected_token_ids,
        attention_mask,
        advantages,
        bias=None,
        ref_per_token_logps=None,
        old_per_token_logps=None,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        vllm_is_ratio=None,
        num_items_in_batch=None,
    ):
        check_sequences(_OP, _input, lin_weight, selected_token_ids, target_name="selected_token_ids")
        check_tensor(_OP, "bias", bias, optional=True)
        per_token_args = {"ref_per_token_logps": ref_per_token_logps, "old_per_token_logps": old_per_token_logps}
        adv = self._check(_input, selected_token_ids, attention_mask, advantages, per_token_args, vllm_is_ratio)
        if self.beta != 0.0 and self.use_ref_model and ref_per_token_logps is None:  # before the policy's pass
            if ref_input is None and ref_weight is None:
                raise ValueError(
                    f"{_OP}: beta != 0 needs the reference: argument 'ref_per_token_logps', or 'ref_input' and "
                    "'ref_weight' (or use_ref_model=False for no KL term)"
                )
            check_reference(_OP, selected_token_ids, ref_input, ref_weight)
        live = attention_mask != 0
        mask = attention_mask.float()
        ids = torch.where(live, selected_token_ids, _IGNORE)
        reference = self._reference(ids, ref_per_token_logps, ref_input, ref_weight, ref_bias) if self.beta else None

        def compute(logp):  # the loss (separable over completions) and the metrics from the policy's log-probs
            here = logp.detach()
            old = here if old_per_token_logps is None else torch.where(live, old_per_token_logps.float(), here)
            return self._loss(logp, old, here, reference, live, mask, adv, vllm_is_ratio, num_items_in_batch)

        groups = sequence_groups(_input.shape[0])
        loss, logp = policy_loss(
            _input, lin_weight, bias, ids, _IGNORE, self.temperature, groups, lambda p: compute(p)[0]
        )
        return loss, tuple(m.detach() for m in compute(logp)[1])

    def _loss(self, logp, old, here, reference, live, mask, adv, vllm_is_ratio, num_items_in_batch):
        log_ratio = logp - old
        if self.importance_sampling_level == "token":
            log_w = log_ratio
        else:
            log_w = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        coef_1 = torch.exp(log_w)
        lt = self.loss_type
        if lt == "cispo":
            per_token_loss = -torch.clamp(coef_1, max=self.epsilon_high).detach() * adv * logp
            lower, upper = torch.zeros_like(coef_1, dtype=torch.bool), coef_1 > self.epsilon_high
        elif lt == "sapo":
            tau = torch.where(adv > 0, self.sapo_temperature_pos, self.sapo_temperature_neg)
            per_token_loss = -(torch.sigmoid(tau * (coef_1 - 1)) * 4 / tau) * adv
            lower = upper = torch.zeros_like(coef_1, dtype=torch.bool)
        else:
            coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)
            lower, upper = coef_1 < 1 - self.epsilon_low, coef_1 > 1 + self.epsilon_high
            capped = coef_1 if self.delta is None else torch.clamp(coef_1, max=self.delta)
            per_token_loss = -torch.min(capped * adv, coef_2 * adv)
        if vllm_is_ratio is not None:
            per_token_loss = per_token_loss * vllm_is_ratio.float()

        metrics = []
        if self.beta != 0.0:
            # the given reference where the mask is live, the policy's own value elsewhere (no junk, no NaN)
            ref = here if reference is None else torch.where(live, reference, here)
            diff = ref - logp
            kl = torch.exp(diff) - diff - 1
            if self.use_bias_correction_kl:
                kl = kl * coef_1
            per_token_loss = per_token_loss + self.beta * kl
            metrics.append((kl * mask).sum() / mask.sum().clamp(min=1.0))

        masked = per_token_loss * mask
        if lt in ("grpo", "sapo"):
            loss = (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        elif lt == "bnpo":
            loss = masked.sum() / mask.sum().clamp(min=1.0)
        elif lt == "dr_grpo":
            loss = masked.sum() / (mask.shape[0] * self.max_completion_length)
        else:  # dapo, cispo
            loss = masked.sum() / self._normalizer(mask, num_items_in_batch)

        clipped = (lower & (adv < 0)) | (upper & (adv > 0))
        metrics.append((clipped.expand_as(mask) * mask).sum() / mask.sum().clamp(min=1.0))
        return loss, metrics

    def _reference(self, ids, given, ref_input, ref_weight, ref_bias) -> torch.Tensor | None:
        """The reference's per-token log-probabilities (None: the policy's own, so the KL term is 0)."""
        if given is not None:
            return given.detach().float()
        if not self.use_ref_model:
            return None
        with torch.no_grad():
            return selective_log_probs(ref_input, ref_weight, ids, ref_bias, self.temperature, _IGNORE)
