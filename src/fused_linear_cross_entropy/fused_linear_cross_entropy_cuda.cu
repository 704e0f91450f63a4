// Fused linear + cross entropy, CUDA path. The design and why (docs/design/fused-linear-cross-entropy.md has the
// numbers):
//  - The three GEMMs are the cost (at N = 4096, H = 4096, V = 128256 each is 4.3 TFLOP, ~6.4 ms on an H200); anything
//    else must be a small fraction of one of them. So the logits GEMM runs once per token, never a fourth GEMM to
//    recompute it (except for NONE with per-token upstream gradients, whose backward has to).
//  - Tokens go in chunks sized by the memory budget, never vocabulary slices: a chunk's logits (x's dtype, never fp32)
//    become its gradient in place through the cross entropy row kernel, which the dX and dW GEMMs then read.
//  - dW accumulates inside its own GEMM (beta = 1 after the first chunk, into fp32): no separate pass over a V x H
//    buffer per chunk. With one chunk a 16-bit dW is written by the GEMM directly (still one fp32 sum over all tokens).
//  - A 16-bit gradient from the fp32 accumulator is made in place, front to back, so no second V x H buffer exists.
//  - The cross entropy denominators (MEAN) are computed on the device over all tokens before the first chunk: each
//    chunk's gradient is final when written, and nothing waits on the host.
// Per chunk: GEMM (logits, + bias in the epilogue) -> row kernel (loss partials, gradient over the logits)
// [-> scale by grad_output] -> GEMM dX -> GEMM dW (+=) [-> bias column sums]. Around the loop: the totals kernel
// before, the finish kernel after, then the in-place narrowing of dW.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/column_sum.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/matmul.h"
#include "cross_entropy/cross_entropy_launch.h"
#include "fused_linear_cross_entropy/fused_linear_cross_entropy.h"

namespace tigon::fused_linear_cross_entropy {
namespace {

using cross_entropy::RowArgs;

// ---- dW: fp32 -> 16-bit in place --------------------------------------------------------------------------------
// Element i's 16-bit value goes to bytes [2i, 2i + 2), which belong to fp32 element i / 2. Converting [a, 2a) in
// parallel is safe once [0, a) is done: its writes land in [a/2, a), already read, and it reads nothing it writes.
// So: one block converts [0, kFirst) (reading everything before writing), then [a, 2a) for a = kFirst, 2 kFirst, ...
constexpr int kNarrowThreads = 256, kPer = 8;  // 8 values per thread: two 16-byte loads, one 16-byte store
constexpr int64_t kFirst = int64_t(kNarrowThreads) * kPer;

// Values [i, min(i + kPer, n)): vectors when all kPer are there, else one by one (n = V·H need not be a multiple of 8).
__device__ __forceinline__ int narrow_load(const float* buf, int64_t i, int64_t n, float (&v)[kPer]) {
  if (i + kPer <= n) {
    cuda::load_vec<float, kPer>(buf + i, v);
    return kPer;
  }
  const int k = i < n ? int(n - i) : 0;
  for (int j = 0; j < k; ++j) v[j] = buf[i + j];
  return k;
}

template <class T>
__device__ __forceinline__ void narrow_store(T* out, int64_t i, int k, const float (&v)[kPer]) {
  if (k == kPer) {
    cuda::store_vec<T, kPer>(out + i, v);
    return;
  }
  for (int j = 0; j < k; ++j) out[i + j] = cuda::from_f<T>(v[j]);
}

template <class T>
__global__ void __launch_bounds__(kNarrowThreads) narrow_first_kernel(float* buf, int64_t n) {
  const int64_t i = int64_t(threadIdx.x) * kPer;
  float v[kPer];
  const int k = narrow_load(buf, i, n, v);
  __syncthreads();  // every value of [0, kFirst) read before any is overwritten
  narrow_store(reinterpret_cast<T*>(buf), i, k, v);
}

template <class T>
__global__ void __launch_bounds__(kNarrowThreads) narrow_kernel(float* buf, int64_t begin, int64_t end) {
  for (int64_t i = begin + (int64_t(blockIdx.x) * kNarrowThreads + threadIdx.x) * kPer; i < end;
       i += int64_t(gridDim.x) * kNarrowThreads * kPer) {
    float v[kPer];
    narrow_store(reinterpret_cast<T*>(buf), i, narrow_load(buf, i, end, v), v);
  }
}

template <class T>
void narrow_in_place(float* buf, int64_t n, cudaStream_t s) {
  narrow_first_kernel<T><<<1, kNarrowThreads, 0, s>>>(buf, n);
  TIGON_CUDA_CHECK_LAUNCH();
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t max_blocks = int64_t(sm_count(device)) * 8;
  for (int64_t a = kFirst; a < n; a *= 2) {
    const int64_t end = std::min(2 * a, n);
    const int64_t blocks = std::min(max_blocks, (end - a + kFirst - 1) / kFirst);
    narrow_kernel<T><<<unsigned(blocks), kNarrowThreads, 0, s>>>(buf, a, end);
    TIGON_CUDA_CHECK_LAUNCH();
  }
}

// ---- db: column sums of a chunk's gradient, added in a fixed order (deterministic) --------------------------------
// blockDim (32, kSlices): thread (x, y) sums rows y, y + kSlices, ... of columns c and c + 32; the slices then add up
// in order. A warp reads 32 consecutive elements of a row at a time.
constexpr int kSlices = 8;

template <class T>
__global__ void __launch_bounds__(32 * kSlices)
    bias_grad_kernel(const T* g, int64_t rows, int64_t cols, int64_t ld, float* db, bool accumulate) {
  __shared__ float part[kSlices][64];
  const int64_t c0 = int64_t(blockIdx.x) * 64 + threadIdx.x, c1 = c0 + 32;
  float s0 = 0.f, s1 = 0.f;
  for (int64_t r = threadIdx.y; r < rows; r += kSlices) {
    const T* row = g + r * ld;
    if (c0 < cols) s0 += cuda::to_f<T>(row[c0]);
    if (c1 < cols) s1 += cuda::to_f<T>(row[c1]);
  }
  part[threadIdx.y][threadIdx.x] = s0;
  part[threadIdx.y][threadIdx.x + 32] = s1;
  __syncthreads();
  if (threadIdx.y >= 2) return;
  const int64_t c = threadIdx.y == 0 ? c0 : c1;
  const int j = threadIdx.x + 32 * threadIdx.y;
  if (c >= cols) return;
  float t = accumulate ? db[c] : 0.f;
  for (int y = 0; y < kSlices; ++y) t += part[y][j];
  db[c] = t;
}

}  // namespace

void fwd_cuda(const Problem& p, const Plan& plan, void* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  char* ws = static_cast<char*>(workspace);
  const int64_t N = p.x.rows, H = p.x.cols, V = p.w.rows;
  const DType dt = p.x.dtype;
  const int elt = dtype_bytes(dt);
  void* gemm_ws = ws + plan.gemm_at;
  float* partials = reinterpret_cast<float*>(ws + plan.partials_at);
  float* db32 = reinterpret_cast<float*>(ws + plan.db_at);
  char* logits = ws + plan.logits_at;

  // Cross entropy over all N tokens: totals now, per-token partials chunk by chunk, outputs at the end.
  const cross_entropy::FwdProblem& ce = p.ce;
  RowArgs all = cross_entropy::loss_args(ce, N, partials);
  all.cols = V;
  cross_entropy::launch_totals(all, partials, s);

  const bool grad = p.wants_grad();
  const auto at = [](const void* base, int64_t elems, int bytes) {
    return static_cast<const char*>(base) + elems * bytes;
  };
  for (int64_t c = 0; c < plan.chunks; ++c) {
    const int64_t r0 = c * plan.chunk_rows, rows = std::min(plan.chunk_rows, N - r0);
    const void* xc = at(p.x.data, r0 * p.x.row_stride, elt);

    cuda::Matmul lg;  // logits (column-major V x rows) = W (H x V)ᵀ · x_c (H x rows) + bias
    lg.ab = lg.d = dt;
    lg.trans_a = true;
    lg.m = V, lg.n = rows, lg.k = H;
    lg.a = p.w.data, lg.lda = p.w.row_stride;
    lg.b = xc, lg.ldb = p.x.row_stride;
    lg.dst = logits, lg.ldd = plan.ld;
    lg.bias = p.bias;
    cuda::matmul(lg, gemm_ws, kGemmWorkspace, s);

    RowArgs a = all;  // the chunk's rows; the gradient written over its logits
    a.logits = logits;
    a.grad = grad ? logits : nullptr;
    a.rows = rows;
    a.x_stride = a.g_stride = plan.ld;
    a.target = at(ce.target, r0, ce.target64 ? 8 : 4);
    a.row_ce += r0, a.row_z += r0, a.row_correct += r0;
    if (a.predicted) a.predicted += r0;
    TIGON_SWITCH_FLOAT(dt, T, cross_entropy::launch_rows<T>(a, true, s));
    if (!grad) continue;

    if (p.grad_output) {  // NONE's backward: each token's gradient times its upstream value, before the GEMMs
      cross_entropy::ScaleArgs sc;
      sc.grad = logits;
      sc.rows = rows, sc.cols = V, sc.stride = plan.ld;
      sc.grad_output = p.grad_output + r0 * p.go_stride;
      sc.go_stride = p.go_stride;
      TIGON_SWITCH_FLOAT(dt, T, cross_entropy::launch_scale<T>(sc, true, s));
    }
    if (p.dx.data) {  // dX_c (column-major H x rows) = W (H x V) · dL (V x rows)
      cuda::Matmul mx;
      mx.ab = mx.d = dt;
      mx.m = H, mx.n = rows, mx.k = V;
      mx.a = p.w.data, mx.lda = p.w.row_stride;
      mx.b = logits, mx.ldb = plan.ld;
      mx.dst = static_cast<char*>(p.dx.data) + r0 * p.dx.row_stride * elt, mx.ldd = p.dx.row_stride;
      cuda::matmul(mx, gemm_ws, kGemmWorkspace, s);
    }
    if (p.dw) {  // dW (column-major H x V) (+)= x_c (H x rows) · dL (V x rows)ᵀ
      cuda::Matmul mw;
      mw.ab = dt, mw.d = p.dw_dtype;
      mw.trans_b = true;
      mw.m = H, mw.n = V, mw.k = rows;
      mw.a = xc, mw.lda = p.x.row_stride;
      mw.b = logits, mw.ldb = plan.ld;
      mw.dst = p.dw, mw.ldd = H;
      mw.accumulate = c > 0;
      cuda::matmul(mw, gemm_ws, kGemmWorkspace, s);
    }
    if (p.db) {
      const dim3 block(32, kSlices);
      const unsigned blocks = unsigned((V + 63) / 64);
      TIGON_SWITCH_FLOAT(dt, T,
                         bias_grad_kernel<T>
                         <<<blocks, block, 0, s>>>(reinterpret_cast<const T*>(logits), rows, V, plan.ld, db32, c > 0));
      TIGON_CUDA_CHECK_LAUNCH();
    }
  }
  cross_entropy::launch_finish(all, ce.loss, ce.z_loss, ce.accuracy, ce.reduction, s);

  if (plan.chunks == 0) {  // no tokens: zero gradients
    if (p.dw) TIGON_CUDA_CHECK(cudaMemsetAsync(p.dw, 0, size_t(V * H) * dtype_bytes(p.dw_dtype), s));
    if (p.db) TIGON_CUDA_CHECK(cudaMemsetAsync(db32, 0, size_t(V) * sizeof(float), s));
  }
  if (p.dw && p.narrow_dw && dt != DType::kFloat32) {
    float* buf = static_cast<float*>(p.dw);
    if (dt == DType::kBFloat16)
      narrow_in_place<__nv_bfloat16>(buf, V * H, s);
    else
      narrow_in_place<__half>(buf, V * H, s);
  }
  if (p.db) cuda::column_sum(db32, 1, V, p.db, p.db_dtype, s);
}

}  // namespace tigon::fused_linear_cross_entropy
