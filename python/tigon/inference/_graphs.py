"""The decode step replayed from CUDA graphs: one per (batch bucket, cache length bucket, sampling settings), captured
on first use. Off the GPU the step runs eagerly, the same code.

A graph records the step's kernels over the engine's static tensors (tokens, slot, cache, outputs), which the step
updates in place, so a replay is one launch and needs no host data. Every graph allocates from one memory pool:
they never run at once, and the pool stops growing once each bucket has been seen.
"""

from __future__ import annotations

from typing import Callable

import torch


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
        self.graphs.clear()
