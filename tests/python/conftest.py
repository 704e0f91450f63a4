import os
import sys
from pathlib import Path

import pytest
import torch

# Run from a checkout: import tigon from python/ (the library is found in build/ or via $TIGON_LIBRARY).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Under pytest-xdist each worker would start one intra-op thread per core: on the GPU machine (32 cores, -n 14) that
# was ~450 threads on 32 cores, the likely reason the CPU training tests of test_transformers.py ran past their time
# limits there. Share the cores out instead (a serial run, as in CI, keeps torch's default).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // _WORKERS))

HAVE_CUDA = torch.cuda.is_available()
NO_CUDA_REASON = "no CUDA device: GPU tests run on the GPU machine (scripts/gpu-check)"
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason=NO_CUDA_REASON)

DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


@pytest.fixture
def uncached_norms():
    """Runs a test on the RMSNorm / LayerNorm uncached kernels (a test hook of the library), then the library's plan."""
    import ctypes

    from tigon import _lib
    import sys

    ops = [sys.modules[f"tigon.ops.{name}"] for name in ("layer_norm", "rms_norm")]  # the modules, not the functions
    select = _lib.declare("tigon_testing_norm_uncached", [ctypes.c_int])

    def use(uncached: int) -> None:
        _lib.check(select(uncached))
        for op in ops:  # workspace sizes follow the plan: forget the ones asked for before
            getattr(op, "_workspace_bytes_cache", {}).clear()

    use(1)
    yield
    use(0)


# The tests past 2^31 elements hold 30-60 GiB of the GPU each. Under pytest-xdist several ran at once on the H200
# and two ran out of memory (49 + 57 GiB held by two workers); with `--dist loadgroup` (scripts/gpu-check) this group
# runs on one worker, one test at a time, and each test hands its cached blocks back when it ends.
BIG_MEMORY_GROUP = "gpu_memory_past_2_31"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.originalname == "test_more_than_2_31_elements" or item.get_closest_marker("big_memory"):
            item.add_marker(pytest.mark.xdist_group(BIG_MEMORY_GROUP))
            item.add_marker(pytest.mark.big_memory)


@pytest.fixture(autouse=True)
def _release_big_memory(request):
    yield
    if HAVE_CUDA and request.node.get_closest_marker("big_memory"):
        torch.cuda.empty_cache()


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    # A different seed per test (but reproducible from its name): fresh random inputs, never zeros.
    torch.manual_seed(sum(i * ord(c) for i, c in enumerate(request.node.nodeid)) % (2**31))


def backward_with_fresh_gradients(outputs, inputs, grads):
    """torch.autograd.grad with output gradients that only the op's backward receives, as a next layer's backward
    hands them (in-place backwards write only over such a gradient): each output passes through `* 1`, whose backward
    makes a fresh gradient. Returns the input gradients and the addresses of the gradients the op received."""
    received = [None] * len(outputs)
    fresh = []
    for i, out in enumerate(outputs):
        out.register_hook(lambda g, i=i: received.__setitem__(i, g.data_ptr()))
        fresh.append(out * 1)
    return torch.autograd.grad(fresh, inputs, grads), received
