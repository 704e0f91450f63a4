"""Where the time of one fused linear + cross entropy pass goes (forward + backward, bf16): the CUDA kernels of a few
passes under torch.profiler, grouped into GEMMs, the cross entropy row kernel, the dW narrowing and the rest, each
with its share of the pass; the GEMMs' TFLOP/s (three GEMMs of 2·N·H·V FLOP); and, for comparison, torch.mm (cuBLAS
through torch) timed alone on the same three products at the chunk size the op picks. Tells how far the GEMMs are
from the library's rate and what the rest costs (docs/design/fused-linear-cross-entropy.md).

    python3 bench/sweeps/profile_fused_linear_cross_entropy.py [--shape 16384x4096x128256] [--reps 3] [--chunk N] [--brief]
        [--sweep 4096,4608,5120]
--chunk: the chunk the comparison GEMMs use (default: the op's own, from its 1.5 GiB budget rule). --brief: the
grouped times and the wall time only. --sweep: the whole pass's wall time and peak memory at other chunk sizes (the
GEMMs' tile and wave counts change with the chunk: 16384 tokens in 3 chunks of 5462 leave a partial last wave of dX's
tiles; 4096-token chunks fill whole waves for 128 x 256 tiles but add a pass over dW's fp32 accumulator).
"""

import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

import tigon  # noqa: F401  (registers the ops)
from tigon.bench.timing import time_ms
from tigon.ops.fused_linear_cross_entropy import chunk_plan, fused_linear_cross_entropy

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="16384x4096x128256")
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--chunk", type=int, default=0)
ap.add_argument("--brief", action="store_true")
ap.add_argument(
    "--sweep",
    default="4096,4608,5120",
    help="chunk sizes (tokens) to time the whole pass at, beside the op's own choice ('' for none)",
)
ap.add_argument("--device", default="cuda")  # cpu: a smoke test of this script (no kernels to group)
args = ap.parse_args()

N, H, V = map(int, args.shape.split("x"))
dev, dt = torch.device(args.device), torch.bfloat16
gen = torch.Generator(device=dev).manual_seed(0)
x = (torch.randn(N, H, generator=gen, device=dev) * 0.5).to(dt).requires_grad_()
w = (torch.randn(V, H, generator=gen, device=dev) * 0.02).to(dt).requires_grad_()
t = torch.randint(0, V, (N,), generator=gen, device=dev)
flop = 3 * 2 * N * H * V


def one_pass():
    x.grad = w.grad = None
    fused_linear_cross_entropy(x, w, t).backward()


def kind(name: str) -> str:
    n = name.lower()
    if any(k in n for k in ("gemm", "sm90_xmma", "cutlass", "nvjet", "cublas")):
        return "gemm"
    if "rows_kernel" in n:
        return "cross entropy rows"
    if "narrow" in n:
        return "dW narrowing"
    if "column_sum" in n:
        return "column sums"
    return "other"


def check(n=512, v=32000):
    """This process's GEMM route against fp32 torch on a small problem: loss difference, dX and dW max errors relative
    to the largest reference value (bf16 results: ~1e-2 is a rounding)."""
    xs = x.detach()[:n].clone().requires_grad_()
    ws = w.detach()[:v].clone().requires_grad_()
    ts = t[:n] % v
    loss = fused_linear_cross_entropy(xs, ws, ts)
    dx, dw = torch.autograd.grad(loss, (xs, ws))
    xr, wr = xs.detach().float().requires_grad_(), ws.detach().float().requires_grad_()
    ref = torch.nn.functional.cross_entropy(xr @ wr.T, ts)
    rdx, rdw = torch.autograd.grad(ref, (xr, wr))
    rel = lambda a, b: ((a.float() - b).abs().max() / b.abs().max()).item()  # noqa: E731
    print(
        f"  check {n}x{H}x{v}: loss {loss.item():.6f} vs {ref.item():.6f}, dX {rel(dx, rdx):.1e}, dW {rel(dw, rdw):.1e}"
    )


check()
for _ in range(2):  # warm-up: cuBLASLt plans, allocator
    one_pass()
torch.cuda.synchronize() if dev.type == "cuda" else None
with profile(activities=[ProfilerActivity.CUDA] if dev.type == "cuda" else [ProfilerActivity.CPU]) as prof:
    for _ in range(args.reps):
        one_pass()
    torch.cuda.synchronize() if dev.type == "cuda" else None

by_kind, by_name = collections.Counter(), collections.Counter()
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        by_kind[kind(e.name)] += us / args.reps
        by_name[e.name] += us / args.reps
total = sum(by_kind.values()) or float("nan")
print(
    f"fused linear + CE {N}x{H}x{V} bf16, GEMMs by cuBLASLt, forward + backward, device time per pass (kernels "
    f"summed): {total / 1e3:.2f} ms"
)
for k, us in by_kind.most_common():
    extra = f"  {flop / (us * 1e-6) / 1e12:6.1f} TFLOP/s" if k == "gemm" else ""
    print(f"  {k:22s} {us / 1e3:8.3f} ms  {100 * us / total:5.1f}%{extra}")
if not args.brief:
    print("  kernels:")
    for name, us in by_name.most_common(12):
        print(f"    {us / 1e3:8.3f} ms  {name[:110]}")
    # The last pass's GEMMs in launch order (per chunk: logits, then the gradient products), each with its rate at the
    # op's chunk size: which product (dX's long K, dW's accumulation) falls short of the others.
    chunk_rows = chunk_plan(x, w)[1]
    gemm_events = sorted(
        (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and kind(e.name) == "gemm"),
        key=lambda e: e.time_range.start,
    )
    last = gemm_events[len(gemm_events) - len(gemm_events) // args.reps :] if gemm_events else []
    print(f"  GEMMs of the last pass, in launch order (chunk {chunk_rows} rows; TFLOP/s at 2·chunk·H·V):")
    for e in last:
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        print(f"    {us / 1e3:8.3f} ms  {2 * chunk_rows * H * V / (us * 1e-6) / 1e12:6.1f} TFLOP/s  {e.name[:80]}")
wall = time_ms(one_pass, dev, 5, 2)
print(f"  wall per pass (CUDA events): {wall:.2f} ms")
for rows in [int(r) for r in args.sweep.split(",") if r] if not args.brief else []:

    def pass_at(rows=rows):
        x.grad = w.grad = None
        fused_linear_cross_entropy(x, w, t, chunk_rows=rows).backward()

    pass_at()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if dev.type == "cuda" else 0
    ms = time_ms(pass_at, dev, 5, 1)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if dev.type == "cuda" else float("nan")
    print(f"  chunks of {rows} tokens: wall per pass {ms:.2f} ms, peak {peak:.2f} GiB above the inputs and grads held")
if args.brief:
    raise SystemExit(0)

# The same three products through torch.mm at one chunk (cuBLAS's own choice of kernel), bf16 out.
chunk = args.chunk or chunk_plan(x, w)[1]
xc = x.detach()[:chunk].contiguous()
wd = w.detach()
g = torch.randn(chunk, V, device=dev, dtype=dt)
for label, fn, f in (
    ("logits  x·Wᵀ", lambda: xc @ wd.T, 2 * chunk * H * V),
    ("dX      G·W", lambda: g @ wd, 2 * chunk * H * V),
    ("dW      Gᵀ·x", lambda: g.T @ xc, 2 * chunk * H * V),
):
    ms = time_ms(fn, dev, 10, 3)
    print(f"  torch.mm {label} (chunk {chunk}): {ms:.3f} ms  {f / (ms * 1e-3) / 1e12:6.1f} TFLOP/s")
