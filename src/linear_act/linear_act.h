// Linear + activation inside the library: the validated problems both implementations take, and the workspace layout
// the C API and the CUDA path share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/linear_act.h"

namespace tigon::linear_act {

// data nullptr: not given.
struct FwdProblem {
  RowMatrix x;                 // [M, K]
  RowMatrix w;                 // [N, K]
  const void* bias = nullptr;  // N values of x's dtype
  RowMatrix residual, out, z;  // [M, N]
  int activation = TIGON_ACT_NONE;
};

struct BwdProblem {
  RowMatrix dy, x, w;
  RowMatrix saved;     // z, or for RELU the output y (the sign is the same)
  RowMatrix dz;        // dy ∘ act'(z); for NONE: dy itself
  RowMatrix dx;        // [M, K]
  void* dw = nullptr;  // [N, K] contiguous
  DType dw_dtype = DType::kFloat32;
  void* db = nullptr;  // N values
  DType db_dtype = DType::kFloat32;
  int activation = TIGON_ACT_NONE;
};

// cuBLASLt's scratch (split-K and stream-K kernels): what NVIDIA recommends on Hopper.
constexpr size_t kGemmWorkspace = size_t(32) << 20;

// The CUDA path's workspace: GEMM scratch first, then (backward) the fp32 partial column sums of dZ.
struct Workspace {
  size_t partials_at = 0, bytes = 0;
};
Workspace fwd_workspace(bool cuda);
Workspace bwd_workspace(int64_t rows, int64_t cols, DType dtype, bool cuda);

// CPU reference: fp64 sums, the CUDA path's roundings (linear_act_ref.cpp).
void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);

// CUDA path (linear_act_cuda.cu). workspace: as laid out above; stream: a cudaStream_t.
void fwd_cuda(const FwdProblem& p, void* workspace, void* stream);
void bwd_cuda(const BwdProblem& p, const Workspace& ws, void* workspace, void* stream);

}  // namespace tigon::linear_act
