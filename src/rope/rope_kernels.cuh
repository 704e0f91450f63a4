// RoPE kernels. A row is one head vector of one token; a block holds blockDim.y rows and blockDim.x threads per row.
// Each thread owns "units" of V elements: a rotation unit reads both members of V pairs (rotate-half: elements e..e+V
// and their partners e+R/2..; interleaved: the adjacent pairs inside e..e+V), a pass-through unit copies V elements
// past R. A thread reads everything it writes before writing, so in-place calls (out == x) need no synchronisation.
#pragma once

#include <cstdint>

#include "common/cuda_types.cuh"

namespace tigon::rope::kern {

struct Args {
  const void* x;
  void* out;
  const void* cos;
  const void* sin;
  int64_t rows, size1, size2;  // rows = size0 * size1 * size2, size2 innermost
  int64_t x_stride[3], out_stride[3], cos_stride[3], sin_stride[3];
  int rotary, half;             // R and R / 2
  int rot_units, pass_units;    // per row; pass_units is 0 in place
  bool backward;
};

__device__ __forceinline__ int64_t offset_of(const int64_t (&stride)[3], int64_t i0, int64_t i1, int64_t i2) {
  return i0 * stride[0] + i1 * stride[1] + i2 * stride[2];
}

// (a, b) is one pair; forward: a' = a cos_a - b sin_a, b' = b cos_b + a sin_b. The backward (the transpose) is the
// same expression with sin_a' = -sin_b and sin_b' = -sin_a, so both directions share one kernel.
__device__ __forceinline__ void rotate_pair(float& a, float& b, float ca, float cb, float sa, float sb, bool bwd) {
  const float sa_eff = bwd ? -sb : sa, sb_eff = bwd ? -sa : sb;
  const float na = a * ca - b * sa_eff;
  const float nb = b * cb + a * sb_eff;
  a = na;
  b = nb;
}

// V: elements per unit (16 bytes of T on the vector path; 1, or 2 for interleaved, on the scalar path).
// PV: elements per pass-through unit (V on the vector path, 1 on the scalar path, so any D - R works).
template <class T, class TC, int V, int PV, bool INTERLEAVED>
__global__ void __launch_bounds__(256) rope(Args a) {
  using cuda::load_vec;
  using cuda::store_vec;
  const int units = a.rot_units + a.pass_units;
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < a.rows; row += step) {
    const int64_t i2 = row % a.size2, rest = row / a.size2, i1 = rest % a.size1, i0 = rest / a.size1;
    const T* x = static_cast<const T*>(a.x) + offset_of(a.x_stride, i0, i1, i2);
    T* out = static_cast<T*>(a.out) + offset_of(a.out_stride, i0, i1, i2);
    const TC* cs = static_cast<const TC*>(a.cos) + offset_of(a.cos_stride, i0, i1, i2);
    const TC* sn = static_cast<const TC*>(a.sin) + offset_of(a.sin_stride, i0, i1, i2);
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      if (u >= a.rot_units) {  // pass-through dims: a plain copy
        const int e = a.rotary + (u - a.rot_units) * PV;
        float v[PV];
        load_vec<T, PV>(x + e, v);
        store_vec<T, PV>(out + e, v);
      } else if constexpr (INTERLEAVED) {
        const int e = u * V;
        float v[V], c[V], s[V];
        load_vec<T, V>(x + e, v);
        load_vec<TC, V>(cs + e, c);
        load_vec<TC, V>(sn + e, s);
#pragma unroll
        for (int j = 0; j < V; j += 2) rotate_pair(v[j], v[j + 1], c[j], c[j + 1], s[j], s[j + 1], a.backward);
        store_vec<T, V>(out + e, v);
      } else {
        const int e = u * V, f = e + a.half;
        float va[V], vb[V], ca[V], cb[V], sa[V], sb[V];
        load_vec<T, V>(x + e, va);
        load_vec<T, V>(x + f, vb);
        load_vec<TC, V>(cs + e, ca);
        load_vec<TC, V>(cs + f, cb);
        load_vec<TC, V>(sn + e, sa);
        load_vec<TC, V>(sn + f, sb);
#pragma unroll
        for (int j = 0; j < V; ++j) rotate_pair(va[j], vb[j], ca[j], cb[j], sa[j], sb[j], a.backward);
        store_vec<T, V>(out + e, va);
        store_vec<T, V>(out + f, vb);
      }
    }
  }
}

}  // namespace tigon::rope::kern
