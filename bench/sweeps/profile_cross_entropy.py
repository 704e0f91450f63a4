"""Times each cross entropy row kernel variant in one process (through the library's test-only kernel selector):
the forward with the gradient written over the logits (the backward is a scale skipped for grad_output 1), bf16,
against the bytes of one read and one write of the logits. Also for Nsight Compute:
`ncu -k regex:"rows_kernel" python3 bench/sweeps/profile_cross_entropy.py --reps 1 cluster classic`.

    python3 bench/sweeps/profile_cross_entropy.py [--shape 8192x128256] [--reps 50] [--loss-only] [variant ...]
Variants: cluster (the library's plan), cluster<N> (the cluster kernel, N = 1-8 blocks per row), classic.
--loss-only times the forward without a gradient (one read of the logits; the bytes are those of the read).
--ignore-every N: every Nth target is ignore_index (default 17, as in the benchmark; 0: none).
--steady also times back-to-back calls in one CUDA graph on rotated input copies (the benchmark's steady device time,
the benchmark's steady figure), after the single call with L2 flushed; the two can rank variants differently. "steady" is
in place, each call on its own fresh copy of the logits, as the benchmark; "cyc" in place cycling through two copies
(the benchmark's old method: most calls read an earlier call's gradient); "oop" writes the
gradient to another buffer (the same bytes move).
"""

import argparse
import ctypes

import torch

import tigon  # noqa: F401  (registers the ops)
from tigon import _lib
from tigon.bench.timing import rotated_copies, stream_time_ms, time_ms

_select = _lib.declare("tigon_testing_cross_entropy_kernel", [ctypes.c_char_p])
_last = _lib.lib.tigon_testing_cross_entropy_last_kernel
_last.restype = ctypes.c_char_p

ap = argparse.ArgumentParser()
ap.add_argument("--shape", default="8192x128256")
ap.add_argument("--reps", type=int, default=50)
ap.add_argument("--dtype", default="bfloat16")
ap.add_argument("--loss-only", action="store_true")
ap.add_argument("--ignore-every", type=int, default=17)
ap.add_argument("--steady", action="store_true")
ap.add_argument("variants", nargs="*", default=["cluster", "cluster4", "cluster7", "classic"])
args = ap.parse_args()

M, V = map(int, args.shape.split("x"))
dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(0)
x0 = (torch.randn(M, V, generator=gen, device=dev) * 2).to(getattr(torch, args.dtype))
t = torch.randint(0, V, (M,), generator=gen, device=dev)
if args.ignore_every > 0:
    t[:: args.ignore_every] = -100
nbytes = (1 if args.loss_only else 2) * M * V * x0.element_size()
if args.loss_only:  # (logits, target, weight, ignore_index, smoothing, z, softcap, reduction, need_grad)
    fwd_ = lambda x, *a: torch.ops.tigon.cross_entropy_fwd(x, *a, False)  # noqa: E731
else:  # the gradient written over the logits
    fwd_ = torch.ops.tigon.cross_entropy_fwd_

ref = None
for name in args.variants:
    _lib.check(_select(name.encode()))
    x = x0.clone()
    loss = fwd_(x, t, None, -100, 0.0, 0.0, 0.0, 1)[0].item()
    ran = _last().decode()
    g = x.clone()
    ref = (loss, g) if ref is None else ref
    err = (g.float() - ref[1].float()).abs().max().item()
    ms = time_ms(lambda xc: fwd_(xc, t, None, -100, 0.0, 0.0, 0.0, 1), dev, args.reps, 3, setup=lambda: x0.clone())
    steady = ""
    if args.steady and not args.loss_only:
        sms = stream_time_ms(lambda xc: fwd_(xc, t, None, -100, 0.0, 0.0, 0.0, 1), [(x0,)], dev, ms, fresh=True)
        cyc = stream_time_ms(
            lambda xc: fwd_(xc, t, None, -100, 0.0, 0.0, 0.0, 1), rotated_copies((x0.clone(),), dev), dev, ms
        )
        oop = stream_time_ms(
            lambda xc: torch.ops.tigon.cross_entropy_fwd(xc, t, None, -100, 0.0, 0.0, 0.0, 1, True), [(x0,)], dev, ms
        )
        steady = f"steady {sms * 1e3:7.1f} us  cyc {cyc * 1e3:7.1f}  oop {oop * 1e3:7.1f}  "
    print(
        f"{name:9s} ran {ran:9s} {ms * 1e3:8.1f} us  {nbytes / ms / 1e9:5.2f} TB/s  {steady}"
        f"loss {loss:.6f} (d {loss - ref[0]:+.1e})  max|dgrad| vs first {err:.1e}",
        flush=True,
    )
_select(None)
