"""The one per-dtype tolerance table every test uses (mirrored by rtol_of in tests/cpp/test_util.h).

Values are about two units in the last place of each dtype: an output rounded once to the dtype lands within half a
unit of the exact value; the casting modes add up to two more roundings in the input's dtype, and fp32 sums in another
order move a rounding now and then.
"""

import torch

TOL = {
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.float32: dict(atol=1e-5, rtol=2e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
}

# Attention's CUDA kernels against a float64 reference: besides the output's own rounding, a flash kernel rounds the
# probabilities (and in backward dS) to the 16-bit type before its matrix products, so a correct fp32-accumulating
# kernel lands within a few units in the last place of the largest value. Gradients: twice this.
ATTENTION_TOL = {
    torch.float16: dict(atol=4e-3, rtol=4e-3),
    torch.bfloat16: dict(atol=2.4e-2, rtol=2.4e-2),
}


def assert_close(
    got: torch.Tensor,
    ref: torch.Tensor,
    dtype: torch.dtype | None = None,
    name: str = "",
    scale: float | None = None,
    tol: dict | None = None,
) -> None:
    """got (any dtype) against a float64 reference, with the tolerance of `dtype` (default got's dtype). atol is scaled
    by the reference's largest magnitude, so sums over many rows (weight gradients) are held to the same relative
    standard as unit-sized outputs. Where the result is a difference of larger terms, pass those terms' magnitude as
    `scale`: rounding is relative to them, not to the (possibly zero) result. `tol` replaces the table's entry (an
    op's own, such as ATTENTION_TOL)."""
    tol = tol or TOL[dtype or got.dtype]
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert not torch.isnan(got).any(), f"{name}: NaN in output (an element left unwritten?)"
    if scale is None:
        scale = max(1.0, ref.abs().max().item()) if ref.numel() else 1.0
    torch.testing.assert_close(
        got.double(), ref.double(), atol=tol["atol"] * scale, rtol=tol["rtol"], msg=lambda m: f"{name}: {m}"
    )
