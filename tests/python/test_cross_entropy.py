"""tigon.ops.cross_entropy and tigon.nn.cross_entropy.CrossEntropyLoss against a float64 torch reference
(F.cross_entropy plus the z-loss, soft-capping and accuracy written out): loss, z-loss, accuracy and the logits'
gradient for every option and dtype, odd and strided shapes, in place, torch.compile, CUDA graphs, bad input."""

import importlib

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICES, needs_cuda
from tigon.nn.cross_entropy import CrossEntropyLoss
from tigon.ops.cross_entropy import cross_entropy
from tolerances import assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def token_scales(x, target, ignore_index, use_token_scaling):
    """Each row's detached probability of its target under x (1 without token scaling, 0 where ignored)."""
    keep = target.long() != ignore_index
    if not use_token_scaling:
        return torch.ones_like(keep, dtype=x.dtype)
    p = torch.softmax(x.detach(), -1).gather(1, target.long().clamp(min=0)[:, None])[:, 0]
    return torch.where(keep, p, torch.zeros_like(p))


def scaled_ce(x, target, weight, ignore_index, label_smoothing, reduction, s):
    """F.cross_entropy with each row's term times s (s = 1: F.cross_entropy itself)."""
    opts = dict(weight=weight, ignore_index=ignore_index, label_smoothing=label_smoothing)
    if bool((s == 1).all()):
        return F.cross_entropy(x, target.long(), reduction=reduction, **opts)
    rows = F.cross_entropy(x, target.long(), reduction="none", **opts) * s
    keep = target.long() != ignore_index
    if reduction == "none":
        return rows
    if reduction == "sum":
        return rows.sum()
    wt = weight[target.long().clamp(min=0)] if weight is not None else torch.ones_like(rows)
    return rows.sum() / torch.where(keep, wt, torch.zeros_like(wt)).sum()


def predicted_reference(logits, target, ignore_index=-100):
    """The argmax of each row (first of equal maxima), -1 where ignored."""
    arg = logits.detach().double().argmax(-1)
    return torch.where(target.long() != ignore_index, arg, torch.full_like(arg, -1))


def reference(
    logits,
    target,
    weight=None,
    ignore_index=-100,
    label_smoothing=0.0,
    lse_square_scale=0.0,
    softcap=None,
    reduction="mean",
    use_token_scaling=False,
):
    """(loss, z_loss, accuracy, x64) in float64; x64 is the leaf to take the gradient against."""
    x64 = logits.detach().double().requires_grad_(True)
    x = softcap * torch.tanh(x64 / softcap) if softcap else x64
    w = None if weight is None else weight.double()
    s = token_scales(x, target, ignore_index, use_token_scaling)
    ce = scaled_ce(x, target, w, ignore_index, label_smoothing, reduction, s)
    keep = target.long() != ignore_index
    lse = torch.logsumexp(x, dim=-1)
    z_rows = torch.where(keep, s * lse_square_scale * lse * lse, torch.zeros_like(lse))
    correct = ((logits.detach().double().argmax(-1) == target.long()) & keep).double()
    count = keep.sum().double()
    if reduction == "none":
        z, acc = z_rows, correct
    else:
        z = z_rows.sum() / count if reduction == "mean" else z_rows.sum()
        acc = correct.sum() / count
    return ce + z, z.detach(), acc, x64


def make_inputs(n, v, dtype, device, ignored=0, row_pad=0, target_dtype=torch.int64, scale=3.0):
    x = (torch.randn(n, v + row_pad, device=device) * scale).to(dtype)
    if row_pad:
        x = x[:, :v]
    t = torch.randint(0, v, (n,), device=device)
    if ignored:
        t[torch.randperm(n, device=device)[:ignored]] = -100
    return x.requires_grad_(True), t.to(target_dtype)


def check(x, t, in_place=False, **opts):
    """Runs tigon and the reference on x, t; compares every output and the gradient (for a random grad_output)."""
    x_ref = x.detach().clone()  # in_place overwrites x
    x_in = x.detach().clone().requires_grad_(True) * 1 if in_place else x  # in_place takes intermediates
    loss, z, acc, pred = cross_entropy(
        x_in, t, in_place=in_place, return_z_loss=True, return_token_accuracy=True, return_predicted_tokens=True, **opts
    )
    ref, z_ref, acc_ref, x64 = reference(x_ref, t, **opts)
    assert pred.dtype == torch.int64
    assert torch.equal(pred, predicted_reference(x_ref, t, opts.get("ignore_index", -100))), "predicted tokens"
    tol = x.dtype  # the logits' precision bounds everything computed from them
    assert loss.dtype == torch.float32 and loss.shape == ref.shape
    if ref.isnan().all():
        assert loss.isnan().all()
    else:
        assert_close(loss, ref, tol, name="loss")
        assert_close(z, z_ref, tol, name="z_loss")
        assert_close(acc, acc_ref, torch.float32, name="accuracy")
    dy = torch.rand_like(ref) + 0.5
    (dx,) = torch.autograd.grad(loss, x_in, dy.float())
    (dx_ref,) = torch.autograd.grad(ref, x64, dy)
    assert dx.dtype == x.dtype
    if not dx_ref.isnan().any():
        assert_close(dx, dx_ref, name="dlogits")
    return loss, dx


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    "opts",
    [
        {},
        dict(label_smoothing=0.1),
        dict(weight=True),
        dict(weight=True, label_smoothing=0.2),
        dict(lse_square_scale=1e-3),
        dict(softcap=2.5),
        dict(ignored=3),
        dict(weight=True, label_smoothing=0.1, lse_square_scale=1e-4, softcap=5.0, ignored=2),
    ],
    ids=lambda o: "-".join(o) or "plain",
)
@pytest.mark.parametrize("in_place", [False, True])
def test_matches_float64_reference(device, dtype, reduction, opts, in_place):
    opts = dict(opts)
    x, t = make_inputs(9, 257, dtype, device, ignored=opts.pop("ignored", 0))
    if opts.pop("weight", False):
        opts["weight"] = torch.rand(257, device=device) + 0.5
    check(x, t, in_place=in_place, reduction=reduction, **opts)


# use_token_scaling: each token's loss (z-loss included) times its detached target probability; every option, each
# reduction, in place or not. The predicted tokens and the accuracy are checked by check() on every call.
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    "opts",
    [
        {},
        dict(weight=True, label_smoothing=0.1),
        dict(lse_square_scale=1e-3, softcap=2.5, ignored=3),
    ],
    ids=lambda o: "-".join(o) or "plain",
)
@pytest.mark.parametrize("in_place", [False, True])
def test_token_scaling_matches_float64_reference(device, dtype, reduction, opts, in_place):
    opts = dict(opts)
    x, t = make_inputs(11, 333, dtype, device, ignored=opts.pop("ignored", 0), scale=2.0)
    x.detach()[:, 5] += 6.0  # some targets likely, so the scales spread over (0, 1)
    t[::3] = 5
    if opts.pop("weight", False):
        opts["weight"] = torch.rand(333, device=device) + 0.5
    check(x, t, in_place=in_place, reduction=reduction, use_token_scaling=True, **opts)


@pytest.mark.parametrize("device", DEVICES)
def test_extras_come_only_when_asked_in_order(device):
    x, t = make_inputs(6, 50, torch.float32, device, ignored=2)
    assert isinstance(cross_entropy(x, t), torch.Tensor)
    loss, pred = cross_entropy(x, t, return_predicted_tokens=True)
    assert pred.shape == (6,) and pred.dtype == torch.int64 and (pred == -1).sum() == 2
    loss2, acc, pred2 = cross_entropy(x, t, reduction="none", return_token_accuracy=True, return_predicted_tokens=True)
    assert acc.shape == (6,) and torch.equal(pred, pred2)
    assert torch.equal(acc, ((pred2 == t) & (t != -100)).float())
    module = CrossEntropyLoss(
        return_z_loss=True,
        return_token_accuracy=True,
        return_predicted_tokens=True,
        use_token_scaling=True,
        in_place=False,
    )
    out = module(x, t)
    assert len(out) == 4 and torch.equal(out[3], pred)
    assert_close(out[0], cross_entropy(x, t, use_token_scaling=True).double(), name="module loss")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,v,pad", [(3, 1001, 0), (4, 32001, 0), (1, 1, 0), (5, 96, 8), (6, 515, 3), (2, 40000, 16)])
def test_odd_and_strided_shapes(device, dtype, n, v, pad):
    x, t = make_inputs(n, v, dtype, device, row_pad=pad)
    assert pad == 0 or not x.is_contiguous()
    check(x, t, label_smoothing=0.05)
    check(x, t, in_place=True, reduction="none")


# The CUDA row kernel variants (the default is "cluster"); the selector is a test hook of the library.
KERNELS = ["cluster", "classic"]


@pytest.fixture
def row_kernel():
    """Selects a cross entropy row kernel for one test, then the library's plan again. The selector is in CUDA builds
    only: it is looked up when a test selects a kernel."""
    import ctypes

    from tigon import _lib

    selects = []

    def choose(name):
        selects.append(_lib.declare("tigon_testing_cross_entropy_kernel", [ctypes.c_char_p]))
        _lib.check(selects[0](name.encode()))

    yield choose
    if selects:
        _lib.check(selects[0](None))


@pytest.mark.parametrize(
    "device,kernel", [("cpu", None)] + [pytest.param("cuda", k, marks=needs_cuda) for k in KERNELS]
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_logits(device, kernel, dtype, row_kernel):
    """-inf logits (a masked vocabulary; never a target): zero probability and gradient there, the loss and the other
    gradients as torch's; rows whose first columns are all -inf (the running maximum starts at -inf) included."""
    if kernel:
        row_kernel(kernel)
    x, t = make_inputs(6, 4099, dtype, device)  # 4099: whole 16-byte vectors and a tail
    x = x.detach()
    x[:, ::7] = float("-inf")
    x[2, :3000] = float("-inf")
    x[4, 2000:] = float("-inf")
    for r in range(6):  # a target that is not masked
        t[r] = int(torch.nonzero(torch.isfinite(x[r]))[r].item())
    x.requires_grad_(True)
    loss, dx = check(x, t, lse_square_scale=1e-4)
    assert torch.isfinite(loss).all()
    assert (dx[~torch.isfinite(x.detach())] == 0).all()
    # With label smoothing a masked class is a target of weight eps / V: torch's loss is inf there, its gradient finite.
    loss, dx = check(x, t, label_smoothing=0.1, reduction="none")
    assert torch.isinf(loss).all() and torch.isfinite(dx).all()


@pytest.mark.parametrize("device", DEVICES)
def test_int32_targets_and_custom_ignore_index(device):
    x, t = make_inputs(8, 100, torch.float32, device, target_dtype=torch.int32)
    t[2] = 7  # ignore_index 7 also happens to be a valid class
    check(x, t, ignore_index=7, label_smoothing=0.1, weight=torch.rand(100, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction,expected", [("mean", "nan"), ("sum", 0.0), ("none", 0.0)])
def test_every_token_ignored(device, reduction, expected):
    # torch gives NaN for the mean (0 / 0) and 0 for the others; the gradient is zero either way.
    x, _ = make_inputs(4, 50, torch.float32, device)
    t = torch.full((4,), -100, device=device)
    loss, acc = cross_entropy(x, t, reduction=reduction, return_token_accuracy=True)
    ref = F.cross_entropy(x.detach().double(), t, reduction=reduction)
    assert torch.equal(loss.isnan(), ref.isnan())
    if expected == "nan":
        assert loss.isnan() and acc.isnan()
    else:
        assert (loss == 0).all()
    (dx,) = torch.autograd.grad(loss.sum(), x)
    assert torch.equal(dx, torch.zeros_like(dx))


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_writes_the_gradient_over_the_logits(device):
    x, t = make_inputs(16, 384, torch.bfloat16, device)
    leaf = x.detach().clone().requires_grad_(True)
    logits = leaf * 1  # an intermediate, as the lm_head's output is in training
    ptr = logits.data_ptr()
    loss = cross_entropy(logits, t, in_place=True)
    (dx,) = torch.autograd.grad(loss, logits)
    assert dx.data_ptr() == ptr  # no [N, V] buffer besides the logits
    (dx_ref,) = torch.autograd.grad(cross_entropy(x, t), x)
    assert torch.equal(dx, dx_ref)


@pytest.mark.parametrize("device", DEVICES)
def test_no_gradient_when_logits_do_not_require_it(device):
    x, t = make_inputs(4, 64, torch.float32, device)
    x = x.detach()
    before = x.clone()
    loss = cross_entropy(x, t, in_place=True)
    assert not loss.requires_grad and torch.equal(x, before)  # nothing written over the logits
    with torch.no_grad():
        cross_entropy(x.requires_grad_(True), t, in_place=True)
    assert torch.equal(x, before)


@pytest.mark.parametrize("device", DEVICES)
def test_module_is_a_drop_in_for_torch(device):
    w = torch.rand(77, device=device) + 0.1
    ours = CrossEntropyLoss(weight=w, label_smoothing=0.1, in_place=False)
    theirs = torch.nn.CrossEntropyLoss(weight=w.double(), label_smoothing=0.1)
    assert set(ours.state_dict()) == set(theirs.state_dict())
    x, t = make_inputs(10, 77, torch.float32, device, ignored=2)
    assert_close(ours(x, t), theirs(x.double(), t), name="module loss")
    ours_ip = CrossEntropyLoss(reduction="sum", in_place=True)
    logits = x * 1
    (dx,) = torch.autograd.grad(ours_ip(logits, t), logits)
    (dx_ref,) = torch.autograd.grad(F.cross_entropy(x.double(), t, reduction="sum"), x)
    assert_close(dx, dx_ref.double(), name="module dlogits")


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic(device):
    x, t = make_inputs(64, 5000, torch.bfloat16, device, ignored=5)

    def run():
        loss = cross_entropy(x, t, label_smoothing=0.1, lse_square_scale=1e-4)
        return loss, torch.autograd.grad(loss * 0.75, x)[0]

    (l1, g1), (l2, g2) = run(), run()  # fixed-order reductions: the same bits every time
    assert torch.equal(l1, l2) and torch.equal(g1, g2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "predicted_scaled"])
def test_torch_compile_fullgraph_equals_eager(device, in_place, extras):
    def f(h, t):
        logits = h * 1.5
        loss, z, *pred = cross_entropy(
            logits,
            t,
            label_smoothing=0.1,
            lse_square_scale=1e-4,
            in_place=in_place,
            return_z_loss=True,
            return_predicted_tokens=extras,
            use_token_scaling=extras,
        )
        return loss * 2.0, z, *pred

    x, t = make_inputs(32, 300, torch.bfloat16, device, ignored=3)
    eager = f(x, t)
    (dx_eager,) = torch.autograd.grad(eager[0], x)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")(x, t)
    (dx_compiled,) = torch.autograd.grad(compiled[0], x)
    assert all(torch.equal(e, c) for e, c in zip(eager, compiled)) and len(eager) == len(compiled) == 2 + extras
    assert torch.equal(dx_eager, dx_compiled)


@needs_cuda
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cuda_graph_replay_equals_eager(reduction):
    x, t = make_inputs(64, 4096, torch.bfloat16, "cuda", ignored=4)
    static_x, static_t = x.detach().clone().requires_grad_(True), t.clone()

    def step(a, b):
        loss = cross_entropy(a * 1, b, label_smoothing=0.1, reduction=reduction, in_place=True)
        return loss, torch.autograd.grad(loss.sum() * 0.5, a)[0]  # grad_output 0.5: the scale kernel does work

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step(static_x, static_t)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(static_x, static_t)
    for k in range(2):  # fresh inputs each replay, a different set of ignored rows
        new_x, new_t = make_inputs(64, 4096, torch.bfloat16, "cuda", ignored=k * 10)
        with torch.no_grad():
            static_x.copy_(new_x)
        static_t.copy_(new_t)
        g.replay()
        torch.cuda.synchronize()
        ref = step(new_x.detach().requires_grad_(True), new_t)
        for a, b in zip(out, ref):
            assert torch.equal(a, b)


@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_large_vocab(dtype):
    x, t = make_inputs(8, 262144, dtype, "cuda", ignored=1, row_pad=8)
    check(x, t, label_smoothing=0.1, softcap=30.0)


@needs_cuda
def test_more_than_2_31_elements():
    n, v = (2**31) // 128256 + 4, 128256
    x = torch.randn(n, v, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    t = torch.randint(0, v, (n,), device="cuda")
    loss = cross_entropy(x, t, reduction="none")
    (dx,) = torch.autograd.grad(loss.sum(), x)
    tail = slice(n - 3, n)
    ref = F.cross_entropy(x[tail].detach().double(), t[tail], reduction="none")
    assert_close(loss[tail], ref, torch.bfloat16, name="loss tail")
    x64 = x[tail].detach().double().requires_grad_(True)
    (dx_ref,) = torch.autograd.grad(F.cross_entropy(x64, t[tail], reduction="sum"), x64)
    assert_close(dx[tail], dx_ref, name="dlogits tail")


@needs_cuda
def test_out_of_range_target_on_gpu_is_nan():
    # Checking would synchronise, so the kernel marks the row instead: NaN loss and gradient row, NaN mean.
    x, t = make_inputs(4, 100, torch.float32, "cuda")
    t[1] = 100
    loss_rows = cross_entropy(x, t, reduction="none")
    assert loss_rows[1].isnan() and not loss_rows[[0, 2, 3]].isnan().any()
    (dx,) = torch.autograd.grad(loss_rows.sum(), x)
    assert dx[1].isnan().all() and not dx[[0, 2, 3]].isnan().any()
    t[1] = -5
    assert cross_entropy(x.detach(), t).isnan()


# ---- bad input: a clear error naming the argument, never a crash ------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        (dict(logits=torch.ones(4, 8, dtype=torch.int64)), TypeError, "'logits'"),
        (dict(logits=torch.randn(2, 4, 8)), ValueError, "'logits'"),
        (dict(logits=torch.randn(4, 0)), ValueError, "'logits'"),
        (dict(logits=torch.randn(8, 4).t()), ValueError, "'logits'"),
        (dict(target=torch.zeros(4)), TypeError, "'target'"),
        (dict(target=torch.zeros(5, dtype=torch.int64)), ValueError, "'target'"),
        (dict(target=[0, 1, 2, 3]), TypeError, "'target'"),
        (dict(weight=torch.ones(7)), ValueError, "'weight'"),
        (dict(weight=torch.ones(8, dtype=torch.int64)), TypeError, "'weight'"),
        (dict(ignore_index=1.5), TypeError, "'ignore_index'"),
        (dict(label_smoothing=1.5), ValueError, "'label_smoothing'"),
        (dict(lse_square_scale=-1.0), ValueError, "'lse_square_scale'"),
        (dict(softcap=0.0), ValueError, "'softcap'"),
        (dict(reduction="avg"), ValueError, "'reduction'"),
        (dict(target=torch.tensor([0, 1, 8, 3])), ValueError, "'target'"),  # out of range: caught on the CPU
        (dict(target=torch.tensor([0, -1, 2, 3])), ValueError, "'target'"),
    ],
)
def test_bad_input_names_the_argument(kwargs, exc, arg):
    args = dict(logits=torch.randn(4, 8), target=torch.tensor([0, 1, 2, 3]))
    args.update(kwargs)
    with pytest.raises(exc, match=arg):
        cross_entropy(**args)


def test_c_library_errors_surface_with_the_message():
    import tigon
    from tigon import _lib

    mod = importlib.import_module("tigon.ops.cross_entropy")  # the module: tigon.ops.cross_entropy is the function
    x, t, loss = torch.randn(4, 8), torch.zeros(4, dtype=torch.int64), torch.empty(3)  # NONE needs 4 losses
    with pytest.raises(tigon.TigonArgumentError, match="tigon_cross_entropy_fwd: argument 'loss'"):
        _lib.check(
            mod._fwd(
                _lib.tensor_arg(x),
                _lib.tensor_arg(t),
                None,
                _lib.tensor_arg(loss),
                None,
                None,
                None,
                None,
                mod.CrossEntropyParams(-100, 0.0, 0.0, 0.0, 0),
                None,
                0,
                None,
            )
        )
    with pytest.raises(tigon.TigonArgumentError, match="tigon_cross_entropy_fwd: argument 'predicted'"):
        _lib.check(
            mod._fwd(
                _lib.tensor_arg(x),
                _lib.tensor_arg(t),
                None,
                _lib.tensor_arg(torch.empty(())),
                None,
                None,
                _lib.tensor_arg(torch.empty(4, dtype=torch.int32)),
                None,
                mod.CrossEntropyParams(-100, 0.0, 0.0, 0.0, 1),
                None,
                0,
                None,
            )
        )
    with pytest.raises(tigon.TigonArgumentError, match="argument 'grad_output'"):
        _lib.check(mod._bwd(_lib.tensor_arg(x), _lib.tensor_arg(torch.ones(3)), None))


@needs_cuda
def test_device_mismatch_names_the_argument():
    with pytest.raises(ValueError, match="'target'"):
        cross_entropy(torch.randn(4, 8, device="cuda"), torch.zeros(4, dtype=torch.int64))
