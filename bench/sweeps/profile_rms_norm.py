"""One RMSNorm forward + backward per shape, for Nsight Compute: `ncu -k regex:rms python3 bench/sweeps/profile_rms_norm.py`.
Shapes as MxN arguments (default 16384x4096), bf16, llama mode."""

import sys

import torch

import tigon

for spec in sys.argv[1:] or ["16384x4096"]:
    m, n = map(int, spec.split("x"))
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = tigon.ops.rms_norm(x, w, 1e-6)
    torch.autograd.grad(y, (x, w), torch.randn_like(y))
torch.cuda.synchronize()
