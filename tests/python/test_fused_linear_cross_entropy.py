"""tigon.ops.fused_linear_cross_entropy and tigon.nn.FusedLinearCrossEntropyLoss against a float64 torch reference
(x @ W.T + b, then F.cross_entropy plus the z-loss, soft-capping and accuracy written out): the loss, z-loss,
accuracy and the gradients of x, W and b for every option, reduction and dtype, one chunk and many, torch.compile,
CUDA graphs, bad input."""

import importlib

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICES, needs_cuda
from tigon.nn.fused_linear_cross_entropy import FusedLinearCrossEntropyLoss
from tigon.ops.cross_entropy import cross_entropy
from tigon.ops.fused_linear_cross_entropy import chunk_plan, fused_linear_cross_entropy
from tolerances import TOL, assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def reference(
    x,
    w,
    t,
    bias=None,
    ce_weight=None,
    ignore_index=-100,
    label_smoothing=0.0,
    lse_square_scale=0.0,
    softcap=None,
    reduction="mean",
    use_token_scaling=False,
):
    """(loss, z_loss, accuracy, leaves) in float64; leaves = (x, w[, b]) to take the gradients against."""
    from test_cross_entropy import scaled_ce, token_scales

    leaves = tuple(a.detach().double().requires_grad_(True) for a in (x, w) + ((bias,) if bias is not None else ()))
    logits = leaves[0].reshape(-1, x.shape[-1]) @ leaves[1].T
    if bias is not None:
        logits = logits + leaves[2]
    t = t.reshape(-1).long()
    z = softcap * torch.tanh(logits / softcap) if softcap else logits
    s = token_scales(z, t, ignore_index, use_token_scaling)
    ce = scaled_ce(z, t, None if ce_weight is None else ce_weight.double(), ignore_index, label_smoothing, reduction, s)
    keep = t != ignore_index
    lse = torch.logsumexp(z, dim=-1)
    z_rows = torch.where(keep, s * lse_square_scale * lse * lse, torch.zeros_like(lse))
    # tigon's argmax runs on the logits in x's dtype, as the GEMM stored them
    correct = ((logits.detach().to(x.dtype).double().argmax(-1) == t) & keep).double()
    count = keep.sum().double()
    if reduction == "none":
        zl, acc = z_rows, correct
    else:
        zl = z_rows.sum() / count if reduction == "mean" else z_rows.sum()
        acc = correct.sum() / count
    loss = ce + zl
    if reduction == "none":
        loss, zl, acc = (v.reshape(x.shape[:-1]) for v in (loss, zl, acc))
    return loss, zl.detach(), acc, leaves


def make_inputs(n, h, v, dtype, device, ignored=0, bias=False, x_pad=0):
    """x [n, h] (row stride h + x_pad), w [v, h] scaled so that the logits spread over a few units, target."""
    x = torch.randn(n, h + x_pad, device=device).to(dtype)[:, :h]
    w = (torch.randn(v, h, device=device) * (2.0 / h**0.5)).to(dtype)
    t = torch.randint(0, v, (n,), device=device)
    if ignored:
        t[torch.randperm(n, device=device)[:ignored]] = -100
    b = (torch.randn(v, device=device) * 0.5).to(dtype).requires_grad_(True) if bias else None
    return x.requires_grad_(True), w.requires_grad_(True), t, b


def check(x, w, t, b=None, chunk_rows=None, memory_budget=None, dw_accumulation="fp32", **opts):
    """Runs tigon and the reference; compares the loss, z-loss, accuracy and every gradient (random grad_output)."""
    loss, z, acc, pred = fused_linear_cross_entropy(
        x,
        w,
        t,
        b,
        return_z_loss=True,
        return_token_accuracy=True,
        return_predicted_tokens=True,
        chunk_rows=chunk_rows,
        memory_budget=memory_budget,
        dw_accumulation=dw_accumulation,
        **opts,
    )
    ref, z_ref, acc_ref, leaves = reference(x, w, t, b, **opts)
    check_predicted(pred, x, w, t, b, opts.get("ignore_index", -100))
    assert loss.dtype == torch.float32 and loss.shape == ref.shape
    if ref.isnan().all():
        assert loss.isnan().all()
    else:
        assert_close(loss, ref, x.dtype, name="loss")
        assert_close(z, z_ref, x.dtype, name="z_loss")
        assert_close(acc, acc_ref, torch.float32, name="accuracy")
    dy = torch.rand_like(ref) + 0.5
    mine = (x, w) + ((b,) if b is not None else ())
    grads = torch.autograd.grad(loss, mine, dy.float())
    ref_grads = torch.autograd.grad(ref, leaves, dy)
    for name, leaf, g, r in zip(("dx", "dw", "db"), mine, grads, ref_grads):
        assert g.dtype == leaf.dtype and g.shape == leaf.shape, name
        assert_close(g, r, name=name)
    return loss, grads


def check_predicted(pred, x, w, t, b, ignore_index):
    """pred is -1 exactly where ignored, else the argmax of the logits in x's dtype (on a GPU, the GEMM may round a
    near-tie the other way: then a column whose exact logit is within the dtype's rounding of the maximum)."""
    assert pred.dtype == torch.int64 and pred.shape == t.shape
    logits = x.detach().double().reshape(-1, x.shape[-1]) @ w.detach().double().T
    if b is not None:
        logits = logits + b.detach().double()
    keep = t.reshape(-1) != ignore_index
    p = pred.reshape(-1)
    assert torch.equal(p[~keep], torch.full_like(p[~keep], -1)), "predicted tokens of ignored rows"
    want = logits.to(x.dtype).double().argmax(-1)
    if x.device.type == "cpu":
        assert torch.equal(p[keep], want[keep]), "predicted tokens"
        return
    top = logits.max(-1).values
    slack = 2 * TOL[x.dtype]["rtol"] * top.abs().clamp(min=1)
    assert bool((logits.gather(1, p.clamp(min=0)[:, None])[:, 0] >= top - slack)[keep].all()), "predicted tokens"


OPTS = [
    {},
    dict(label_smoothing=0.1),
    dict(ce_weight=True),
    dict(ce_weight=True, label_smoothing=0.2),
    dict(lse_square_scale=1e-3),
    dict(softcap=2.5),
    dict(ignored=5),
    dict(bias=True),
    dict(bias=True, ce_weight=True, label_smoothing=0.1, lse_square_scale=1e-4, softcap=5.0, ignored=3),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("opts", OPTS, ids=lambda o: "-".join(o) or "plain")
@pytest.mark.parametrize("chunk_rows", [None, 6], ids=["one_chunk", "many_chunks"])
def test_matches_float64_reference(device, dtype, reduction, opts, chunk_rows):
    # the specified size on the GPU; the CPU reference is plain loops, so a smaller one there
    n, h, v = (257, 128, 32003) if device == "cuda" else (37, 64, 1003)
    opts = dict(opts)
    x, w, t, b = make_inputs(n, h, v, dtype, device, ignored=opts.pop("ignored", 0), bias=opts.pop("bias", False))
    if opts.pop("ce_weight", False):
        opts["ce_weight"] = torch.rand(v, device=device) + 0.5
    check(x, w, t, b, chunk_rows=chunk_rows, reduction=reduction, **opts)


# The specified shapes: H = 128, V = 32003 (odd: unaligned logits rows), BT = 1, 3, 257. The CPU reference is plain
# loops, so the CPU runs the smallest cases and one at 257 tokens.
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "n,dtype,chunk_rows",
    [
        (1, torch.bfloat16, None),
        (3, torch.float32, 1),
        (3, torch.float16, None),
        pytest.param(257, torch.bfloat16, 64, id="257-bf16-chunks"),
    ],
)
def test_issue_shapes(device, n, dtype, chunk_rows):
    x, w, t, b = make_inputs(n, 128, 32003, dtype, device, ignored=n // 5, bias=True)
    check(x, w, t, b, chunk_rows=chunk_rows, label_smoothing=0.05, lse_square_scale=1e-4)
    check(x, w, t, b, chunk_rows=chunk_rows, reduction="none")


@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("chunk_rows", [None, 50])
def test_issue_shapes_every_dtype_on_gpu(dtype, reduction, chunk_rows):
    x, w, t, b = make_inputs(257, 128, 32003, dtype, "cuda", ignored=20, bias=True, x_pad=8)
    check(
        x,
        w,
        t,
        b,
        chunk_rows=chunk_rows,
        reduction=reduction,
        ce_weight=torch.rand(32003, device="cuda") + 0.5,
        label_smoothing=0.1,
        lse_square_scale=1e-4,
        softcap=30.0,
    )


@needs_cuda
def test_llama_vocab_on_gpu():
    x, w, t, _ = make_inputs(300, 256, 128256, torch.bfloat16, "cuda", ignored=7)
    check(x, w, t, chunk_rows=128)


@pytest.mark.parametrize("device", DEVICES)
def test_one_chunk_and_many_chunks_agree(device):
    x, w, t, b = make_inputs(64, 64, 515, torch.bfloat16, device, ignored=4, bias=True)
    runs = []
    for kw in (dict(), dict(chunk_rows=5), dict(memory_budget=10 * 520 * 2)):  # one chunk, 13, and 7 of 10 tokens
        loss = fused_linear_cross_entropy(x, w, t, b, label_smoothing=0.1, **kw)
        runs.append((loss,) + torch.autograd.grad(loss * 0.5, (x, w, b)))
    for other in runs[1:]:
        for name, a, c in zip(("loss", "dx", "dw", "db"), runs[0], other):
            if device == "cpu":  # the reference is chunk-free: the same bits
                assert torch.equal(a, c), name
            else:  # GEMMs of other sizes may round a logit the other way: the inputs' precision bounds the rest
                assert_close(a, c.double(), torch.bfloat16, name=name)


@pytest.mark.parametrize("device", DEVICES)
def test_chunk_plan_follows_the_budget_and_the_tokens(device):
    x = torch.empty(257, 128, dtype=torch.bfloat16, device=device)
    w = torch.empty(32003, 128, dtype=torch.bfloat16, device=device)
    row = 32008 * 2  # V rounded up to 8 elements, bf16
    assert chunk_plan(x, w)[1] == 257  # default budget: one chunk
    assert chunk_plan(x, w, memory_budget=50 * row)[1] == 43  # at most 50 rows: 6 chunks of 43 (the last 42)
    assert chunk_plan(x, w, memory_budget=1)[1] == 1  # a row at a time, never none
    assert chunk_plan(x, w, chunk_rows=100)[1] == 86  # 3 chunks, evened out
    nbytes, rows = chunk_plan(x, w, chunk_rows=100)
    assert (nbytes >= rows * row) if device == "cuda" else nbytes == 0


@pytest.mark.parametrize("device", DEVICES)
def test_weight_gradient_buffer(device):
    # One chunk: dW written in bf16 by its GEMM. Several: fp32 accumulation, narrowed in place in that buffer.
    x, w, t, _ = make_inputs(40, 64, 300, torch.bfloat16, device)
    for chunk_rows, storage in ((None, 300 * 64 * 2), (8, 300 * 64 * 4)):
        (dw,) = torch.autograd.grad(fused_linear_cross_entropy(x, w, t, chunk_rows=chunk_rows), w)
        assert dw.dtype == torch.bfloat16 and dw.is_contiguous() and dw.untyped_storage().nbytes() == storage
    (dw,) = torch.autograd.grad(fused_linear_cross_entropy(x, w, t, chunk_rows=8, dw_accumulation="weight"), w)
    assert dw.untyped_storage().nbytes() == 300 * 64 * 2  # rounded per chunk, no fp32 buffer
    ref, _, _, leaves = reference(x, w, t)
    assert_close(dw, torch.autograd.grad(ref, leaves[1])[0], name="dw accumulated in bf16")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", ["x", "weight", "bias", "none"])
def test_gradients_only_where_required(device, which):
    x, w, t, b = make_inputs(9, 32, 100, torch.float32, device, bias=True)
    for name, leaf in (("x", x), ("weight", w), ("bias", b)):
        leaf.requires_grad_(name == which)
    loss = fused_linear_cross_entropy(x, w, t, b, reduction="sum")
    ref, _, _, leaves = reference(x, w, t, b, reduction="sum")
    assert_close(loss, ref, name="loss")
    if which == "none":
        assert not loss.requires_grad
        return
    leaf = {"x": x, "weight": w, "bias": b}[which]
    (g,) = torch.autograd.grad(loss * 1.5, leaf)
    (r,) = torch.autograd.grad(ref * 1.5, leaves[("x", "weight", "bias").index(which)])
    assert_close(g, r, name=f"d{which}")


@pytest.mark.parametrize("device", DEVICES)
def test_leading_dimensions_and_expanded_grad_output(device):
    x, w, t, _ = make_inputs(24, 32, 77, torch.float32, device, ignored=2)
    x3 = x.detach().view(4, 6, 32).requires_grad_(True)
    loss = fused_linear_cross_entropy(x3, w, t.view(4, 6), reduction="none")
    assert loss.shape == (4, 6)
    dx, dw = torch.autograd.grad(loss.sum(), (x3, w))  # a stride-0 grad_output
    ref, _, _, leaves = reference(x3, w, t.view(4, 6), reduction="none")
    rdx, rdw = torch.autograd.grad(ref.sum(), leaves)
    assert dx.shape == x3.shape
    assert_close(dx, rdx, name="dx")
    assert_close(dw, rdw, name="dw")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction,expected", [("mean", "nan"), ("sum", 0.0), ("none", 0.0)])
def test_every_token_ignored(device, reduction, expected):
    x, w, t, _ = make_inputs(4, 16, 50, torch.float32, device)
    t = torch.full_like(t, -100)
    loss = fused_linear_cross_entropy(x, w, t, reduction=reduction, chunk_rows=3)
    assert loss.isnan().all() if expected == "nan" else (loss == 0).all()
    dx, dw = torch.autograd.grad(loss.sum(), (x, w))
    assert torch.equal(dx, torch.zeros_like(dx)) and torch.equal(dw, torch.zeros_like(dw))


@pytest.mark.parametrize("device", DEVICES)
def test_same_as_linear_then_cross_entropy_op(device):
    # The fused op is x @ W.T in x's dtype, then tigon's cross entropy on those logits.
    x, w, t, _ = make_inputs(20, 64, 333, torch.bfloat16, device, ignored=2)
    fused = fused_linear_cross_entropy(x, w, t, label_smoothing=0.1, reduction="none", chunk_rows=7)
    plain = cross_entropy((x @ w.T).detach(), t, label_smoothing=0.1, reduction="none")
    assert_close(fused, plain.double(), x.dtype, name="loss")  # torch's GEMM may round a logit the other way


@pytest.mark.parametrize("device", DEVICES)
def test_module_matches_the_function(device):
    cw = torch.rand(90, device=device) + 0.5
    mod = FusedLinearCrossEntropyLoss(ce_weight=cw, label_smoothing=0.1, return_z_loss=True, lse_square_scale=1e-3)
    assert set(mod.state_dict()) == {"ce_weight"}
    x, w, t, b = make_inputs(11, 32, 90, torch.float32, device, ignored=1, bias=True)
    loss, z = mod(w, x, t, b)  # Liger's argument order: (lin_weight, _input, target, bias)
    ref, z_ref, _, _ = reference(x, w, t, b, ce_weight=cw, label_smoothing=0.1, lse_square_scale=1e-3)
    assert_close(loss, ref, name="module loss")
    assert_close(z, z_ref, name="module z_loss")


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic(device):
    x, w, t, b = make_inputs(96, 64, 2000, torch.bfloat16, device, ignored=5, bias=True)

    def run():
        loss = fused_linear_cross_entropy(x, w, t, b, label_smoothing=0.1, chunk_rows=40)
        return (loss,) + torch.autograd.grad(loss * 0.75, (x, w, b))

    for a, c in zip(run(), run()):
        assert torch.equal(a, c)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "predicted_scaled"])
def test_torch_compile_fullgraph_equals_eager(device, reduction, extras):
    def f(h, w, t):
        loss, z, *pred = fused_linear_cross_entropy(
            h * 1.5,
            w,
            t,
            label_smoothing=0.1,
            lse_square_scale=1e-4,
            reduction=reduction,
            chunk_rows=16,
            return_z_loss=True,
            return_predicted_tokens=extras,
            use_token_scaling=extras,
        )
        return loss.sum() * 2.0, z, *pred

    x, w, t, _ = make_inputs(40, 64, 300, torch.bfloat16, device, ignored=3)
    eager = f(x, w, t)
    g_eager = torch.autograd.grad(eager[0], (x, w))
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")(x, w, t)
    g_compiled = torch.autograd.grad(compiled[0], (x, w))
    if reduction == "none":  # the test's own .sum() of the per-token losses is inductor's, in its own order
        torch.testing.assert_close(compiled[0], eager[0], rtol=1e-6, atol=0)
        assert torch.equal(eager[1], compiled[1])
    else:
        assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])
    assert len(eager) == len(compiled) == 2 + extras and (not extras or torch.equal(eager[2], compiled[2]))
    for a, c in zip(g_eager, g_compiled):
        assert torch.equal(a, c)


@needs_cuda
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cuda_graph_replay_equals_eager(reduction):
    x, w, t, b = make_inputs(200, 128, 5000, torch.bfloat16, "cuda", ignored=4, bias=True)
    sx, sw, sb = (a.detach().clone().requires_grad_(True) for a in (x, w, b))
    st = t.clone()

    def step(a, c, d, e):
        loss = fused_linear_cross_entropy(a, c, e, d, label_smoothing=0.1, reduction=reduction, chunk_rows=64)
        return (loss,) + torch.autograd.grad(loss.sum() * 0.5, (a, c, d))  # grad_output 0.5: the scale does work

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step(sx, sw, sb, st)  # first call outside capture: cuBLASLt handles and algorithm choices are made here
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(sx, sw, sb, st)
    for k in range(2):  # fresh inputs each replay
        nx, nw, nt, nb = make_inputs(200, 128, 5000, torch.bfloat16, "cuda", ignored=k * 10, bias=True)
        with torch.no_grad():
            sx.copy_(nx), sw.copy_(nw), sb.copy_(nb)
        st.copy_(nt)
        g.replay()
        torch.cuda.synchronize()
        ref = step(*(a.detach().requires_grad_(True) for a in (nx, nw, nb)), nt)
        for a, c in zip(out, ref):
            assert torch.equal(a, c)


# ---- bad input: a clear error naming the argument, never a crash ------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        (dict(x=torch.ones(4, 8, dtype=torch.int64)), TypeError, "'x'"),
        (dict(x=torch.randn(8)), ValueError, "'x'"),
        (dict(x=torch.randn(4, 0), weight=torch.randn(5, 0)), ValueError, "'x'"),
        (dict(weight=torch.randn(5, 8, dtype=torch.float64)), TypeError, "'weight'"),
        (dict(weight=torch.randn(5, 8).bfloat16()), TypeError, "'weight'"),
        (dict(weight=torch.randn(5, 7)), ValueError, "'weight'"),
        (dict(weight=torch.randn(5, 8, 1)), ValueError, "'weight'"),
        (dict(target=torch.zeros(4)), TypeError, "'target'"),
        (dict(target=torch.zeros(5, dtype=torch.int64)), ValueError, "'target'"),
        (dict(target=[0, 1, 2, 3]), TypeError, "'target'"),
        (dict(bias=torch.ones(4)), ValueError, "'bias'"),
        (dict(bias=torch.ones(5, dtype=torch.float64)), TypeError, "'bias'"),
        (dict(ce_weight=torch.ones(7)), ValueError, "'ce_weight'"),
        (dict(ce_weight=torch.ones(5, dtype=torch.int64)), TypeError, "'ce_weight'"),
        (dict(ignore_index=1.5), TypeError, "'ignore_index'"),
        (dict(label_smoothing=1.5), ValueError, "'label_smoothing'"),
        (dict(lse_square_scale=-1.0), ValueError, "'lse_square_scale'"),
        (dict(softcap=0.0), ValueError, "'softcap'"),
        (dict(reduction="avg"), ValueError, "'reduction'"),
        (dict(memory_budget=0), ValueError, "'memory_budget'"),
        (dict(chunk_rows=-3), ValueError, "'chunk_rows'"),
        (dict(dw_accumulation="bf16"), ValueError, "'dw_accumulation'"),
        (dict(target=torch.tensor([0, 1, 5, 3])), ValueError, "'target'"),  # out of range: caught on the CPU
    ],
)
def test_bad_input_names_the_argument(kwargs, exc, arg):
    args = dict(x=torch.randn(4, 8), weight=torch.randn(5, 8), target=torch.tensor([0, 1, 2, 3]))
    args.update(kwargs)
    with pytest.raises(exc, match=arg):
        fused_linear_cross_entropy(**args)


def test_c_library_errors_surface_with_the_message():
    import tigon
    from tigon import _lib

    mod = importlib.import_module("tigon.ops.fused_linear_cross_entropy")
    x, w, t = torch.randn(6, 8).bfloat16(), torch.randn(5, 8).bfloat16(), torch.zeros(6, dtype=torch.int64)
    loss, arg = torch.empty(()), _lib.tensor_arg

    def call(dw, chunk_rows=2, narrow=0, loss=loss, db=None):
        p = mod._params(-100, 0.0, 0.0, 0.0, 1, chunk_rows, 0, True, narrow)
        _lib.check(
            mod._fwd(
                arg(x),
                arg(w),
                None,
                arg(t),
                None,
                None,
                arg(loss),
                None,
                None,
                None,
                None,
                arg(dw),
                arg(db),
                p,
                None,
                0,
                None,
            )
        )

    call(torch.empty(5, 8).bfloat16(), chunk_rows=6)  # one chunk: a bf16 dW is one fp32 sum, allowed
    with pytest.raises(tigon.TigonArgumentError, match="tigon_fused_linear_cross_entropy_fwd: argument 'dw'"):
        call(torch.empty(5, 8).bfloat16())  # 3 chunks would round a bf16 dW after each
    with pytest.raises(tigon.TigonArgumentError, match="argument 'dw'"):
        call(torch.empty(5, 8).bfloat16(), chunk_rows=6, narrow=1)  # narrowing needs the fp32 buffer
    with pytest.raises(tigon.TigonArgumentError, match="argument 'loss'"):
        call(None, loss=torch.empty(6))
    with pytest.raises(tigon.TigonArgumentError, match="argument 'db'"):
        call(None, db=torch.empty(5))  # no bias
    with pytest.raises(tigon.TigonArgumentError, match="argument 'grad_output'"):
        _lib.check(mod._bwd(arg(x), None, None, arg(torch.ones(3)), None))


# use_token_scaling: each token's loss times its detached target probability, every reduction and option, one chunk
# and many (the predicted tokens and the accuracy are checked by check() on every call).
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    "opts",
    [{}, dict(bias=True, ce_weight=True, label_smoothing=0.1, lse_square_scale=1e-4, softcap=5.0, ignored=3)],
    ids=["plain", "all"],
)
@pytest.mark.parametrize("chunk_rows", [None, 6], ids=["one_chunk", "many_chunks"])
def test_token_scaling_matches_float64_reference(device, dtype, reduction, opts, chunk_rows):
    n, h, v = (257, 128, 32003) if device == "cuda" else (29, 48, 517)
    opts = dict(opts)
    x, w, t, b = make_inputs(n, h, v, dtype, device, ignored=opts.pop("ignored", 0), bias=opts.pop("bias", False))
    t[::4] = 7  # a class those tokens' x points to (logits ~4): target probabilities near 1 as well as small ones
    w.detach()[7] = x.detach()[::4].mean(0) * (n / h)
    if opts.pop("ce_weight", False):
        opts["ce_weight"] = torch.rand(v, device=device) + 0.5
    check(x, w, t, b, chunk_rows=chunk_rows, reduction=reduction, use_token_scaling=True, **opts)


@pytest.mark.parametrize("device", DEVICES)
def test_module_takes_the_liger_options(device):
    x, w, t, _ = make_inputs(3 * 5, 16, 40, torch.float32, device, ignored=2)
    x3, t3 = x.detach().view(3, 5, 16), t.view(3, 5)
    loss_fn = FusedLinearCrossEntropyLoss(
        return_token_accuracy=True, return_predicted_tokens=True, use_token_scaling=True
    )
    loss, acc, pred = loss_fn(w, x3, t3)
    assert pred.shape == (3, 5) and pred.dtype == torch.int64
    assert_close(acc, ((pred == t3) & (t3 != -100)).sum().double() / (t3 != -100).sum(), name="accuracy")
    ref = reference(x3, w, t3, use_token_scaling=True)[0]
    assert_close(loss, ref, name="loss")
    assert isinstance(fused_linear_cross_entropy(x3, w, t3), torch.Tensor)


# Hidden sizes that are not a multiple of 8: rows that are not 16-byte multiples (cuBLASLt's unaligned GEMMs on a
# GPU), a strided x, a bias, several chunks (a dW narrowed in place whose V x H is not a multiple of 8 either).
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [31, 341, 4097])
@pytest.mark.parametrize("chunk_rows", [None, 4], ids=["one_chunk", "many_chunks"])
def test_hidden_size_not_a_multiple_of_8(device, dtype, h, chunk_rows):
    n, v = (67, 1031) if device == "cuda" else (9, 37)
    x, w, t, b = make_inputs(n, h, v, dtype, device, ignored=2, bias=True, x_pad=3)
    check(x, w, t, b, chunk_rows=chunk_rows, label_smoothing=0.1, lse_square_scale=1e-4)
    check(x, w, t, b, chunk_rows=chunk_rows, reduction="none")


@needs_cuda
def test_device_mismatch_names_the_argument():
    with pytest.raises(ValueError, match="'weight'"):
        fused_linear_cross_entropy(
            torch.randn(4, 8, device="cuda"), torch.randn(5, 8), torch.zeros(4, dtype=torch.int64, device="cuda")
        )


# Under torch.autocast the products run in the autocast dtype, as F.linear's would: fp32 x and weight under
# autocast(bfloat16) give transformers' autocast loss (lm_head, then the loss on the bf16 logits) within bf16 rounding,
# and gradients in the leaves' fp32.
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_autocast_computes_in_the_autocast_dtype(device, reduction):
    n, h, v = (129, 96, 4099) if device == "cuda" else (17, 24, 301)
    x, w, t, b = make_inputs(n, h, v, torch.float32, device, ignored=2, bias=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = fused_linear_cross_entropy(x, w, t, b, reduction=reduction)
        logits = F.linear(x, w, b)
        ref = F.cross_entropy(logits.float(), t, reduction=reduction)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    dy = torch.rand_like(ref) + 0.5
    grads = torch.autograd.grad(loss, (x, w, b), dy)
    ref_grads = torch.autograd.grad(ref, (x, w, b), dy)
    assert_close(loss, ref.double(), torch.bfloat16, name="loss")
    for name, g, r in zip(("dx", "dw", "db"), grads, ref_grads):
        assert g.dtype == torch.float32, name
        assert_close(g, r.double(), torch.bfloat16, name=name)
    # the bf16 products are what was computed: the same bits as bf16 inputs
    with torch.autocast(device, dtype=torch.bfloat16):
        bf = fused_linear_cross_entropy(
            x.detach().bfloat16(), w.detach().bfloat16(), t, b.detach().bfloat16(), reduction=reduction
        )
    assert torch.equal(loss, bf)
