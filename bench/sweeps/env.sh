# Sourced by the scripts here: the repository root as the working directory, the library built in build/ (built
# there first if missing), the Python package from the tree, results under $OUT (default /tmp/tigon-sweeps). Wheels in
# .whl/ are installed first, as scripts/gpu-check does: nvidia-cutlass's headers for a machine without the package index.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/tigon-sweeps}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
if [ ! -f build/libtigon.so ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j "$(nproc)" >/dev/null \
    || { echo "build failed" >&2; exit 1; }
fi
export TIGON_LIBRARY="$PWD/build/libtigon.so" PYTHONPATH="$PWD/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
ncu_or_exit() { command -v ncu >/dev/null || { echo "Nsight Compute (ncu) is not on PATH" >&2; exit 1; }; }
