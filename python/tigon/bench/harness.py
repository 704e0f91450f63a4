"""The measurement steps every op benchmark shares: building the implementations to compare, and timing one of them
forward, backward and both (eager and from a CUDA graph) with its peak memory."""

from __future__ import annotations

import importlib

import torch

from tigon.bench.report import Skip
from tigon.bench.timing import graph_time_ms, input_copy, peak_extra_mib, rotated_copies, stream_time_ms, time_ms

__all__ = [
    "bench_shapes",
    "compiled",
    "liger",
    "make_impls",
    "time_fwd_bwd",
    "time_fwd",
    "stream_fwd_full",
    "run_checks",
    "time_checked",
]


def compiled(fn, ctx, args):
    """torch.compile of the torch baseline fn, specialised per shape (dynamic=False: as a training run with a fixed
    sequence length would), or Skip on the CPU unless --cpu-compile (inductor takes 15-30 s per shape there)."""
    if ctx.device.type != "cuda" and not args.cpu_compile:
        raise Skip("CPU: inductor takes 15-30 s per shape to compile (--cpu-compile to include it)")
    return torch.compile(fn, dynamic=False)


def liger(module: str, name: str, ctx):
    """liger_kernel's `module.name`, or Skip(reason) when Liger cannot run here: not installed, Triton failing to
    initialise, or no GPU (it is Triton: CUDA only)."""
    try:
        obj = getattr(importlib.import_module(module), name)
    except Exception as e:
        raise Skip(f"liger_kernel not importable ({type(e).__name__}: {e})")
    if ctx.device.type != "cuda":
        raise Skip("Liger is Triton: CUDA only")
    return obj


def standard_impls(tigon_op: str, torch_fn, liger_module: str, liger_function: str) -> dict:
    """The four implementations of an op whose Tigon form is `tigon.ops.<tigon_op>` and whose Liger form is an
    autograd Function: tigon, torch_eager (torch_fn), torch_compile (of torch_fn) and liger (its .apply)."""

    def _tigon(ctx, args):
        import tigon

        return getattr(tigon.ops, tigon_op)

    return {
        "tigon": _tigon,
        "torch_eager": lambda ctx, args: torch_fn,
        "torch_compile": lambda ctx, args: compiled(torch_fn, ctx, args),
        "liger": lambda ctx, args: liger(liger_module, liger_function, ctx).apply,
    }


def output_and_grads(fn, inputs, dy) -> tuple:
    """fn(*inputs) and the gradients of every input (each a fresh leaf copy) for the output gradient dy."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    y = fn(*leaves)
    return (y, *torch.autograd.grad(y, leaves, dy))


def relative_errors(fn, inputs, dy, ref) -> dict:
    """Max abs difference of fn's output and gradients from ref's (output_and_grads in float32), each relative to the
    reference's size: err_y, err_dx (the first input) and err_dw (the largest over the other inputs, if any)."""
    got = output_and_grads(fn, inputs, dy)
    err = [(g.float() - e).abs().max().item() / max(1.0, e.abs().max().item()) for g, e in zip(got, ref)]
    return {"err_y": err[0], "err_dx": err[1], **({"err_dw": max(err[2:])} if len(err) > 2 else {})}


def bench_shapes(label: str, args, ctx, gpu_shapes, cpu_shapes, expected: str) -> list[tuple]:
    """--shapes, or the op's defaults for this device, less any with the wrong number of dimensions (noted under the
    table). expected names the dimensions, e.g. "rows x hidden"."""
    ndim = expected.count(" x ") + 1
    keep = []
    for shape in args.shapes or (gpu_shapes if ctx.device.type == "cuda" else cpu_shapes):
        if len(shape) != ndim:
            ctx.note(f"{label}: shape {'x'.join(map(str, shape))} skipped: expected {expected}")
            continue
        keep.append(shape)
    return keep


def linear_cases(label: str, args, ctx, gpu_shapes, cpu_shapes, quick: int):
    """(shape, x, w) per (rows, K, N) shape (--shapes or the defaults; the first `quick` under --quick): x [rows, K]
    and w [N, K] / sqrt(K) in the run's dtype, the same seeded values in every run."""
    shapes = bench_shapes(label, args, ctx, gpu_shapes, cpu_shapes, "rows x K x N")
    if args.quick and not args.shapes:
        shapes = shapes[:quick]
    for shape in shapes:
        m, k, n = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        x = torch.randn(m, k, generator=gen, device=ctx.device).to(ctx.dtype)
        w = (torch.randn(n, k, generator=gen, device=ctx.device) / k**0.5).to(ctx.dtype)
        yield shape, x, w


def make_impls(label: str, factories: dict, args, ctx, *extra) -> dict:
    """{name: fn} for every factory not filtered out by --impls; a factory raises Skip(reason) when it cannot run
    here (not installed, wrong device), which becomes a note under the table."""
    fns = {}
    for name, make in factories.items():
        if args.impls and name not in args.impls:
            continue
        try:
            fns[name] = make(*extra, ctx, args)
        except Skip as s:
            ctx.note(f"{label}: {name} skipped: {s}")
        except Exception as e:  # a broken optional baseline must not stop the others
            ctx.note(f"{label}: {name} failed to set up: {type(e).__name__}: {e}")
    return fns


def time_fwd_bwd(label: str, fn, inputs: tuple, grad_of: tuple, grads, ctx) -> dict:
    """Times fn(*inputs): forward alone (no grad), backward alone (a fresh forward before each timed iteration,
    outside the timed region), forward + backward, the same two replayed from a CUDA graph, and the peak extra memory
    of one forward + backward. grad_of: indices of the inputs that get gradients; grads: the output gradient(s).
    fn.overwrites_inputs (optional): its backward writes over its inputs (in-place gradients), so the steady-state
    timing gives each call fresh inputs."""
    device, reps, warmup = ctx.device, ctx.reps, ctx.warmup
    with torch.no_grad():
        fwd_ms = time_ms(lambda: fn(*inputs), device, reps, warmup)
    args = [input_copy(t, True) if i in grad_of else t for i, t in enumerate(inputs)]
    leaves = tuple(args[i] for i in grad_of)

    def full():
        return torch.autograd.grad(fn(*args), leaves, grads)

    out = {
        "fwd_ms": fwd_ms,
        "bwd_ms": time_ms(
            lambda y: torch.autograd.grad(y, leaves, grads), device, reps, warmup, setup=lambda: fn(*args)
        ),
        "full_ms": time_ms(full, device, reps, warmup),
        "peak_mib": peak_extra_mib(full, device),
    }
    # The same calls replayed from a CUDA graph: device time alone.
    try:
        with torch.no_grad():
            out["fwd_graph_ms"] = graph_time_ms(lambda: fn(*inputs), device, reps, warmup)
        out["full_graph_ms"] = graph_time_ms(full, device, reps, warmup)
        overwrites = getattr(fn, "overwrites_inputs", False)
        out.update(stream_fwd_full(fn, inputs, grad_of, grads, out["fwd_ms"], out["full_ms"], ctx, overwrites))
    except Exception as e:  # an implementation that cannot be captured keeps its eager numbers
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()  # a failed capture's private pool, before the next run
        ctx.note(f"{label}: CUDA graph timing failed ({type(e).__name__}: {str(e)[:100]})")
    return out


def time_fwd(label: str, fn, inputs: tuple, ctx) -> dict:
    """Times an inference op (no backward), fn(*inputs) under no_grad: eager calls, one call replayed from a CUDA
    graph, the steady-state device time on input copies rotated past L2 (every call reads its inputs from memory, as
    a decoding step that streams a model's weights does), and the peak extra memory of one call."""
    device = ctx.device
    with torch.no_grad():
        out = {"fwd_ms": time_ms(lambda: fn(*inputs), device, ctx.reps, ctx.warmup)}
        out["peak_mib"] = peak_extra_mib(lambda: fn(*inputs), device)
        if device.type != "cuda":
            return out
        try:
            out["fwd_graph_ms"] = graph_time_ms(lambda: fn(*inputs), device, ctx.reps, ctx.warmup)
            sets = rotated_copies(tuple(inputs), device)
            out["fwd_dev_ms"] = stream_time_ms(fn, sets, device, out["fwd_ms"], ctx.stream_reps)
            del sets
        except Exception as e:  # an implementation that cannot be captured keeps its eager numbers
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
            ctx.note(f"{label}: CUDA graph timing failed ({type(e).__name__}: {str(e)[:100]})")
    return out


def stream_fwd_full(
    fn, inputs: tuple, grad_of: tuple, grads, fwd_est: float, full_est: float, ctx, overwrites: bool = False
) -> dict:
    """Steady-state device time of the forward and of forward + backward (stream_time_ms), on rotated input copies
    (the inputs that get gradients are leaves of their own in each copy). overwrites: forward + backward writes over
    its inputs, so each of its calls gets a fresh copy (stream_time_ms's fresh)."""
    if ctx.device.type != "cuda":
        return {}
    sets = rotated_copies(
        tuple(input_copy(t, i in grad_of) if isinstance(t, torch.Tensor) else t for i, t in enumerate(inputs)),
        ctx.device,
    )

    def full(*args):
        return torch.autograd.grad(fn(*args), tuple(args[i] for i in grad_of), grads)

    with torch.no_grad():
        fwd = stream_time_ms(fn, sets, ctx.device, fwd_est, ctx.stream_reps)
    out = {
        "fwd_dev_ms": fwd,
        "full_dev_ms": stream_time_ms(full, sets, ctx.device, full_est, ctx.stream_reps, fresh=overwrites),
    }
    del sets
    return out


def run_checks(fns: dict, check) -> dict:
    """{name: check(fn) or the exception it raised}: every implementation is checked against the reference first, so
    the caller can free the reference before timing."""
    checks = {}
    for name, fn in fns.items():
        try:
            checks[name] = check(fn)
        except Exception as e:
            checks[name] = e
    return checks


def time_checked(op: str, label: str, shape, fns: dict, checks: dict, time, nbytes: dict, ctx) -> list[dict]:
    """One result per implementation: its timings (time(fn) -> dict) and check errors, or the failure of either."""
    from tigon.bench.report import make_result, progress
    from tigon.bench.timing import synchronize

    results = []
    for name, fn in fns.items():
        where = f"{label} {name}"
        try:
            if isinstance(checks[name], Exception):
                raise checks[name]
            progress(f"{where}: max err " + ", ".join(f"{k[4:]} {v:.1e}" for k, v in checks[name].items()))
            times = time(fn)
            res = make_result(ctx, op, name, shape, nbytes, **times, **checks[name])
            full = times.get("full_ms")  # None for inference ops (no backward)
            progress(f"{where}: fwd {times['fwd_ms']:.4f} ms" + ("" if full is None else f", full {full:.4f} ms"))
        except Exception as e:
            progress(f"{where}: FAILED {type(e).__name__}: {e}")
            res = make_result(ctx, op, name, shape, nbytes, error=f"{type(e).__name__}: {e}")
        results.append(res)
        synchronize(ctx.device)
        if ctx.device.type == "cuda":  # hand back what this implementation's graphs and copies held: the next one
            torch.cuda.empty_cache()  # starts from the same clean allocator (timings drifted run to run without)
    return results


def check_and_time_all_grads(
    op: str, label: str, shape, fns: dict, reference, inputs: tuple, dy, nbytes: dict, ctx
) -> list[dict]:
    """time_checked for an op with a gradient for every input: each implementation checked against reference (run in
    float32 on float32 copies, freed before timing), then forward and forward + backward timed."""
    if "torch_compile" in fns:
        torch._dynamo.reset()
    ref = output_and_grads(reference, [t.float() for t in inputs], dy.float())
    checks = run_checks(fns, lambda fn: relative_errors(fn, inputs, dy, ref))
    del ref
    every = tuple(range(len(inputs)))
    return time_checked(
        op, label, shape, fns, checks, lambda fn: time_fwd_bwd(op, fn, inputs, every, (dy,), ctx), nbytes, ctx
    )


def _rowwise_errors(fn, x, dy, ref) -> dict:
    leaf = x.detach().clone().requires_grad_()
    y = fn(leaf)
    (dx,) = torch.autograd.grad(y, leaf, dy)
    return {"err_y": (y.float() - ref[0]).abs().max().item(), "err_dx": (dx.float() - ref[1]).abs().max().item()}


def run_rowwise(op: str, impls: dict, reference, gpu_shapes, cpu_shapes, args, ctx) -> list[dict]:
    """The benchmark of a row-wise op y = f(x) over the last dimension (softmax, sparsemax): [rows, cols] inputs of
    2 * randn, errors against reference(x in fp32), forward and forward + backward timed. Memory-bound: the forward
    reads x and writes y; the backward reads y and dy and writes dx."""
    fns = make_impls(op, impls, args, ctx)
    results = []
    for shape in bench_shapes(op, args, ctx, gpu_shapes, cpu_shapes, "rows x cols"):
        M, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        x, dy = ((torch.randn(M, N, generator=gen, device=ctx.device) * 2).to(ctx.dtype) for _ in range(2))
        elt = x.element_size()
        nbytes = {"fwd": 2 * M * N * elt, "bwd": 3 * M * N * elt, "full": 5 * M * N * elt}
        if "torch_compile" in fns:
            torch._dynamo.reset()
        xf = x.float().requires_grad_()
        yf = reference(xf)
        ref = (yf.detach(), torch.autograd.grad(yf, xf, dy.float())[0])
        checks = run_checks(fns, lambda fn: _rowwise_errors(fn, x, dy, ref))
        del ref, xf, yf
        results += time_checked(
            op,
            f"{op} {M}x{N}",
            shape,
            fns,
            checks,
            lambda fn: time_fwd_bwd(op, fn, (x,), (0,), (dy,), ctx),
            nbytes,
            ctx,
        )
        del x, dy
    return results
