"""Op-level benchmarks: ``python -m tigon.bench`` times tigon against the PyTorch and Liger equivalents.

Adding an op = one module with ``run(args, ctx) -> list[dict]`` (see rms_norm.py) + one line in _RUNNERS.
The whole-model training steps (Hugging Face models, minutes on a GPU) run only when asked for: --ops train_step, and
on 2+ GPUs train_step_fsdp2 / train_step_ddp; the post-training losses (DPO, GRPO) with --ops post_training, fused
linear JSD with --ops post_training_distill; generation speed (tigon.optimize_model against transformers' generate)
with --ops decode; encoder inference (BERT-base forward) with --ops encoder; CNN inference (ResNet-50) with --ops
resnet50.
``python -m tigon.bench.report --markdown`` prints the results table.
"""

import importlib

# op -> (module, function); imported on first use of BENCHMARKS, so `python -m tigon.bench.report` runs without them
_RUNNERS = {
    "rms_norm": ("rms_norm", "run"),
    "add_rms_norm": ("add_rms_norm", "run"),
    "layer_norm": ("layer_norm", "run"),
    "dyt": ("dyt", "run"),
    "embedding": ("embedding", "run"),
    "group_norm": ("group_norm", "run"),
    "softmax": ("softmax", "run"),
    "sparsemax": ("sparsemax", "run"),
    "multi_token_attention": ("multi_token_attention", "run"),
    "poly_norm": ("poly_norm", "run"),
    "rope": ("rope", "run"),
    "swiglu": ("swiglu", "run"),
    "relu_squared": ("relu_squared", "run"),
    "linear_act": ("linear_act", "run"),
    "moe_experts": ("moe_experts", "run"),
    "conv2d_relu": ("conv2d", "run"),
    "cross_entropy": ("cross_entropy", "run"),
    "distill": ("distill", "run"),
    "fused_linear_cross_entropy": ("fused_linear_cross_entropy", "run"),
    "attention": ("attention", "run"),
    "gemv": ("gemv", "run"),
    "int8_gemm": ("int8", "run_gemm"),
    "gemv_int8": ("int8", "run_gemv"),
    "decode_attention": ("decode_attention", "run"),
    "post_training": ("post_training", "run"),
    "post_training_distill": ("distill", "run_fused"),
    "train_step": ("train_step", "run"),
    "train_step_fsdp2": ("train_step_distributed", "run_fsdp2"),
    "train_step_ddp": ("train_step_distributed", "run_ddp"),
    "decode": ("decode", "run"),
    "encoder": ("encoder", "run"),
    "resnet50": ("resnet", "run"),
}
# Run only when asked for: the whole-model training steps, generation and encoder inference, and the post-training losses (composites
# of fused_linear_cross_entropy, which the default list already measures).
_ON_REQUEST = ("train_step", "post_training")
DEFAULT_OPS = [op for op in _RUNNERS if not op.startswith(_ON_REQUEST) and op not in ("decode", "encoder", "resnet50")]


def __getattr__(name):
    if name == "BENCHMARKS":
        return {op: getattr(importlib.import_module(f"tigon.bench.{m}"), f) for op, (m, f) in _RUNNERS.items()}
    raise AttributeError(f"module 'tigon.bench' has no attribute {name!r}")
