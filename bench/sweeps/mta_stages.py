"""Where multi-token attention's time goes: each stage of Tigon's forward (causal softmax, cuDNN's convolution, the
in-place zero mask) timed alone, the convolution's forward and backward in both memory layouts (NCHW as the scores
come, channels-last after a conversion pass) with and without cuDNN's benchmark mode, and the device kernels of
Tigon's whole forward beside torch.compile's, from the profiler. Diagnostic only (GPU).

  python bench/sweeps/mta_stages.py [--shapes 2x16x2048x16,4x8x1024x1]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import tigon
from tigon.bench import multi_token_attention as mta
from tigon.bench.timing import time_ms

DEV = torch.device("cuda")


def _t(fn, reps=20) -> float:
    return time_ms(fn, DEV, reps=reps, warmup=3)


def _conv_times(p, w, b, dy, groups) -> dict:
    def fwd():
        return F.conv2d(p, w, b, 1, mta.PADDING, 1, groups)

    def bwd():
        out = F.conv2d(p, w, b, 1, mta.PADDING, 1, groups)
        return torch.autograd.grad(out, (p, w, b), dy)

    return {"fwd": _t(fwd), "fwd+bwd": _t(bwd)}


def _kernels(fn, label: str, top: int = 8) -> None:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    rows = sorted(
        ((e.key, e.device_time_total / 5 / 1000) for e in prof.key_averages() if e.device_time_total > 0),
        key=lambda r: -r[1],
    )
    print(f"  {label}: {sum(ms for _, ms in rows):.4f} device ms per call")
    for name, ms in rows[:top]:
        print(f"    {ms:8.4f}  {name[:110]}")


def _shape(B: int, H: int, L: int, groups: int) -> None:
    print(f"== {B}x{H}x{L}x{L} groups={groups} (bf16)")
    gen = torch.Generator(device=DEV).manual_seed(0)
    scores = (2 * torch.randn(B, H, L, L, generator=gen, device=DEV)).bfloat16()
    dy = torch.randn(B, H, L, L, generator=gen, device=DEV).bfloat16()
    w = torch.randn(H, H // groups, mta.KERNEL, mta.KERNEL, generator=gen, device=DEV).bfloat16()
    b = torch.randn(H, generator=gen, device=DEV).bfloat16()
    probs = tigon.ops.softmax(scores, causal=True)
    out = F.conv2d(probs, w, b, 1, mta.PADDING, 1, groups)
    print(f"  causal softmax (tigon) {_t(lambda: tigon.ops.softmax(scores, causal=True)):.4f} ms")
    print(f"  zero mask (tril_)      {_t(lambda: out.tril_()):.4f} ms")
    cl = probs.contiguous(memory_format=torch.channels_last)
    print(f"  to channels-last       {_t(lambda: probs.contiguous(memory_format=torch.channels_last)):.4f} ms")
    for bench_mode in (False, True):
        torch.backends.cudnn.benchmark = bench_mode
        for name, x, g in (
            ("NCHW", probs, dy),
            ("channels-last", cl, dy.contiguous(memory_format=torch.channels_last)),
        ):
            times = _conv_times(x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), g, groups)
            print(
                f"  conv {name:13s} benchmark={bench_mode!s:5s} "
                + ", ".join(f"{k} {v:.4f} ms" for k, v in times.items())
            )
    torch.backends.cudnn.benchmark = False
    ours = lambda: tigon.ops.multi_token_attention(scores, w, b, 1, mta.PADDING, 1, groups)  # noqa: E731
    theirs = torch.compile(lambda s: mta.torch_mta(s, w, b, groups))
    _kernels(ours, "tigon forward")
    _kernels(lambda: theirs(scores), "torch.compile forward")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in mta.GPU_SHAPES))
    args = p.parse_args()
    for text in args.shapes.split(","):
        _shape(*map(int, text.split("x")))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
