"""Host time per call of RMSNorm forward and forward + backward on tiny CUDA tensors (the GPU idles, so this is the
Python + launch overhead that a fast kernel must hide), for tigon and the baselines, plus a cProfile of tigon's (left
out with --no-profile). Each time is the median and the minimum over repeats of the mean time per call: the minimum is
the steadier figure when the host's load drifts, so before/after runs compare it."""

import cProfile
import pstats
import statistics
import sys
import time

import torch

import tigon

x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
w = torch.ones(256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)


def eager(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


impls = {"tigon": lambda x, w: tigon.ops.rms_norm(x, w, 1e-6), "torch_eager": eager}
try:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    impls["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
except Exception as e:  # noqa: BLE001
    print("liger not importable:", e)


def per_call_us(fn, n=500, repeats=7):
    """(median, minimum) over repeats of the mean time per call of n calls (the host's clock and load drift)."""
    for _ in range(50):
        fn()
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(samples), min(samples)


for name, f in impls.items():

    def fwd():
        with torch.no_grad():
            f(x, w)

    def full():
        torch.autograd.grad(f(x, w), (x, w), dy)

    (f_med, f_min), (b_med, b_min) = per_call_us(fwd), per_call_us(full)
    print(f"{name:12s} fwd {f_med:7.1f} us (min {f_min:7.1f})   fwd+bwd {b_med:7.1f} us (min {b_min:7.1f})", flush=True)

if "--no-profile" in sys.argv:
    sys.exit(0)

prof = cProfile.Profile()
prof.enable()
for _ in range(2000):
    torch.autograd.grad(tigon.ops.rms_norm(x, w, 1e-6), (x, w), dy)
torch.cuda.synchronize()
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(12)
