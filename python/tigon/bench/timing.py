"""Timing helpers shared by every op benchmark.

GPU: one pair of CUDA events per iteration around the op alone, with the L2 cache flushed before each iteration
(outside the events) so every run reads its inputs from HBM, as in a training step where the activations were
written long before; the median is reported because it ignores the occasional clock or scheduling hiccup.
CPU: time.perf_counter around each call, median, for the reference path on machines without a GPU.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

__all__ = [
    "time_ms",
    "graph_time_ms",
    "stream_time_ms",
    "rotated_copies",
    "measure_copy_bandwidth",
    "peak_extra_mib",
    "synchronize",
]

_FLUSH_BYTES = 256 << 20  # larger than any current L2 (H100/H200: 50 MiB, B200: 126 MiB)
_flush_buffers: dict = {}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _flush_l2(device: torch.device) -> None:
    buf = _flush_buffers.get(device)
    if buf is None:  # allocated once: allocating per iteration would add allocator noise
        buf = _flush_buffers[device] = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device=device)
    buf.zero_()


def _cuda_time_ms(fn, device: torch.device, reps: int, warmup: int, flush: bool, setup) -> float:
    for _ in range(warmup):  # first calls pay for allocator growth, lazy module loading, autotuning, compilation
        fn(setup()) if setup else fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    torch.cuda.synchronize(device)
    for start, end in events:
        arg = setup() if setup else None  # untimed; before the flush so its outputs are not left in L2
        if flush:
            _flush_l2(device)
        start.record()
        fn(arg) if setup else fn()
        end.record()
        del arg
    torch.cuda.synchronize(device)  # read the events only once, so the queue never drains between iterations
    return statistics.median(s.elapsed_time(e) for s, e in events)


def _cpu_time_ms(fn, reps: int, warmup: int, setup) -> float:
    for _ in range(warmup):
        fn(setup()) if setup else fn()
    samples = []
    for _ in range(reps):
        arg = setup() if setup else None
        t0 = time.perf_counter()
        fn(arg) if setup else fn()
        samples.append((time.perf_counter() - t0) * 1e3)
        del arg
    return statistics.median(samples)


def time_ms(
    fn: Callable,
    device: torch.device,
    reps: int = 100,
    warmup: int = 10,
    flush: bool = True,
    setup: Callable[[], object] | None = None,
) -> float:
    """Median milliseconds of one call of fn() (CUDA events on a GPU, perf_counter on the CPU).

    With setup, every iteration first runs arg = setup() outside the timed region and then times fn(arg): e.g. a
    forward pass, so that a backward pass can be timed alone on a fresh graph each time."""
    if device.type == "cuda":
        return _cuda_time_ms(fn, device, reps, warmup, flush, setup)
    return _cpu_time_ms(fn, reps, warmup, setup)


def capture(graph: torch.cuda.CUDAGraph, device: torch.device):
    """torch.cuda.graph(graph) on the current stream, the stream the run's inputs were made on (tigon.bench's main
    sets one): an input that requires grad and has autograd history (input_copy) was recorded on that stream, and a
    backward captured on any other would make the input's stream wait on the capture, which CUDA refuses. On the
    default stream, where capture cannot run, torch's own capture stream."""
    stream = torch.cuda.current_stream(device)
    return torch.cuda.graph(graph, stream=None if stream == torch.cuda.default_stream(device) else stream)


def graph_time_ms(fn: Callable, device: torch.device, reps: int = 100, warmup: int = 10) -> float | None:
    """Median milliseconds of one replay of fn() captured in a CUDA graph, L2 flushed before each replay: the device
    time of the work with the Python and launch overhead taken out (what a training step sees when the GPU runs
    ahead of the host, and what CUDA-graph users get). None off the GPU."""
    if device.type != "cuda":
        return None
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm up outside capture: lazy init, autotuning, workspace sizes
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with capture(graph, device):
        out = fn()
    ms = time_ms(graph.replay, device, reps, warmup)
    del out, graph
    return ms


def input_copy(t: torch.Tensor, requires_grad: bool | None = None) -> torch.Tensor:
    """A copy of t; one that requires grad is a non-leaf, as the activations and logits a model hands an op are (ops
    that write over an input refuse leaves that require grad)."""
    requires_grad = t.requires_grad if requires_grad is None else requires_grad
    return t.detach().requires_grad_().mul(1) if requires_grad else t.detach().clone()


_ROTATE_BYTES = 256 << 20  # input copies cycled by stream_time_ms: > 4x the H200's 60 MB L2


def rotated_copies(tensors: tuple, device: torch.device) -> list[tuple]:
    """[tensors, copy, copy, ...]: enough copies of the tensor arguments (others shared) that cycling through them
    reads more than _ROTATE_BYTES between two reads of the same copy, so no call finds its inputs in L2. At least two,
    so even a huge input is never re-read right after the call that wrote it."""
    nbytes = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    n = max(2, -(-_ROTATE_BYTES // max(nbytes, 1)))
    if device.type == "cuda":  # never crowd out the run: the copies get at most a quarter of what is free
        free, _ = torch.cuda.mem_get_info(device)
        n = max(1, min(n, free // 4 // max(nbytes, 1)))
    clone = lambda t: input_copy(t) if isinstance(t, torch.Tensor) else t  # noqa: E731
    return [tensors] + [tuple(clone(t) for t in tensors) for _ in range(n - 1)]


def stream_time_ms(
    fn: Callable,
    arg_sets: list[tuple],
    device: torch.device,
    est_ms: float,
    reps: int = 10,
    target_ms: float = 5.0,
    fresh: bool = False,
) -> float | None:
    """Device milliseconds per call in steady state: one CUDA graph of back-to-back fn(*args) calls cycling through
    arg_sets (rotated_copies: every call reads its inputs from HBM), replayed reps times; median replay / calls. No
    flush and no launch gaps inside the graph, so this is the throughput of a GPU-bound training step, the number a
    kernel's bandwidth is judged by. est_ms (an eager time) sizes the graph to about target_ms. None off the GPU.

    fresh, for calls that write over their inputs (a gradient over the logits): every call in the graph gets its own
    copy of arg_sets[0]'s tensors, all restored from arg_sets[0] (and L2 flushed) before each replay, outside the
    timed region. Cycling through a few copies would have most calls read what an earlier call wrote (a gradient
    instead of logits), which can run at another speed than real data (docs/performance/benchmarking.md)."""
    if device.type != "cuda":
        return None
    calls = max(len(arg_sets), min(400, round(target_ms / max(est_ms, 1e-3))))
    if fresh:
        return _fresh_stream_time_ms(fn, arg_sets[0], device, calls, reps)
    calls -= calls % len(arg_sets)
    graph = _capture(fn, arg_sets, [arg_sets[i % len(arg_sets)] for i in range(calls)], device)
    ms = time_ms(graph.replay, device, reps, warmup=2, flush=False)
    del graph
    return ms / calls


def _capture(fn: Callable, warm_sets: list[tuple], call_sets: list[tuple], device: torch.device):
    """A CUDA graph of fn(*args) for each of call_sets in order, after one uncaptured call on each of warm_sets."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm up outside capture: lazy init, autotuning, workspace sizes
        for args in warm_sets:
            fn(*args)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with capture(graph, device):
        for args in call_sets:
            fn(*args)
    return graph


def _fresh_stream_time_ms(fn: Callable, src: tuple, device: torch.device, calls: int, reps: int) -> float:
    nbytes = sum(t.numel() * t.element_size() for t in src if isinstance(t, torch.Tensor))
    free, _ = torch.cuda.mem_get_info(device)  # never crowd out the run: the copies get at most a quarter of it
    calls = max(1, min(calls, free // 4 // max(nbytes, 1)))
    clone = lambda t: input_copy(t) if isinstance(t, torch.Tensor) else t  # noqa: E731
    copies = [tuple(clone(t) for t in src) for _ in range(calls)]

    def restore():
        with torch.no_grad():
            for c in copies:
                for dst, s in zip(c, src):
                    if isinstance(dst, torch.Tensor):
                        dst.copy_(s)

    graph = _capture(fn, copies[:1], copies, device)
    return time_ms(lambda _: graph.replay(), device, reps, warmup=2, flush=True, setup=restore) / calls


def measure_copy_bandwidth(device: torch.device, nbytes: int | None = None, reps: int = 20) -> float:
    """GB/s of a plain tensor copy (bytes read + bytes written): the practical memory-bandwidth ceiling that the
    memory-bound ops are quoted against. 1 GiB on a GPU (far beyond L2, so no flush needed), 64 MiB on the CPU."""
    if nbytes is None:
        nbytes = (1 << 30) if device.type == "cuda" else (64 << 20)
        if device.type == "cuda":  # leave room on small or busy GPUs: src + dst + the flush buffer
            free, _ = torch.cuda.mem_get_info(device)
            while nbytes > (64 << 20) and 2 * nbytes + _FLUSH_BYTES > free // 2:
                nbytes //= 2
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, reps=reps, warmup=3, flush=False)
    del src, dst
    return 2 * nbytes / (ms * 1e-3) / 1e9


def peak_extra_mib(fn: Callable[[], object], device: torch.device) -> float | None:
    """MiB allocated by one call of fn() on top of what was live before it (inputs, dy): the op's own activations,
    outputs and workspace. None on the CPU, where torch keeps no allocator statistics."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    out = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del out
    return peak / (1 << 20)
