// RoPE CUDA path: one launch for q (and k), the vector or scalar kernel picked from the problem's alignment.
#include <climits>
#include <cstdlib>

#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
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

kern::Part part_of(const Problem& p) {
  kern::Part k{};
  k.x = p.x;
  k.out = p.out;
  k.heads = p.size[p.h_axis];
  k.x_b = p.x_stride[0], k.x_h = p.x_stride[p.h_axis], k.x_t = p.x_stride[p.t_axis];
  k.o_b = p.out_stride[0], k.o_h = p.out_stride[p.h_axis], k.o_t = p.out_stride[p.t_axis];
  k.copy_pass = !p.in_place;
  return k;
}

template <class T, class TC, int V, int PV, bool INTERLEAVED>
void launch(kern::Args a, const Problem& p, cudaStream_t stream) {
  a.rot_units = int(INTERLEAVED ? p.rotary / V : p.rotary / 2 / V);
  const bool any_copy = a.part[0].copy_pass || (a.parts > 1 && a.part[1].copy_pass);
  a.pass_units = any_copy ? int((p.dim - p.rotary) / PV) : 0;
  const int64_t heads = a.part[0].heads + (a.parts > 1 ? a.part[1].heads : 0);
  const int64_t blocks = (a.batch * a.seq * (a.rot_units + a.pass_units) * heads + kThreads - 1) / kThreads;
  if (blocks == 0) return;  // no head, or nothing to rotate or copy
  // Heads adjacent in memory ((B, T, H, D) storage): neighbouring threads take neighbouring heads.
  a.head_inner = std::abs(a.part[0].x_h) < std::abs(a.part[0].x_t);
  if (blocks > INT_MAX) fail_arg("x", "has too many rotation units for one launch: ", blocks, " blocks");
  const unsigned grid = unsigned(blocks);
  // A programmatic dependent of the kernel before it (rope waits for it first).
  if (p.backward)
    cuda::launch_pdl(dim3(grid), dim3(kThreads), 0, stream, kern::rope<T, TC, V, PV, INTERLEAVED, true>, a);
  else
    cuda::launch_pdl(dim3(grid), dim3(kThreads), 0, stream, kern::rope<T, TC, V, PV, INTERLEAVED, false>, a);
}

template <class T, class TC>
void dispatch(const kern::Args& a, const Problem* parts, int n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const Problem& p = parts[0];
  bool vec = true;
  for (int i = 0; i < n; ++i) vec = vec && vectorizable(parts[i], kVec);
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

void run_cuda(const Problem* parts, int n, void* stream_ptr) {
  const Problem& p = parts[0];
  if (p.dim > INT_MAX) fail_arg("x", "head dim ", p.dim, " is too large");
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  kern::Args a{};
  a.parts = n;
  for (int i = 0; i < n; ++i) a.part[i] = part_of(parts[i]);
  a.cos = p.cos;
  a.sin = p.sin;
  a.c_b = p.cos_stride[0], a.c_t = p.cos_stride[p.t_axis];
  a.s_b = p.sin_stride[0], a.s_t = p.sin_stride[p.t_axis];
  a.batch = p.size[0];
  a.seq = p.size[p.t_axis];
  a.rotary = int(p.rotary);
  a.half = int(p.rotary / 2);
  const bool cs32 = p.cs_dtype == DType::kFloat32;
  switch (p.dtype) {
    case DType::kFloat32: dispatch<float, float>(a, parts, n, stream); break;
    case DType::kFloat16:
      cs32 ? dispatch<__half, float>(a, parts, n, stream) : dispatch<__half, __half>(a, parts, n, stream);
      break;
    case DType::kBFloat16:
      cs32 ? dispatch<__nv_bfloat16, float>(a, parts, n, stream)
           : dispatch<__nv_bfloat16, __nv_bfloat16>(a, parts, n, stream);
      break;
    default: fail(TIGON_ERROR_INTERNAL, "rope: unexpected dtype ", dtype_name(p.dtype));
  }
}

}  // namespace tigon::rope
