#!/usr/bin/env bash
# Nsight Compute on RMSNorm and LayerNorm (forward, backward, column sums), clocks left alone: duration, DRAM
# throughput, occupancy, launch and warp-stall sections for one launch of each kernel.
#   bash bench/sweeps/ncu-norms.sh [MxN ...]     (default 16384x4096)
set -uo pipefail
source "$(dirname "$0")/env.sh"
ncu_or_exit
for op in rms_norm layer_norm; do
  echo "-- $op"
  ncu --clock-control none -k regex:"cached|two_pass|uncached|column_sum" --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
    python3 bench/sweeps/profile_$op.py "${@:-16384x4096}"
done >"$OUT/ncu_norms.txt" 2>&1
grep -E "^-- |\)x\(|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" \
  "$OUT/ncu_norms.txt" | cut -c 1-150
