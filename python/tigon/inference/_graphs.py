"""CUDA graphs for inference. StepGraphs: the decode step (and the encoder's layer stack), one graph per (batch bucket,
cache length bucket, sampling settings), captured on first use; off the GPU the step runs eagerly, the same code.
A graph records the step's kernels over the engine's static tensors (tokens, slot, cache, outputs), which the step
updates in place, so a replay is one launch and needs no host data. CallGraphs: a whole model's forward of one input
tensor (the CNN path), one graph per input signature. Every graph of one owner allocates from one memory pool: they
never run at once, and the pool stops growing once each bucket has been seen.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch
import torch.utils._pytree


class StepGraphs:
    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        self.graphs: dict = {}
        self._pool = torch.cuda.graph_pool_handle() if self.enabled else None

    def run(self, key, step: Callable[[], None], generator: torch.Generator | None = None) -> None:
        """step() once: eagerly off the GPU; on it, the first call for key runs eagerly (on a side stream: it warms
        up cuBLAS and lazily loaded kernels, as capture requires) and is then captured, later calls replay."""
        # torch releases without graph-safe custom generators run sampling steps eagerly
        graph_safe = generator is None or hasattr(torch.cuda.CUDAGraph, "register_generator_state")
        if not self.enabled or not graph_safe:
            step()
            return
        graph = self.graphs.get(key)
        if graph is not None:
            graph.replay()
            return
        current = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            step()  # this step's real work; capture below only records, it runs nothing
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if generator is not None:  # sampling draws from it: each replay must advance its offset
            graph.register_generator_state(generator)
        with torch.cuda.graph(graph, pool=self._pool):
            step()
        self.graphs[key] = graph

    def clear(self) -> None:
        """Drops every graph. The next capture takes a new pool: once the last graph of a pool is gone, torch refuses
        that pool's id for another capture while any tensor it allocated (a static output still held) is alive."""
        self.graphs.clear()
        if self.enabled:
            self._pool = torch.cuda.graph_pool_handle()


def _memory_format(x: torch.Tensor) -> torch.memory_format:
    channels_last = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    return torch.channels_last if channels_last else torch.contiguous_format


class CallGraphs:
    """fn(x) for one input tensor, replayed from CUDA graphs: one per input signature (shape, dtype, device, memory
    format), captured on the first call with it, at most `limit` of them; past the limit fn runs eagerly.

    A graph reads a static copy of x (the call's x is copied in) and writes static outputs, which are cloned on the
    way out since the next replay writes over them. It also reads the weights where they were at capture: when any
    tensor of `state` (the model's parameters and buffers) has moved since, e.g. after model.to(...), the graphs are
    dropped and captured again. Every graph allocates from one memory pool (they never run at once)."""

    def __init__(self, fn: Callable, state: list[torch.Tensor], limit: int = 16) -> None:
        self.fn, self.state, self.limit = fn, state, limit
        self.graphs: dict = {}  # signature -> (static x, {"out": the static outputs})
        self.failed: str | None = None  # why capture is off: every call then runs eagerly
        self._steps: StepGraphs | None = None  # the capture and replay, made on the first CUDA call
        self._ptrs = self._state_ptrs()

    def _state_ptrs(self) -> list[int]:
        return [t.data_ptr() for t in self.state]

    def __call__(self, x: torch.Tensor):
        if self._state_ptrs() != self._ptrs:
            self.clear()
            self._ptrs = self._state_ptrs()
        key = (tuple(x.shape), x.dtype, x.device, _memory_format(x))
        entry = self.graphs.get(key)
        if entry is None:
            if self.failed is not None or len(self.graphs) >= self.limit:
                return self.fn(x)
            entry = (torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=key[3]), {})
        static_x, held = entry
        static_x.copy_(x)

        def step():
            held["out"] = self.fn(static_x)

        if key not in self.graphs:
            self._steps = self._steps or StepGraphs(x.device)
            try:
                self._steps.run(key, step)  # a warm-up run, then the capture, which runs nothing
            except RuntimeError as e:  # a host sync or another uncapturable step in the model's forward
                self.failed = str(e).splitlines()[0]
                warnings.warn(
                    f"tigon.inference: the forward could not be captured in a CUDA graph ({self.failed}); "
                    "running it eagerly",
                    stacklevel=4,
                )
                return self.fn(x)
            self.graphs[key] = entry
        self._steps.run(key, step)  # a replay
        return torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, held["out"])

    def clear(self) -> None:
        self.graphs.clear()
        if self._steps is not None:
            self._steps.clear()
