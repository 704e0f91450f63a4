#!/usr/bin/env bash
# Nsight Compute on the attention backward's main kernel (clocks left alone): the full section set for its first
# launch on bench/micro/attention_bwd's long problem (causal, deterministic dQ), the details page, and where its warps
# wait per SASS instruction (read_sass_counts.py).
#   bash bench/sweeps/ncu-attention-bwd.sh [batch seqlen heads head_dim [kv_heads]]   (default 8 4096 32 128 8)
set -uo pipefail
source "$(dirname "$0")/env.sh"
ncu_or_exit
rm -f build/attention_bwd  # built from the current sources
BUILD_ONLY=1 bash bench/sweeps/micro.sh attention_bwd >/dev/null \
  || { echo "bench/micro/attention_bwd did not build" >&2; exit 1; }
report="$OUT/ncu_attention_bwd"
ncu --clock-control none -k regex:bwd_main --launch-count 1 --set full -f -o "$report" \
  build/attention_bwd --speed-only "$@" >"$report.log" 2>&1 || { tail -n 5 "$report.log"; exit 1; }
ncu --import "$report.ncu-rep" --page details --print-details all >"$report.txt" 2>&1
ncu --import "$report.ncu-rep" --page source --csv --print-source sass >"$report.csv" 2>&1
grep -E "Duration|Pipe Tensor Cycles Active|L2 Hit Rate  |DRAM Throughput|dram__bytes_(read|write)\.sum  " \
  "$report.txt" | cut -c 1-150
python3 bench/sweeps/read_sass_counts.py "$report.csv" --top 30
