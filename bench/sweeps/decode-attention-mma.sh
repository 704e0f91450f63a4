#!/usr/bin/env bash
# The tensor-core decode attention candidate (bench/micro/decode_attention_mma.cu) beside the library's kernel: builds
# it against build/libtigon.so and runs its cases (fp64 check, then µs and TB/s of both). docs/performance/decode.md.
#   bash bench/sweeps/decode-attention-mma.sh
set -uo pipefail
source "$(dirname "$0")/env.sh"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude -Ibench/micro -Lbuild -ltigon \
  -Xlinker -rpath="$PWD/build" -o build/decode_attention_mma bench/micro/decode_attention_mma.cu \
  || { echo "build of the micro-benchmark failed" >&2; exit 1; }
build/decode_attention_mma | tee "$OUT/decode_attention_mma.log"
