"""tigon.ops.kl_div / jsd / tvd / distill and the tigon.nn distillation modules against a float64 torch reference
written from the formulas (the gradient by autograd of the reference): every divergence, reduction, teacher input,
temperature and ignore_index, in place, odd and strided shapes, 16-bit dtypes, torch.compile, bad input."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICES, needs_cuda
from tigon.nn import JSD, KLDivLoss, TVDLoss
from tigon.ops import distill, jsd, kl_div, tvd
from tolerances import assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
REDUCTIONS = ["batchmean", "sum", "mean", "none"]
DIVERGENCES = [("kl", 0.5), ("jsd", 0.0), ("jsd", 0.3), ("jsd", 1.0), ("tvd", 0.5)]


def xlogy_term(w, a, b):
    """w (a - b), 0 where w is 0."""
    return torch.where(w > 0, w * (a - b), torch.zeros_like(w))


def reference(student, teacher, divergence, beta, temperature, teacher_input, labels, ignore_index, reduction):
    """The loss in float64 from the formulas, and the float64 student leaf to differentiate it against."""
    z = student.detach().double().requires_grad_(True)
    x = torch.log_softmax(z / temperature, -1)
    q = x.exp()
    t = teacher.detach().double()
    if teacher_input == "logits":
        y = torch.log_softmax(t / temperature, -1)
        p = y.exp()
    elif teacher_input == "log_probs":
        y, p = t, t.exp()
    else:
        y, p = t.log(), t
    if divergence == "tvd":
        rows = 0.5 * (q - p).abs().sum(-1)
    elif divergence == "kl" or beta == 0:
        rows = xlogy_term(p, y, x).sum(-1)
    elif beta == 1:
        rows = xlogy_term(q, x, y).sum(-1)
    else:
        lm = (beta * p + (1 - beta) * q).log()
        rows = beta * xlogy_term(p, y, lm).sum(-1) + (1 - beta) * xlogy_term(q, x, lm).sum(-1)
    keep = torch.ones_like(rows, dtype=torch.bool) if labels is None else labels != ignore_index
    rows = torch.where(keep, rows, torch.zeros_like(rows))
    count = keep.sum().double()
    if reduction == "none":
        loss = rows
    elif reduction == "sum":
        loss = rows.sum()
    elif reduction == "batchmean":
        loss = rows.sum() / count
    else:
        loss = rows.sum() / (count * student.shape[1])
    return loss, z


def make(n, v, dtype, device, teacher_input="logits", pad=0, scale=2.0):
    s = (torch.randn(n, v + pad, device=device) * scale).to(dtype)[:, :v]
    t = torch.randn(n, v, device=device) * scale
    if teacher_input == "log_probs":
        t = torch.log_softmax(t, -1)
    elif teacher_input == "probs":
        t = torch.softmax(t, -1)
    return s.requires_grad_(True), t.to(dtype)


def check(
    student,
    teacher,
    divergence="jsd",
    beta=0.5,
    temperature=1.0,
    teacher_input="logits",
    labels=None,
    ignore_index=-100,
    reduction="batchmean",
    in_place=False,
):
    opts = (divergence, beta, temperature, teacher_input, labels, ignore_index, reduction)
    ref, z = reference(student, teacher, *opts)
    s_in = student.detach().clone().requires_grad_(True) * 1 if in_place else student
    loss = distill(
        s_in, teacher, divergence, beta, temperature, teacher_input, labels, ignore_index, reduction, in_place=in_place
    )
    assert loss.dtype == torch.float32 and loss.shape == ref.shape
    assert_close(loss, ref, student.dtype, name="loss")
    dy = torch.rand_like(ref) + 0.5
    (dx,) = torch.autograd.grad(loss, s_in, dy.float())
    (dx_ref,) = torch.autograd.grad(ref, z, dy)
    assert dx.dtype == student.dtype
    assert_close(dx, dx_ref, name="dstudent")
    return loss, dx


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("divergence,beta", DIVERGENCES, ids=lambda v: str(v))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("teacher_input", ["logits", "log_probs", "probs"])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
@pytest.mark.parametrize("ignored", [False, True])
def test_matches_float64_reference(device, divergence, beta, reduction, teacher_input, temperature, ignored):
    s, t = make(7, 129, torch.float32, device, teacher_input)
    labels = None
    if ignored:
        labels = torch.randint(0, 129, (7,), device=device)
        labels[[1, 4]] = -100
    check(s, t, divergence, beta, temperature, teacher_input, labels, -100, reduction)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("divergence,beta", DIVERGENCES, ids=lambda v: str(v))
@pytest.mark.parametrize("in_place", [False, True])
def test_dtypes_and_in_place(device, dtype, divergence, beta, in_place):
    s, t = make(6, 300, dtype, device)
    labels = torch.tensor([1, -100, 3, 4, 5, 6], device=device, dtype=torch.int32)
    check(s, t, divergence, beta, 1.5, "logits", labels, -100, "batchmean", in_place=in_place)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,v,pad", [(3, 1001, 0), (2, 32003, 0), (4, 96, 8), (1, 1, 0), (5, 515, 3)])
def test_odd_and_strided_shapes(device, dtype, n, v, pad):
    s, t = make(n, v, dtype, device, pad=pad)
    assert pad == 0 or not s.is_contiguous()
    check(s, t, "jsd", 0.4, 1.0)
    check(s, t, "kl", reduction="none", in_place=True)
    check(s, t, "tvd", reduction="sum")


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_writes_the_gradient_over_the_student(device):
    s, t = make(8, 384, torch.bfloat16, device)
    logits = s.detach().clone().requires_grad_(True) * 1
    ptr = logits.data_ptr()
    loss = jsd(logits, t, in_place=True)
    (dx,) = torch.autograd.grad(loss, logits)
    assert dx.data_ptr() == ptr  # no [N, V] buffer besides the logits
    (dx_ref,) = torch.autograd.grad(jsd(s, t), s)
    assert torch.equal(dx, dx_ref)
    with pytest.raises(ValueError, match="'student'"):
        jsd(s, t, in_place=True)  # a leaf that requires grad


@pytest.mark.parametrize("device", DEVICES)
def test_public_defaults_match_torch_and_liger(device):
    s, t = make(5, 64, torch.float32, device)
    probs = torch.softmax(t, -1)
    ref = F.kl_div(torch.log_softmax(s.double(), -1), probs.double(), reduction="mean")  # torch's default
    assert_close(kl_div(s, probs), ref, name="kl_div mean")
    ref = F.kl_div(torch.log_softmax(s.double(), -1), probs.double().log(), reduction="batchmean", log_target=True)
    assert_close(kl_div(s, probs.log(), reduction="batchmean", log_target=True), ref, name="kl_div log_target")
    assert_close(
        kl_div(s, t, reduction="sum", teacher_input="logits"),
        reference(s, t, "kl", 0, 1, "logits", None, -100, "sum")[0],
        name="kl_div logits",
    )
    assert_close(tvd(s, t), reference(s, t, "tvd", 0, 1, "logits", None, -100, "batchmean")[0], name="tvd")


@pytest.mark.parametrize("device", DEVICES)
def test_modules_are_liger_drop_ins(device):
    """Liger's modules take log-probabilities (TVD: probabilities); the losses and the gradients of the logits before
    the log_softmax (softmax) match the formulas."""
    s, t = make(6, 80, torch.float32, device)
    labels = torch.tensor([0, -100, 2, 3, -100, 5], device=device)
    logp_t = torch.log_softmax(t, -1)
    for beta in (0.0, 0.5, 1.0):
        loss = JSD(beta=beta)(torch.log_softmax(s, -1), logp_t, labels)
        ref, z = reference(s, logp_t, "jsd", beta, 1.0, "log_probs", labels, -100, "batchmean")
        assert_close(loss, ref, name=f"JSD({beta})")
        (g,) = torch.autograd.grad(loss, s)
        assert_close(g, torch.autograd.grad(ref, z)[0], name=f"JSD({beta}) grad")
    for reduction, log_target in (("batchmean", False), ("sum", True), ("mean", False)):
        target = logp_t if log_target else logp_t.exp()
        loss = KLDivLoss(reduction=reduction, log_target=log_target)(torch.log_softmax(s, -1), target)
        ref = F.kl_div(torch.log_softmax(s.double(), -1), target.double(), reduction=reduction, log_target=log_target)
        assert_close(loss, ref, name=f"KLDivLoss {reduction}")
    none = KLDivLoss(reduction="none")(torch.log_softmax(s, -1), logp_t.exp())
    assert none.shape == s.shape
    p = torch.softmax(s, -1)
    loss = TVDLoss()(p, logp_t.exp(), labels)
    ref, z = reference(s, logp_t.exp(), "tvd", 0, 1.0, "probs", labels, -100, "batchmean")
    assert_close(loss, ref, name="TVDLoss")
    assert_close(torch.autograd.grad(loss, s)[0], torch.autograd.grad(ref, z)[0], name="TVDLoss grad")
    assert TVDLoss(reduction="none")(p, logp_t.exp()).shape == s.shape


@pytest.mark.parametrize("device", DEVICES)
def test_every_row_ignored(device):
    s, t = make(4, 50, torch.float32, device)
    labels = torch.full((4,), -100, device=device)
    assert jsd(s, t, labels=labels).isnan()
    loss = jsd(s, t, labels=labels, reduction="sum")
    assert loss == 0
    assert torch.equal(torch.autograd.grad(loss, s)[0], torch.zeros_like(s))


@pytest.mark.parametrize("device", DEVICES)
def test_no_gradient_when_the_student_does_not_require_it(device):
    s, t = make(4, 64, torch.float32, device)
    s = s.detach()
    before = s.clone()
    loss = jsd(s, t, in_place=True)
    assert not loss.requires_grad and torch.equal(s, before)


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic(device):
    s, t = make(32, 3000, torch.bfloat16, device)

    def run():
        loss = jsd(s, t, beta=0.3, temperature=2.0)
        return loss, torch.autograd.grad(loss * 0.75, s)[0]

    (l1, g1), (l2, g2) = run(), run()
    assert torch.equal(l1, l2) and torch.equal(g1, g2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True])
def test_torch_compile_fullgraph_equals_eager(device, in_place):
    def f(h, t):
        return jsd(h * 1.5, t, beta=0.3, temperature=2.0, in_place=in_place) * 2.0

    s, t = make(16, 300, torch.bfloat16, device)
    eager = f(s, t)
    (dx_eager,) = torch.autograd.grad(eager, s)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")(s, t)
    (dx_compiled,) = torch.autograd.grad(compiled, s)
    assert torch.equal(eager, compiled) and torch.equal(dx_eager, dx_compiled)


@needs_cuda
@pytest.mark.parametrize("divergence,beta", DIVERGENCES, ids=lambda v: str(v))
def test_large_vocab(divergence, beta):
    s, t = make(4, 128256, torch.bfloat16, "cuda")
    labels = torch.tensor([0, -100, 2, 3], device="cuda")
    check(s, t, divergence, beta, 2.0, "logits", labels, -100, "batchmean", in_place=True)


@needs_cuda
def test_cuda_graph_replay_equals_eager():
    s, t = make(64, 4096, torch.bfloat16, "cuda")
    static_s, static_t = s.detach().clone().requires_grad_(True), t.clone()

    def step(a, b):
        loss = jsd(a * 1, b, beta=0.3, in_place=True)
        return loss, torch.autograd.grad(loss * 0.5, a)[0]

    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        step(static_s, static_t)
    torch.cuda.current_stream().wait_stream(st)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(static_s, static_t)
    new_s, new_t = make(64, 4096, torch.bfloat16, "cuda")
    with torch.no_grad():
        static_s.copy_(new_s)
    static_t.copy_(new_t)
    g.replay()
    torch.cuda.synchronize()
    ref = step(new_s.detach().requires_grad_(True), new_t)
    for a, b in zip(out, ref):
        assert torch.equal(a, b)


@needs_cuda
def test_more_than_2_31_elements():
    n, v = (2**31) // 128256 + 4, 128256
    s = torch.randn(n, v, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    t = torch.randn(n, v, device="cuda", dtype=torch.bfloat16)
    loss = jsd(s, t, reduction="none")
    (dx,) = torch.autograd.grad(loss.sum(), s)
    tail = slice(n - 3, n)
    ref, z = reference(s[tail], t[tail], "jsd", 0.5, 1.0, "logits", None, -100, "none")
    assert_close(loss[tail], ref, torch.bfloat16, name="loss tail")
    assert_close(dx[tail], torch.autograd.grad(ref.sum(), z)[0], name="dstudent tail")


# ---- bad input: a clear error naming the argument -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        (dict(student=torch.ones(4, 8, dtype=torch.int64)), TypeError, "'student'"),
        (dict(student=torch.randn(2, 4, 8)), ValueError, "'student'"),
        (dict(student=torch.randn(4, 0), teacher=torch.randn(4, 0)), ValueError, "'student'"),
        (dict(student=torch.randn(8, 4).t()), ValueError, "'student'"),
        (dict(teacher=torch.randn(4, 9)), ValueError, "'teacher'"),
        (dict(teacher=[1.0]), TypeError, "'teacher'"),
        (dict(labels=torch.zeros(5, dtype=torch.int64)), ValueError, "'labels'"),
        (dict(labels=torch.zeros(4)), TypeError, "'labels'"),
        (dict(divergence="kld"), ValueError, "'divergence'"),
        (dict(teacher_input="logit"), ValueError, "'teacher_input'"),
        (dict(reduction="avg"), ValueError, "'reduction'"),
        (dict(beta=1.5), ValueError, "'beta'"),
        (dict(beta="half"), TypeError, "'beta'"),
        (dict(temperature=0.0), ValueError, "'temperature'"),
        (dict(temperature=float("nan")), ValueError, "'temperature'"),
        (dict(ignore_index=1.5), TypeError, "'ignore_index'"),
    ],
)
def test_bad_input_names_the_argument(kwargs, exc, arg):
    args = dict(student=torch.randn(4, 8), teacher=torch.randn(4, 8), labels=torch.tensor([0, 1, 2, 3]))
    args.update(kwargs)
    with pytest.raises(exc, match=arg):
        distill(**args)


@needs_cuda
def test_device_mismatch_names_the_argument():
    with pytest.raises(ValueError, match="'teacher'"):
        jsd(torch.randn(4, 8, device="cuda"), torch.randn(4, 8))
