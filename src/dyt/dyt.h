// DyT inside the library: the validated problems both implementations take.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/dyt.h"

namespace tigon::dyt {

struct FwdProblem {
  RowMatrix x, y;
  const float* alpha = nullptr;  // one value, on x's device
  const void* gamma = nullptr;
  const void* beta = nullptr;           // nullptr: none
  DType param_dtype = DType::kFloat32;  // gamma's and beta's
};

struct BwdProblem {
  RowMatrix dy, x, dx;  // dx.data nullptr: not written
  const float* alpha = nullptr;
  const void* gamma = nullptr;
  DType param_dtype = DType::kFloat32;
  float* dalpha = nullptr;  // each nullptr: not wanted
  void* dgamma = nullptr;
  void* dbeta = nullptr;
  DType grad_dtype = DType::kFloat32;  // dgamma's and dbeta's
};

// The CUDA backward's partial sums: blocks of 32 x kSumRows threads, each writing one partial row per block row of
// its columns for dgamma, dbeta and dalpha; about kSumBlocks blocks (fewer with few rows).
constexpr int kSumRows = 8;
constexpr int64_t kSumBlocks = 2048;
int64_t partial_rows(int64_t rows, int64_t cols, DType dtype);
// Workspace bytes of the CUDA backward for these rows and columns: three [partial_rows, cols] fp32 arrays and one
// [cols] fp32 row of per-column dalpha sums.
size_t cuda_workspace_bytes(int64_t rows, int64_t cols, DType dtype);

void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);
void fwd_cuda(const FwdProblem& p, void* stream);
void bwd_cuda(const BwdProblem& p, void* workspace, void* stream);

}  // namespace tigon::dyt
