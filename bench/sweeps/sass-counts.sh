#!/usr/bin/env bash
# Executed instructions and stall samples per SASS instruction (Nsight Compute source counters, gzipped CSV in $OUT)
# for the cross entropy row kernel and the LayerNorm kernels at 16384 x 4096; read them anywhere with
# `python3 bench/sweeps/read_sass_counts.py $OUT/sass-cross-entropy.csv.gz`. About 30 s.
set -uo pipefail
source "$(dirname "$0")/env.sh"
ncu_or_exit
sass="ncu --clock-control none --section SourceCounters --section InstructionStats --page source --print-source sass --csv"
$sass -k regex:rows_kernel --launch-skip 2 --launch-count 1 \
  python3 bench/sweeps/profile_cross_entropy.py --reps 3 cluster >"$OUT/sass-cross-entropy.csv" 2>&1
$sass -k regex:"bwd_cached|fwd_cached" --launch-count 2 \
  python3 bench/sweeps/profile_layer_norm.py >"$OUT/sass-layer-norm.csv" 2>&1
gzip -f "$OUT"/sass-*.csv && ls -l "$OUT"/sass-*.csv.gz
