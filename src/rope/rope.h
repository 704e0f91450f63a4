// RoPE inside the library: the validated problem the C API hands to either implementation.
#pragma once

#include <cstdint>

#include "common/tensor.h"
#include "tigon/rope.h"

namespace tigon::rope {

// x's heads as rows: three outer dims in the tensor's own order (b, h, t for BHTD; b, t, h for BTHD), so that
// consecutive rows are neighbours in memory for contiguous tensors. cos/sin strides are 0 along the head dim (and
// along the batch when Bc = 1).
struct Problem {
  const void* x = nullptr;
  void* out = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  DType dtype = DType::kFloat32;     // x and out
  DType cs_dtype = DType::kFloat32;  // cos and sin
  int64_t size[3] = {0, 0, 0};
  int64_t x_stride[3] = {0, 0, 0}, out_stride[3] = {0, 0, 0}, cos_stride[3] = {0, 0, 0}, sin_stride[3] = {0, 0, 0};
  int64_t dim = 0;     // D, head dim
  int64_t rotary = 0;  // R, rotated dims (even, <= D)
  bool interleaved = false;
  bool backward = false;       // rotate by -theta (the transpose of the forward)
  bool in_place = false;       // out is x: the pass-through dims are left alone
  int h_axis = 1, t_axis = 2;  // which outer dims are the head and the position (the batch is dim 0)

  int64_t rows() const { return size[0] * size[1] * size[2]; }
};

// CPU reference: plain loops, fp64 math, one rounding at the store. rope_ref.cpp.
void run_cpu(const Problem& p);
// CUDA kernel (rope_cuda.cu), one launch for n = 1 or 2 problems (q and k) that share cos, sin, batch, positions,
// head dim, dtypes and direction. stream is a cudaStream_t.
void run_cuda(const Problem* parts, int n, void* stream);

}  // namespace tigon::rope
