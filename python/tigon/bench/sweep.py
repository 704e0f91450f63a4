"""--sweep: the memory-bound training ops over the shapes of real models instead of their headline shapes: hidden sizes
of the supported families (non-powers of two included), their MLP widths and vocabularies, RoPE's head layouts, an odd
row count. Tigon, torch.compile and Liger only (eager is far behind everywhere); the summary shows, per shape, Tigon's
device time against the faster of the other two, forward and forward + backward, and its share of the copy rate, and
flags every shape where Tigon is behind (under 0.98x). The charts (one per op) show % of the copy rate per shape."""

from __future__ import annotations

HIDDEN = [1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 12288, 16384]
_ROWS = [(8192, h) for h in HIDDEN] + [(4097, 4096), (8191, 5120)]
SHAPES = {
    "rms_norm": _ROWS,
    "add_rms_norm": _ROWS,
    "layer_norm": _ROWS,
    "dyt": _ROWS,
    "poly_norm": _ROWS,
    "softmax": [(8192, n) for n in (1024, 2048, 4096, 8192, 32000, 128256)],
    "swiglu": [(8192, i) for i in (5632, 8192, 8960, 11008, 13824, 14336, 18944, 28672)],
    "cross_entropy": [(4096, v) for v in (32000, 32064, 49152, 50257, 128256, 151936, 152064, 256000, 262144)],
    # batch, query heads, key/value heads, tokens, head dim (Llama 3, Qwen 2.5, Mistral, Gemma, Phi 3, MHA)
    "rope": [
        (4, 32, 8, 4096, 128),
        (4, 28, 4, 4096, 128),
        (4, 40, 8, 4096, 128),
        (4, 64, 8, 2048, 128),
        (4, 8, 4, 4096, 256),
        (4, 32, 32, 4096, 96),
        (4, 16, 16, 4096, 64),
    ],
}
IMPLS = ["tigon", "torch_compile", "liger"]
BEHIND = 0.98  # Tigon's time may trail the best baseline's by 2% before a shape is flagged


def _dev(row: dict, key: str) -> float | None:
    return row.get(f"{key}_dev_ms") or row.get(f"{key}_ms")


def print_summary(results: list[dict]) -> None:
    """Per (op, shape): Tigon's fwd and full device ms, the best baseline's, the ratios (above 1: Tigon faster) and
    Tigon's % of the copy rate; then the shapes where Tigon is behind."""
    by_shape: dict[tuple, dict] = {}
    for r in results:
        if not r.get("error"):
            by_shape.setdefault((r["op"], tuple(r["shape"])), {})[r["impl"]] = r
    behind = []
    print("\nsweep: Tigon against the faster of torch.compile and Liger, steady-state device time")
    print(
        f"{'op':<14} {'shape':<22} {'tigon fwd/full ms':>19} {'best fwd/full ms':>18} {'x fwd':>6} {'x full':>6} {'%copy':>6}"
    )
    for (op, shape), impls in by_shape.items():
        t = impls.get("tigon")
        others = [r for name, r in impls.items() if name != "tigon"]
        if t is None or not others:
            continue
        cells, ratios = [], []
        for key in ("fwd", "full"):
            mine = _dev(t, key)
            best = min((v for v in (_dev(r, key) for r in others) if v), default=None)
            cells.append((mine, best))
            ratios.append(best / mine if mine and best else None)
        fmt = lambda v: f"{v:.4f}" if v else "-"  # noqa: E731
        ratio = lambda v: f"{v:.2f}" if v else "-"  # noqa: E731
        pct = t.get("pct_copy_full_dev") or t.get("pct_copy_full")
        print(
            f"{op:<14} {'x'.join(map(str, shape)):<22} {fmt(cells[0][0]) + '/' + fmt(cells[1][0]):>19} "
            f"{fmt(cells[0][1]) + '/' + fmt(cells[1][1]):>18} {ratio(ratios[0]):>6} {ratio(ratios[1]):>6} "
            f"{(f'{pct:.0f}' if pct else '-'):>6}"
        )
        if any(r is not None and r < BEHIND for r in ratios):
            behind.append(f"{op} {'x'.join(map(str, shape))}")
    print(f"behind (< {BEHIND}x): " + (", ".join(behind) if behind else "none"))
