// SwiGLU / GeGLU CUDA kernels: one elementwise kernel per direction, templated on dtype, activation and vector width.
// blockDim = (threads along a row, rows per block); each thread handles V consecutive elements of a row (V = 16 bytes
// of T when every pointer and row stride allows it, else 1) and walks rows with a grid stride, so any number of rows
// fits the grid's y limit. Every element is read before it is written, which makes exact aliases (the in-place
// backward) safe. Included only by the per-dtype files swiglu_cuda_<dtype>.cu.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "common/activation_fast.cuh"
#include "common/activation_math.cuh"
#include "common/async_copy.cuh"
#include "common/cuda_types.cuh"
#include "tigon/swiglu.h"

namespace tigon::swiglu {

struct FwdArgs {
  const void* a;
  const void* b;
  void* c;
  int64_t rows, cols, a_stride, b_stride, c_stride;
  float gate, down;  // the multipliers (tigon/swiglu.h)
};

struct BwdArgs {
  const void* dc;
  const void* a;
  const void* b;
  void* da;
  void* db;
  int64_t rows, cols, dc_stride, a_stride, b_stride, da_stride, db_stride;
  float gate, down;
};

namespace kern {

using cuda::load_vec;
using cuda::round_to;
using cuda::store_vec;

// The gated activation's function, from the shared pointwise math (common/activation_math.cuh: torch's formulas).
constexpr int pointwise(int glu) {
  return glu == TIGON_GLU_SILU ? TIGON_ACT_SILU : glu == TIGON_GLU_GELU_TANH ? TIGON_ACT_GELU_TANH : TIGON_ACT_GELU_ERF;
}

// The forward's fast SiLU with its rounding certificate (common/activation_fast.cuh) for 16-bit types: the kernel
// stores act(x) rounded to T, which the certificate covers. fp32 and the GELUs keep the accurate forms.
template <class T, int Act>
constexpr bool kFast = !std::is_same_v<T, float> && cuda::kHasFastForm<pointwise(Act)>;

// y = act(x) for V elements, each to be rounded to T: the fast form, then the accurate one for the elements whose
// rounding is in doubt (a branch per element, taken by a warp for a few elements in a thousand).
template <class T, int Act, int V>
__device__ __forceinline__ void act_fwd_vec(const float (&x)[V], float (&y)[V]) {
  constexpr int A = pointwise(Act);
  if constexpr (kFast<T, Act>) {
    unsigned doubt = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      bool d;
      y[j] = cuda::act_fwd_fast<T, A>(x[j], d);
      doubt |= unsigned(d) << j;
    }
    if (doubt) {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (doubt >> j & 1u) y[j] = cuda::act_fwd<A>(x[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = cuda::act_fwd<A>(x[j]);
  }
}

template <class T, int Act, int V>
__global__ void glu_fwd(FwdArgs p) {
  // Launched as a programmatic dependent (decode steps chain these kernels): the kernel ahead's writes first; the
  // next kernel may start its own prologue meanwhile.
  cuda::grid_dependency_wait();
  cuda::allow_dependents();
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= p.cols) return;
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows; row += row_step) {
    float a[V], b[V], c[V];
    cuda::load_vecs<T, V>(static_cast<const T*>(p.a) + row * p.a_stride + col, a,
                          static_cast<const T*>(p.b) + row * p.b_stride + col, b);
    // Rounded where Hugging Face's `act_fn(a * g) * b` rounds in T (a * 1 and products with 1 are exact: the default
    // costs a few register operations per element, no memory traffic).
#pragma unroll
    for (int j = 0; j < V; ++j) a[j] = round_to<T>(a[j] * p.gate);
    act_fwd_vec<T, Act, V>(a, c);
#pragma unroll
    for (int j = 0; j < V; ++j) c[j] = round_to<T>(c[j]) * b[j] * p.down;
    store_vec<T, V>(static_cast<T*>(p.c) + row * p.c_stride + col, c);
  }
}

template <class T, int Act, int V>
__global__ void glu_bwd(BwdArgs p) {
  const int64_t col = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= p.cols) return;
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows; row += row_step) {
    float a[V], b[V], dc[V], da[V], db[V];
    cuda::load_vecs<T, V>(static_cast<const T*>(p.a) + row * p.a_stride + col, a,
                          static_cast<const T*>(p.b) + row * p.b_stride + col, b,
                          static_cast<const T*>(p.dc) + row * p.dc_stride + col, dc);
    // The roundings autograd takes through Hugging Face's module: x = a * g and dy = dc * d * b in T, then
    // da = round(dy act'(x)) * g and db = dc * d * round(act(x)), in the accurate forms (certified fast ones lost to
    // them where measured: docs/performance/swiglu-geglu.md).
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float x = round_to<T>(a[j] * p.gate), u = dc[j] * p.down;
      da[j] = round_to<T>(cuda::act_bwd<pointwise(Act)>(x, round_to<T>(u * b[j]))) * p.gate;
      db[j] = u * round_to<T>(cuda::act_fwd<pointwise(Act)>(x));
    }
    store_vec<T, V>(static_cast<T*>(p.da) + row * p.da_stride + col, da);
    store_vec<T, V>(static_cast<T*>(p.db) + row * p.db_stride + col, db);
  }
}

}  // namespace kern
}  // namespace tigon::swiglu
