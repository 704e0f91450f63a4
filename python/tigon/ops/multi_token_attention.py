"""Multi-token attention's convolution over attention scores (Golovneva et al., 2025) as a torch op:
out = mask_0(conv2d(f(mask_-inf(scores)))), f softmax or sparsemax over the keys, both masks causal over each [L, L]
score matrix (query i sees keys 0..i).

The causal softmax / sparsemax kernels apply the -inf mask as they read (the masked half of the scores is not read)
and write the zeros; their output is both the convolution's input and what their backward keeps, so one [B, C, L, L]
tensor is saved, not two. The convolution and its gradients are cuDNN's through torch, and the zero mask is an in-place
torch.tril of the convolution's fresh output (its backward masks the gradient the same way)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.ops._common import FLOAT_DTYPES, check_tensor
from tigon.ops.softmax import softmax
from tigon.ops.sparsemax import sparsemax

__all__ = ["multi_token_attention"]

_OP = "multi_token_attention"


def _check(scores, weight, bias, groups) -> None:
    check_tensor(_OP, "scores", scores)
    check_tensor(_OP, "weight", weight)
    check_tensor(_OP, "bias", bias, optional=True)
    if scores.dim() != 4 or scores.shape[-2] != scores.shape[-1]:
        raise ValueError(f"{_OP}: argument 'scores' must be [batch, channels, L, L], got {tuple(scores.shape)}")
    if scores.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{_OP}: argument 'scores' must be float32, float16 or bfloat16, got {scores.dtype}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 or scores.shape[1] % groups:
        raise ValueError(f"{_OP}: argument 'groups' must be a positive int dividing {scores.shape[1]}, got {groups!r}")
    want = scores.shape[1] // groups
    if weight.dim() != 4 or weight.shape[1] != want or weight.shape[0] % groups:
        raise ValueError(
            f"{_OP}: argument 'weight' must be [out_channels, {want}, kH, kW] with out_channels a multiple of "
            f"groups={groups}, got {tuple(weight.shape)}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dtype != scores.dtype or t.device != scores.device):
            raise ValueError(
                f"{_OP}: argument '{name}' must be {scores.dtype} on {scores.device} as scores is, "
                f"got {t.dtype} on {t.device}"
            )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{_OP}: argument 'bias' must be [{weight.shape[0]}], got {tuple(bias.shape)}")


def multi_token_attention(
    scores: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    sparse: bool = False,
) -> torch.Tensor:
    """Multi-token attention's score convolution, differentiable in scores, weight and bias: scores [B, C_in, L, L]
    (query by key), weight [C_out, C_in / groups, kH, kW], bias [C_out] or None; stride, padding and dilation as
    torch.nn.functional.conv2d takes them. sparse=True normalizes with sparsemax instead of softmax. Returns the
    convolution's output with every entry above its diagonal zero. fp32, fp16 and bf16, on the CPU or CUDA; bad
    arguments raise naming them."""
    _check(scores, weight, bias, groups)
    if not isinstance(sparse, bool):
        raise TypeError(f"{_OP}: argument 'sparse' must be a bool, got {sparse!r}")
    probs = (sparsemax if sparse else softmax)(scores, -1, causal=True)
    out = F.conv2d(probs, weight, bias, stride, padding, dilation, groups)
    return out.tril_()
