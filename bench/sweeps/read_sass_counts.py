"""Reads Nsight Compute's per-SASS-instruction source counters (the CSV that `bash bench/sweeps/sass-counts.sh`
writes, gzipped or not) and prints, per kernel: executed warp instructions, the share of each opcode, the address
ranges that execute or stall most, the stall reasons of the main loop (the instructions executed about as often as
the execution count that carries the most samples), and the instructions with the most stall samples with their two
largest reasons. Needs no GPU.

    python3 bench/sweeps/read_sass_counts.py sass-cross-entropy.csv.gz [--range 0x200] [--top 8]
"""

import argparse
import collections
import csv
import gzip
import io


def kernels(path):
    raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    rows = list(csv.reader(io.StringIO(raw.read())))
    starts = [i for i, r in enumerate(rows) if r and r[0] == "Kernel Name"] + [len(rows)]
    seen = set()
    for a, b in zip(starts, starts[1:]):
        head = next((i for i in range(a, b) if rows[i] and rows[i][0] == "Address"), None)
        if head is None:
            continue
        hdr = rows[head]
        data = [r for r in rows[head + 1 : b] if len(r) == len(hdr)]
        key = (rows[a][1], len(data))
        if key in seen:  # ncu repeats a kernel's table when one launch is listed twice
            continue
        seen.add(key)
        yield rows[a][1], hdr, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--range", type=lambda v: int(v, 0), default=0x200, help="bytes of code per address range")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    for name, hdr, data in kernels(args.csv):
        ex, st, src = (hdr.index(c) for c in ("Instructions Executed", "Warp Stall Sampling (All Samples)", "Source"))
        base = int(data[0][0], 16)
        total = sum(int(r[ex]) for r in data) or 1
        stalls = sum(int(r[st]) for r in data) or 1
        ops = collections.Counter()
        ranges = collections.defaultdict(lambda: [0, 0])
        for r in data:
            op = next(t for t in r[src].split() if not t.startswith("@")).split(".")[0]
            ops[op] += int(r[ex])
            rng = ranges[(int(r[0], 16) - base) // args.range]
            rng[0] += int(r[ex])
            rng[1] += int(r[st])
        print(f"{name[:110]}\n  {total:,} warp instructions executed, {stalls:,} stall samples")
        print("  opcodes: " + ", ".join(f"{o} {n / total:.1%}" for o, n in ops.most_common(args.top)))
        print("  ranges (executed %, stalled %):")
        for k, (n, s) in sorted(ranges.items()):
            if n / total > 0.01 or s / stalls > 0.01:
                print(f"    {k * args.range:05x}-{(k + 1) * args.range - 1:05x}  {n / total:6.1%}  {s / stalls:6.1%}")
        reasons = [i for i, c in enumerate(hdr) if c.startswith("stall_") and "Not Issued" not in c]
        by_count = collections.Counter()
        for r in data:
            by_count[int(r[ex])] += int(r[st])
        loop = by_count.most_common(1)[0][0]
        by_reason = collections.Counter()
        for r in data:
            if loop / 2 <= int(r[ex]) <= loop * 2:
                for i in reasons:
                    by_reason[hdr[i][6:]] += int(r[i] or 0)
        in_loop = sum(by_reason.values()) or 1
        print(f"  main loop (executed ~{loop:,} times), {in_loop / stalls:.0%} of the samples:")
        print("    " + ", ".join(f"{k} {v / in_loop:.1%}" for k, v in by_reason.most_common(args.top)))
        print("  most stalled instructions:")
        for r in sorted(data, key=lambda r: -int(r[st]))[: args.top]:
            why = sorted(((int(r[i] or 0), hdr[i][6:]) for i in reasons), reverse=True)[:2]
            print(
                f"    {int(r[0], 16) - base:05x}  {int(r[st]) / stalls:6.1%}  x{int(r[ex]):>10,}  {r[src].strip()[:60]:60s}"
                f"  {', '.join(f'{k} {n}' for n, k in why if n)}"
            )


if __name__ == "__main__":
    main()
