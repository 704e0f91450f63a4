"""Post-training losses from the last hidden states, never materialising the [N, V] logits: every log-probability
comes from tigon.ops.fused_linear_cross_entropy (reduction="none"), chunked by memory, with its own backward.

selective_log_probs is the core; the modules are drop-ins for Liger-Kernel's chunked losses (same constructor and
forward arguments, same outputs): DPO and variants, ORPO, CPO, SimPO, KTO and GRPO (with DAPO, Dr. GRPO, BNPO,
CISPO, SAPO, GSPO's sequence-level ratios), and distillation (JSD, KL, TVD with a hard cross-entropy term) on
tigon.ops.distill.
"""

from tigon.losses.cpo import FusedLinearCPOLoss, FusedLinearSimPOLoss
from tigon.losses.distill import FusedLinearDistillationLoss, FusedLinearJSDLoss, fused_linear_distillation
from tigon.losses.dpo import DPO_LOSS_TYPES, FusedLinearDPOLoss
from tigon.losses.grpo import GRPO_LOSS_TYPES, FusedLinearGRPOLoss
from tigon.losses.kto import FusedLinearKTOLoss, kto_kl
from tigon.losses.log_probs import logits_sum, selective_log_probs, sequence_log_probs
from tigon.losses.orpo import FusedLinearORPOLoss

__all__ = [
    "selective_log_probs",
    "sequence_log_probs",
    "logits_sum",
    "FusedLinearDPOLoss",
    "FusedLinearORPOLoss",
    "FusedLinearCPOLoss",
    "FusedLinearSimPOLoss",
    "FusedLinearKTOLoss",
    "FusedLinearGRPOLoss",
    "kto_kl",
    "DPO_LOSS_TYPES",
    "GRPO_LOSS_TYPES",
    "FusedLinearJSDLoss",
    "FusedLinearDistillationLoss",
    "fused_linear_distillation",
]
