"""Softmax benchmark: ``torch.softmax(x, -1)`` forward and backward against torch (eager and torch.compile) and
Liger-Kernel's LigerSoftmaxFunction.

Memory-bound: the forward reads x and writes y; the backward reads y and dy and writes dx. Figure of merit: bandwidth
against the copy measured in the same run. Shapes: an attention-sized row count at 4096, a vocabulary-sized row.
"""

from __future__ import annotations

import torch

from tigon.bench.harness import run_rowwise, standard_impls

OP = "softmax"
GPU_SHAPES = [(16384, 4096), (1024, 131072)]
CPU_SHAPES = [(256, 1024)]


def torch_softmax(x):
    return torch.softmax(x, -1)


IMPLS = standard_impls("softmax", torch_softmax, "liger_kernel.ops.softmax", "LigerSoftmaxFunction")


def run(args, ctx) -> list[dict]:
    return run_rowwise(OP, IMPLS, torch_softmax, GPU_SHAPES, CPU_SHAPES, args, ctx)
