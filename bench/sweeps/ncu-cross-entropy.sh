#!/usr/bin/env bash
# Nsight Compute on the cross entropy row kernel (one launch after two warm-ups, per variant), the one-block totals and
# finish kernels around it, and the row kernel's warp-stall reasons per issued instruction, largest first.
#   bash bench/sweeps/ncu-cross-entropy.sh [variant ...]     (default: cluster classic)
set -uo pipefail
source "$(dirname "$0")/env.sh"
ncu_or_exit
variants=("$@"); [ $# -eq 0 ] && variants=(cluster classic)
prof="python3 bench/sweeps/profile_cross_entropy.py --reps 3"
for v in "${variants[@]}"; do
  echo "-- $v"
  ncu --clock-control none -k regex:rows_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats $prof "$v"
done >"$OUT/ce_ncu.txt" 2>&1
ncu --clock-control none -k regex:"totals_kernel|finish_kernel" --launch-skip 4 --launch-count 2 \
  --section SpeedOfLight $prof cluster >>"$OUT/ce_ncu.txt" 2>&1
grep -E "^-- |_kernel|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|No Eligible" \
  "$OUT/ce_ncu.txt" | cut -c 1-150
ncu --clock-control none -k regex:rows_kernel --launch-skip 2 --launch-count 1 --csv --page raw \
  --metrics "regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$" $prof "${variants[0]}" \
  >"$OUT/ce_stalls.csv" 2>&1
python3 - "$OUT/ce_stalls.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next((i for i, r in enumerate(rows) if "ID" in r and any("stalled" in c for c in r)), None)
if head is None or len(rows) <= head + 2:
    sys.exit(f"no stall metrics in {sys.argv[1]}")
pairs = [(n.split("stalled_")[1].split("_per_")[0], float(v)) for n, v in zip(rows[head], rows[head + 2])
         if "stalled" in n and v.replace(".", "", 1).isdigit()]
for n, v in sorted(pairs, key=lambda p: -p[1])[:10]:
    print(f"  {n:24s} {v:6.2f} cycles per issued instruction")
PY
