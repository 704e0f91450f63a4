"""Multi-token attention's score convolution (tigon.ops.multi_token_attention, tigon.nn.MultiTokenAttention) and the
causal softmax / sparsemax under it, against float64 references: outputs, the gradients of scores, weight and bias,
softmax and sparsemax, groups, padding, stride and dilation, torch.compile(fullgraph=True), CUDA-graph replay, bad
input naming the argument."""

import pytest
import torch
import torch.nn.functional as F

import tigon
from conftest import DEVICES, needs_cuda
from test_sparsemax import reference as sparsemax_reference
from tolerances import assert_close


@pytest.fixture(autouse=True)
def _conv_in_fp32():
    """cuDNN's convolutions in full fp32 (torch lets them round to TF32 by default), to hold them to the fp32 row."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = before


def masked(scores):
    """scores with every entry above each [L, L] matrix's diagonal at -inf (the keys after the query)."""
    L = scores.shape[-1]
    future = torch.ones(L, L, dtype=torch.bool, device=scores.device).triu(1)
    return scores.masked_fill(future, float("-inf"))


def reference(scores, weight, bias, stride=1, padding=0, dilation=1, groups=1, sparse=False):
    """The definition in float64: mask with -inf, normalize over the keys, convolve, zero above the diagonal."""
    s = masked(scores.double())
    probs = sparsemax_reference(s) if sparse else torch.softmax(s, -1)
    b = None if bias is None else bias.double()
    return F.conv2d(probs, weight.double(), b, stride, padding, dilation, groups).tril()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", ["softmax", "sparsemax"])
@pytest.mark.parametrize("L", [1, 9, 256])
def test_causal_normalization_matches_masked_reference(device, dtype, op, L):
    if device == "cpu" and dtype != torch.float32 and L > 9:
        pytest.skip("the CPU reference is float64 per element: the 16-bit dtypes are covered at small L")
    scores = (torch.randn(2, 3, L, L, device=device) * 2).to(dtype)
    future = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)
    scores = scores.masked_fill(future, float("nan")).requires_grad_()  # never read: NaN would show
    y = getattr(tigon.ops, op)(scores, causal=True)
    sd = scores.detach().double().requires_grad_()
    ref_fn = sparsemax_reference if op == "sparsemax" else lambda s: torch.softmax(s, -1)
    ref = ref_fn(masked(sd))
    assert_close(y, ref, name="y", scale=2.0 if op == "sparsemax" else None)
    assert (y.detach()[..., future] == 0).all(), "zeros above the diagonal"
    dy = torch.randn(y.shape, device=device).to(dtype)
    (dx,) = torch.autograd.grad(y, scores, dy)
    assert (dx[..., future] == 0).all(), "no gradient reaches the masked scores"
    if op == "softmax":
        (dref,) = torch.autograd.grad(ref, sd, dy.double())
        assert_close(dx, dref, name="dx", scale=2.0)
    else:  # from tigon's own support, as the plain sparsemax's test does
        support = y.detach().double() > 0
        mean = (dy.double() * support).sum(-1, keepdim=True) / support.sum(-1, keepdim=True)
        assert_close(dx, torch.where(support, dy.double() - mean, torch.zeros_like(mean)), name="dx", scale=2.0)


@needs_cuda
@pytest.mark.parametrize("op", ["softmax", "sparsemax"])
def test_causal_rows_past_the_cached_kernels(op):
    """L = 16392 in fp32: softmax's rows no longer fit registers and sparsemax's no longer fit shared memory, so the
    long-row kernels run; sampled rows against the masked reference."""
    L = 16392
    x = torch.randn(1, 1, L, L, device="cuda")
    y = getattr(tigon.ops, op)(x, causal=True)
    ref_fn = sparsemax_reference if op == "sparsemax" else lambda s: torch.softmax(s, -1)
    for i in (0, 1, 4097, L - 1):
        row = x[0, 0, i].double().clone()
        row[i + 1 :] = float("-inf")
        assert_close(y[0, 0, i], ref_fn(row), name=f"row {i}")


CONVS = [  # (in, out, kernel, stride, padding, dilation, groups, bias)
    (4, 4, 3, 1, 1, 1, 1, True),  # the paper's "same" convolution
    (4, 8, 3, 1, 1, 1, 2, True),  # grouped, more out channels
    (6, 6, (5, 3), 1, (2, 1), 1, 6, False),  # depthwise, rectangular
    (4, 2, 3, 2, 0, 2, 1, True),  # strided, dilated, unpadded: a smaller output
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("conv", CONVS)
def test_matches_float64_reference(device, dtype, sparse, conv):
    cin, cout, k, stride, padding, dilation, groups, has_bias = conv
    L = 37
    scores = (torch.randn(2, cin, L, L, device=device) * 2).to(dtype).requires_grad_()
    kk = (k, k) if isinstance(k, int) else k
    weight = (torch.randn(cout, cin // groups, *kk, device=device) * 0.3).to(dtype).requires_grad_()
    bias = (torch.randn(cout, device=device) * 0.1).to(dtype).requires_grad_() if has_bias else None
    out = tigon.ops.multi_token_attention(scores, weight, bias, stride, padding, dilation, groups, sparse)
    leaves = [t.detach().double().requires_grad_() for t in (scores, weight) + ((bias,) if has_bias else ())]
    ref = reference(leaves[0], leaves[1], leaves[2] if has_bias else None, stride, padding, dilation, groups, sparse)
    assert out.dtype == dtype
    # the probabilities are rounded to the dtype before the convolution sums kH * kW * C_in / groups of them
    terms = kk[0] * kk[1] * cin // groups
    assert_close(out, ref, name="out", scale=terms**0.5)
    assert (out.detach().triu(1) == 0).all()
    dy = torch.randn(out.shape, device=device).to(dtype)
    grads = torch.autograd.grad(out, [scores, weight] + ([bias] if has_bias else []), dy)
    refs = torch.autograd.grad(ref, leaves, dy.double())
    for name, g, r in zip(("dscores", "dweight", "dbias"), grads, refs, strict=False):
        if name == "dscores" and sparse:
            continue  # an element at tau may fall on either side of it in low precision: checked below
        assert_close(g, r, name=name, scale=max(1.0, r.abs().max().item()) * terms**0.5)
    if sparse:  # dscores from tigon's own support (the probabilities' gradient through the float64 convolution)
        probs = tigon.ops.sparsemax(scores.detach(), causal=True).double().requires_grad_()
        conv = F.conv2d(probs, leaves[1].detach(), None, stride, padding, dilation, groups).tril()
        (dprobs,) = torch.autograd.grad(conv, probs, dy.double())
        support = probs.detach() > 0
        mean = (dprobs * support).sum(-1, keepdim=True) / support.sum(-1, keepdim=True)
        want = torch.where(support, dprobs - mean, torch.zeros_like(dprobs))
        assert_close(grads[0], want, name="dscores", scale=max(1.0, want.abs().max().item()) * terms**0.5)


@pytest.mark.parametrize("device", DEVICES)
def test_module_matches_function_and_inits_as_conv2d(device):
    torch.manual_seed(3)
    m = tigon.nn.MultiTokenAttention(4, 4, 3, padding=1, device=device)
    assert m.weight.shape == (4, 4, 3, 3) and m.bias is not None and (m.bias == 0).all()
    bound = 1 / (4 * 9) ** 0.5  # Kaiming uniform with a = sqrt(5), as nn.Conv2d: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert m.weight.abs().max() <= bound
    assert "sparse=False" in repr(m)
    scores = torch.randn(2, 4, 12, 12, device=device)
    assert torch.equal(m(scores), tigon.ops.multi_token_attention(scores, m.weight, m.bias, 1, 1, 1, 1, False))
    sparse = tigon.nn.MultiTokenAttention(4, 2, 3, padding=1, bias=False, sparse=True, device=device)
    assert sparse.bias is None
    assert_close(sparse(scores), reference(scores, sparse.weight.detach(), None, 1, 1, 1, 1, True), name="sparse")


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    scores = torch.randn(2, 4, 40, 40, device=device, requires_grad=True)
    weight = torch.randn(4, 4, 3, 3, device=device, requires_grad=True)

    def f(s, w):
        return tigon.ops.multi_token_attention(s * 1.5, w, None, 1, 1) + tigon.ops.softmax(s, causal=True)

    eager = f(scores, weight)
    g_eager = torch.autograd.grad(eager.pow(2).sum(), [scores, weight])
    compiled = torch.compile(f, fullgraph=True)(scores, weight)
    g_compiled = torch.autograd.grad(compiled.pow(2).sum(), [scores, weight])
    torch.testing.assert_close(compiled, eager)
    for a, b in zip(g_compiled, g_eager, strict=True):
        torch.testing.assert_close(a, b)


@needs_cuda
def test_cuda_graph_replay_equals_eager():
    """Forward and backward captured once, replayed on fresh scores: what eager gives for them (cuDNN's convolution
    algorithms may sum in another order, so fp32's tolerance, not bits)."""
    weight = (torch.randn(8, 1, 3, 3, device="cuda") * 0.3).requires_grad_()
    static = torch.randn(2, 8, 64, 64, device="cuda", requires_grad=True)
    dy = torch.randn(2, 8, 64, 64, device="cuda")

    def step(s):
        out = tigon.ops.multi_token_attention(s, weight, None, 1, 1, 1, 8)
        return (out, *torch.autograd.grad(out, (s, weight), dy))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture
        step(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step(static)
    for _ in range(2):
        fresh = torch.randn_like(static)
        with torch.no_grad():
            static.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        for name, a, b in zip(("out", "dscores", "dweight"), captured, step(fresh.requires_grad_()), strict=True):
            assert_close(a, b.double(), name=name)


def test_bad_input_names_the_argument():
    s, w = torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3)
    mta = tigon.ops.multi_token_attention
    cases = [
        (lambda: mta(s[..., :5], w), ValueError, "'scores'"),
        (lambda: mta(s[0], w), ValueError, "'scores'"),
        (lambda: mta(s.long(), w), TypeError, "'scores'"),
        (lambda: mta(s, w[:, :2]), ValueError, "'weight'"),
        (lambda: mta(s, w.double()), ValueError, "'weight'"),
        (lambda: mta(s, w, torch.zeros(3)), ValueError, "'bias'"),
        (lambda: mta(s, w, groups=3), ValueError, "'groups'"),
        (lambda: mta(s, w, sparse=1), TypeError, "'sparse'"),
        (lambda: mta("s", w), TypeError, "'scores'"),
        (lambda: tigon.ops.softmax(s[..., :5], causal=True), ValueError, "'x'"),
        (lambda: tigon.ops.sparsemax(s, 2, causal=True), ValueError, "dim"),
        (lambda: tigon.ops.softmax(s, causal="yes"), TypeError, "'causal'"),
    ]
    for call, err, match in cases:
        with pytest.raises(err, match=match):
            call()
    with pytest.raises(ValueError, match="groups"):
        tigon.nn.MultiTokenAttention(4, 6, 3, groups=4)
