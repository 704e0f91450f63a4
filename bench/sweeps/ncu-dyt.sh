#!/usr/bin/env bash
# Nsight Compute on the DyT forward, Tigon's kernel beside Liger's (carry its wheel in .whl/), clocks left alone:
# duration, DRAM throughput and sectors, L2 traffic, occupancy and warp stalls for one launch of each, to find why
# Liger's forward streams nearer the copy rate (docs/performance/dyt.md).
#   bash bench/sweeps/ncu-dyt.sh [MxN ...]     (default 16384x4096 4096x8192)
set -uo pipefail
source "$(dirname "$0")/env.sh"
ncu_or_exit
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(16384x4096 4096x8192)
ncu --clock-control none -k regex:"dyt_fwd" --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section MemoryWorkloadAnalysis_Tables --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats python3 bench/sweeps/profile_dyt_fwd.py "${shapes[@]}" \
  >"$OUT/ncu_dyt.txt" 2>&1
grep -E "dyt_fwd|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Registers Per|Block Size|Grid Size|Warp Cycles Per Issued|Issued Warp" \
  "$OUT/ncu_dyt.txt" | cut -c 1-150
