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


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    # A different seed per test (but reproducible from its name): fresh random inputs, never zeros.
    torch.manual_seed(sum(i * ord(c) for i, c in enumerate(request.node.nodeid)) % (2**31))
