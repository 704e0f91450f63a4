// RoPE CUDA path: picks the vector or scalar kernel from the problem's alignment and launches it.
#include <algorithm>
#include <climits>

#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "rope/rope.h"
#include "rope/rope_kernels.cuh"

namespace tigon::rope {
namespace {

constexpr int kThreads = 256;

// Every row of the tensor starts on a 16-byte boundary: the base does, and each outer stride that moves (size > 1,
// stride != 0) is a multiple of 16 bytes.
bool rows_aligned(const void* base, const int64_t (&stride)[3], const int64_t (&size)[3], int elem_bytes) {
  if (!cuda::aligned16(base)) return false;
  for (int i = 0; i < 3; ++i)
    if (size[i] > 1 && (stride[i] * elem_bytes) % 16 != 0) return false;
  return true;
}

bool vectorizable(const Problem& p, int v) {
  const int xb = dtype_bytes(p.dtype), cb = dtype_bytes(p.cs_dtype);
  const int64_t rot_span = p.interleaved ? p.rotary : p.rotary / 2;
  return rot_span % v == 0 && (p.in_place || (p.dim - p.rotary) % v == 0) &&
         rows_aligned(p.x, p.x_stride, p.size, xb) && rows_aligned(p.out, p.out_stride, p.size, xb) &&
         rows_aligned(p.cos, p.cos_stride, p.size, cb) && rows_aligned(p.sin, p.sin_stride, p.size, cb);
}

template <class T, class TC, int V, int PV, bool INTERLEAVED>
void launch(kern::Args a, const Problem& p, cudaStream_t stream) {
  a.rot_units = int(INTERLEAVED ? p.rotary / V : p.rotary / 2 / V);
  a.pass_units = p.in_place ? 0 : int((p.dim - p.rotary) / PV);
  const int units = a.rot_units + a.pass_units;
  int tx = 1;
  while (tx < units && tx < kThreads) tx *= 2;
  const dim3 block(tx, kThreads / tx);
  const unsigned grid = unsigned(std::min<int64_t>((a.rows + block.y - 1) / block.y, INT_MAX));
  kern::rope<T, TC, V, PV, INTERLEAVED><<<grid, block, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class T, class TC>
void dispatch(const kern::Args& a, const Problem& p, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = vectorizable(p, kVec);
  if (p.interleaved) {
    if (vec)
      launch<T, TC, kVec, kVec, true>(a, p, stream);
    else
      launch<T, TC, 2, 1, true>(a, p, stream);
  } else {
    if (vec)
      launch<T, TC, kVec, kVec, false>(a, p, stream);
    else
      launch<T, TC, 1, 1, false>(a, p, stream);
  }
}

}  // namespace

void run_cuda(const Problem& p, void* stream_ptr) {
  if (p.dim > INT_MAX) fail_arg("x", "head dim ", p.dim, " is too large");
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  kern::Args a{};
  a.x = p.x;
  a.out = p.out;
  a.cos = p.cos;
  a.sin = p.sin;
  a.rows = p.rows();
  a.size1 = p.size[1];
  a.size2 = p.size[2];
  for (int i = 0; i < 3; ++i) {
    a.x_stride[i] = p.x_stride[i];
    a.out_stride[i] = p.out_stride[i];
    a.cos_stride[i] = p.cos_stride[i];
    a.sin_stride[i] = p.sin_stride[i];
  }
  a.rotary = int(p.rotary);
  a.half = int(p.rotary / 2);
  a.backward = p.backward;
  const bool cs32 = p.cs_dtype == DType::kFloat32;
  switch (p.dtype) {
    case DType::kFloat32: dispatch<float, float>(a, p, stream); break;
    case DType::kFloat16:
      cs32 ? dispatch<__half, float>(a, p, stream) : dispatch<__half, __half>(a, p, stream);
      break;
    case DType::kBFloat16:
      cs32 ? dispatch<__nv_bfloat16, float>(a, p, stream) : dispatch<__nv_bfloat16, __nv_bfloat16>(a, p, stream);
      break;
    default: fail(TIGON_ERROR_INTERNAL, "rope: unexpected dtype ", dtype_name(p.dtype));
  }
}

}  // namespace tigon::rope
