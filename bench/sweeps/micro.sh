#!/usr/bin/env bash
# The diagnostic programs of bench/micro/, run with their default arguments: each built into build/ unless already
# there (the CUTLASS ones take ~2 minutes of one core), run, its output in $OUT/micro-<name>.txt. Names as arguments
# pick some (default: conv2d_tiles conv2d_cudnn softmax_variants moe_gemm_tiles gemv_splits gemv_rows
# decode_attention_chunks glu_activation rms_norm_rows dyt_fwd; attention_bwd by name). CUTLASS's headers come
# from the nvidia-cutlass wheel, cuDNN's from the nvidia-cudnn wheel that PyTorch's CUDA builds install. BUILD_ONLY=1
# builds without running.
set -uo pipefail
source "$(dirname "$0")/env.sh"
py_dir() { python3 -c "import $1 as m, os; print(os.path.dirname(m.__file__) if m.__file__ else m.__path__[0])"; }
cutlass=$(py_dir cutlass_library 2>/dev/null)/source
cudnn=$(py_dir nvidia.cudnn 2>/dev/null)
flags="-O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude"
build() {
  case $1 in
    conv2d_tiles) nvcc $flags -I"$cutlass/include" -I"$cutlass/tools/util/include" -o build/$1 bench/micro/$1.cu ;;
    conv2d_cudnn) nvcc $flags -I"$cudnn/include" -o build/$1 bench/micro/$1.cu -L"$cudnn/lib" -l:libcudnn.so.9 ;;
    softmax_variants) nvcc $flags -o build/$1 bench/micro/$1.cu -Lbuild -ltigon -Xlinker -rpath="$PWD/build" ;;
    gemv_splits | gemv_rows) nvcc $flags -DTIGON_WITH_CUDA -o build/$1 bench/micro/$1.cu -lcublas ;;
    decode_attention_chunks | glu_activation | rms_norm_rows | dyt_fwd) nvcc $flags -DTIGON_WITH_CUDA -o build/$1 bench/micro/$1.cu ;;
    moe_gemm_tiles) nvcc $flags -DTIGON_WITH_CUDA -DTIGON_CUDA_ARCHS_STRING=\"90a\" -I"$cutlass/include" -o build/$1 bench/micro/$1.cu src/common/device.cpp ;;
    attention_bwd) nvcc $flags -DTIGON_WITH_CUDA -DTIGON_CUDA_ARCHS_STRING=\"90a\" -I"$cutlass/include" -o build/$1 bench/micro/$1.cu \
      src/attention/attention_bwd_cuda*.cu src/attention/attention_bwd_sm90_hdim*.cu src/common/device.cpp src/common/tensor.cpp ;;
    *) echo "micro.sh: no recipe for $1" >&2; return 1 ;;
  esac
}
status=0
for name in "${@:-conv2d_tiles conv2d_cudnn softmax_variants moe_gemm_tiles gemv_splits gemv_rows decode_attention_chunks glu_activation rms_norm_rows dyt_fwd}"; do
  for n in $name; do
    [ -x build/$n ] || build $n || { status=1; continue; }
    [ "${BUILD_ONLY:-0}" = 1 ] && continue
    LD_LIBRARY_PATH="$PWD/build:${cudnn:+$cudnn/lib:}${LD_LIBRARY_PATH:-}" timeout 300 build/$n >"$OUT/micro-$n.txt" 2>&1
    rc=$?
    echo "== $n (exit $rc)"
    cat "$OUT/micro-$n.txt"
    [ $rc = 0 ] || status=1
  done
done
exit $status
