"""One LayerNorm forward + backward (weight and bias) per shape, for Nsight Compute:
`ncu --clock-control none -k regex:"layer_norm|column_sum" python3 bench/sweeps/profile_layer_norm.py`.
Shapes as MxN arguments (default 16384x4096), bf16."""

import sys

import torch

import tigon

for spec in sys.argv[1:] or ["16384x4096"]:
    m, n = map(int, spec.split("x"))
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = tigon.ops.layer_norm(x, w, b, 1e-5)
    torch.autograd.grad(y, (x, w, b), torch.randn_like(y))
torch.cuda.synchronize()
