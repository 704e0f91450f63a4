import sys
from pathlib import Path

import pytest
import torch

# Run from a checkout: import tigon from python/ (the library is found in build/ or via $TIGON_LIBRARY).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

HAVE_CUDA = torch.cuda.is_available()
NO_CUDA_REASON = "no CUDA device: GPU tests run on the GPU machine (scripts/gpu-check)"
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason=NO_CUDA_REASON)

DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    # A different seed per test (but reproducible from its name): fresh random inputs, never zeros.
    torch.manual_seed(sum(i * ord(c) for i, c in enumerate(request.node.nodeid)) % (2**31))
