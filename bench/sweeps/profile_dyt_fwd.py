"""One DyT forward per shape by Tigon and, where it imports, by Liger, for Nsight Compute:
`ncu -k regex:dyt python3 bench/sweeps/profile_dyt_fwd.py`. Shapes as MxN arguments (default 16384x4096), bf16
activations with fp32 parameters, as the benchmark runs them."""

import sys

import torch

import tigon

try:
    from liger_kernel.ops.dyt import LigerDyTFunction
except Exception:  # Liger not installed: Tigon's launches alone
    LigerDyTFunction = None

with torch.no_grad():
    for spec in sys.argv[1:] or ["16384x4096"]:
        m, n = map(int, spec.split("x"))
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        alpha = torch.full((1,), 0.5, device="cuda")
        gamma, beta = 1 + 0.1 * torch.randn(n, device="cuda"), 0.1 * torch.randn(n, device="cuda")
        tigon.ops.dyt(x, alpha, gamma, beta)
        if LigerDyTFunction is not None:
            LigerDyTFunction.apply(x, alpha, gamma, beta)
torch.cuda.synchronize()
