// Fused linear + cross entropy inside the library: the validated problem both implementations take, and the chunk
// plan (how many tokens per chunk, what the workspace holds) that the C API, the CUDA path and Python all share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "cross_entropy/cross_entropy.h"
#include "tigon/fused_linear_cross_entropy.h"

namespace tigon::fused_linear_cross_entropy {

struct Problem {
  RowMatrix x;                 // [N, H]
  RowMatrix w;                 // [V, H]
  const void* bias = nullptr;  // V elements of w's dtype
  // target, class weight, loss outputs and options; its logits and grad are set by each implementation
  cross_entropy::FwdProblem ce;
  const float* grad_output = nullptr;  // nullptr: none (the gradients of the loss itself)
  int64_t go_stride = 0;               // elements between tokens' values; 0: one value for all
  RowMatrix dx;                        // data nullptr: not wanted
  void* dw = nullptr;                  // [V, H] contiguous
  DType dw_dtype = DType::kFloat32;
  bool narrow_dw = false;  // dw is fp32 and ends in w's 16-bit dtype, in place
  void* db = nullptr;      // V elements
  DType db_dtype = DType::kFloat32;

  bool wants_grad() const { return dx.data || dw || db; }
};

// cuBLASLt's scratch in the workspace (split-K and stream-K kernels): what NVIDIA recommends on Hopper.
constexpr size_t kGemmWorkspace = size_t(32) << 20;

// How the tokens are cut, and where things sit in the CUDA path's workspace (byte offsets, each 256-aligned).
struct Plan {
  int64_t chunk_rows = 0, chunks = 0;
  int64_t ld = 0;  // elements between rows of the logits chunk: V rounded up to 8 (16-byte rows for any dtype)
  size_t gemm_at = 0, partials_at = 0, db_at = 0, logits_at = 0, bytes = 0;
};

// rows = N, cols = V, dtype = x's; cuda: whether the workspace is needed (the chunking is the same either way, so
// the CPU tests exercise the same decisions about dW's buffer).
Plan make_plan(int64_t rows, int64_t cols, DType dtype, const tigon_fused_linear_cross_entropy_params& params,
               bool cuda);

// CPU reference: fp64, chunk-free, the CUDA path's roundings (fused_linear_cross_entropy_ref.cpp).
void fwd_cpu(const Problem& p);

// CUDA path (fused_linear_cross_entropy_cuda.cu). stream is a cudaStream_t.
void fwd_cuda(const Problem& p, const Plan& plan, void* workspace, void* stream);

}  // namespace tigon::fused_linear_cross_entropy
