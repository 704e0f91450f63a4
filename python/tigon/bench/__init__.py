"""Op-level benchmarks: ``python -m tigon.bench`` times tigon against the PyTorch and Liger equivalents.

Adding an op = one module with ``run(args, ctx) -> list[dict]`` (see rms_norm.py) + one line in BENCHMARKS.
The whole-model training steps (Hugging Face models, minutes on a GPU) run only when asked for: --ops train_step, and
on 2+ GPUs train_step_fsdp2 / train_step_ddp.
"""

from tigon.bench import (cross_entropy, fused_linear_cross_entropy, layer_norm, rms_norm, rope, swiglu, train_step,
                         train_step_distributed)

BENCHMARKS = {
    "rms_norm": rms_norm.run,
    "layer_norm": layer_norm.run,
    "rope": rope.run,
    "swiglu": swiglu.run,
    "cross_entropy": cross_entropy.run,
    "fused_linear_cross_entropy": fused_linear_cross_entropy.run,
    "train_step": train_step.run,
    "train_step_fsdp2": train_step_distributed.run_fsdp2,
    "train_step_ddp": train_step_distributed.run_ddp,
}
DEFAULT_OPS = [op for op in BENCHMARKS if not op.startswith("train_step")]
