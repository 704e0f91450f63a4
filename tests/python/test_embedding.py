"""Embedding (tigon.ops.embedding, tigon.nn.Embedding) against F.embedding in float64: the rows and the weight's
gradient (repeated indices, padding_idx, int32 indices, every dtype), determinism of the gradient, out-of-range
indices, torch.compile(fullgraph=True), bad input naming the argument."""

import pytest
import torch
import torch.nn.functional as F

import tigon
from conftest import DEVICES
from tolerances import assert_close


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("padding_idx", [None, 3, -1])
def test_matches_float64_reference(device, dtype, index_dtype, padding_idx):
    torch.manual_seed(0)
    w = torch.randn(50, 72, device=device).to(dtype).requires_grad_()
    idx = torch.randint(0, 50, (4, 33), device=device)
    idx[0, :10] = 3  # a run of one index, and the padding row
    idx = idx.to(index_dtype)
    y = tigon.ops.embedding(idx, w, padding_idx)
    assert y.shape == (4, 33, 72) and y.dtype == dtype
    dy = torch.randn(y.shape, device=device).to(dtype)
    (dw,) = torch.autograd.grad(y, w, dy)
    wd = w.detach().double().requires_grad_()
    ref = F.embedding(idx.long(), wd, padding_idx)
    (ref_dw,) = torch.autograd.grad(ref, wd, dy.double())
    assert torch.equal(y.double(), ref)
    assert dw.dtype == dtype
    assert_close(dw, ref_dw, name="dweight", scale=max(1.0, ref_dw.abs().max().item()))
    (again,) = torch.autograd.grad(tigon.ops.embedding(idx, w, padding_idx), w, dy)
    assert torch.equal(again, dw), "the weight gradient is the same bits every run"


@pytest.mark.parametrize("device", DEVICES)
def test_module_out_of_range_and_strided_weight(device):
    m = tigon.nn.Embedding(20, 16, padding_idx=0).to(device)
    assert isinstance(m, torch.nn.Embedding)
    idx = torch.tensor([[0, 5, 19]], device=device)
    assert_close(m(idx), F.embedding(idx, m.weight.double(), 0), name="module")
    with pytest.raises(ValueError, match="'indices'"):
        tigon.ops.embedding(torch.tensor([20], device=device), m.weight, check_indices=True)
    if device == "cpu":
        with pytest.raises(ValueError, match="'indices'"):
            tigon.ops.embedding(torch.tensor([-1]), m.weight)
    else:  # no check: the row is NaN, not another row
        assert torch.isnan(tigon.ops.embedding(torch.tensor([25], device=device), m.weight)).all()
    wide = torch.randn(20, 32, device=device)[:, ::2]  # a weight with stride 2 in its rows: copied
    assert_close(tigon.ops.embedding(idx, wide), F.embedding(idx, wide.double()), name="strided weight")
    clipped = tigon.nn.Embedding(20, 16, max_norm=1.0).to(device)  # torch's own forward
    assert clipped(idx).shape == (1, 3, 16)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    w = torch.randn(100, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    idx = torch.randint(0, 100, (8, 17), device=device)

    def f(idx, w):
        return tigon.ops.embedding(idx, w * 1.5)

    eager = f(idx, w)
    (g_eager,) = torch.autograd.grad(eager.float().pow(2).sum(), w)
    compiled = torch.compile(f, fullgraph=True)(idx, w)
    (g_compiled,) = torch.autograd.grad(compiled.float().pow(2).sum(), w)
    assert torch.equal(compiled, eager)
    assert torch.equal(g_compiled, g_eager)


def test_bad_input_names_the_argument():
    w, idx = torch.randn(10, 4), torch.tensor([1, 2])
    cases = [
        (lambda: tigon.ops.embedding([1], w), TypeError, "'indices'"),
        (lambda: tigon.ops.embedding(idx.float(), w), TypeError, "'indices'"),
        (lambda: tigon.ops.embedding(idx, torch.randn(10)), ValueError, "'weight'"),
        (lambda: tigon.ops.embedding(idx, w.long()), ValueError, "'weight'"),
        (lambda: tigon.ops.embedding(idx, w, padding_idx=10), ValueError, "'padding_idx'"),
        (lambda: tigon.ops.embedding(idx, w, padding_idx=1.0), ValueError, "'padding_idx'"),
    ]
    for call, err, match in cases:
        with pytest.raises(err, match=match):
            call()
