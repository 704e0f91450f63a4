// Pointwise activations inside the library: the validated problems both implementations take. Linear + activation
// runs its activation, residual add and activation gradient (with the bias gradient's column sums) through these.
#pragma once

#include <cstdint>

#include "common/tensor.h"
#include "tigon/activation.h"

namespace tigon::activation {

// y = act(x (+ bias)) (+ residual), rounded once. y may be exactly x.
struct FwdProblem {
  RowMatrix x, y;
  const void* bias = nullptr;  // [x.cols] of x's dtype, CUDA path only (linear + activation after a bare GEMM)
  RowMatrix residual;          // data nullptr: none (the C API of this family has none; linear + activation adds one)
  int activation = TIGON_ACT_NONE;
};

// The backward kernels' activation code for RELU2 differentiated from its output (2 sqrt(y), not 2 x).
constexpr int kActRelu2FromOutput = 0x100 | TIGON_ACT_RELU2;

// dx = dy * act'(saved), rounded once; saved is the input, or for RELU and NONE either the input or the output.
struct BwdProblem {
  RowMatrix dy, saved, dx;          // dx.data nullptr: not written (only the column sums)
  int activation = TIGON_ACT_NONE;  // or kActRelu2FromOutput (saved is RELU2's output)
  // Optional column sums of dx's values (linear + activation's bias gradient): fp32 partial rows written by the CUDA
  // path ([partial_rows(rows, cols, dtype), cols] in the workspace), for common/column_sum to add in a fixed order.
  float* partial = nullptr;
};

// The column-sum layout of bwd_cuda: blocks of 32 threads across (16-byte vectors of columns) by kSumRows rows; one
// partial row per block row, about kSumBlocks blocks in all (fewer when there are few rows).
constexpr int kSumRows = 8;
constexpr int64_t kSumBlocks = 2048;

// How many partial rows bwd_cuda writes for the column sums: from the shape alone, so it sizes a workspace.
int64_t partial_rows(int64_t rows, int64_t cols, DType dtype);

// CPU reference: fp64 math, one rounding (activation_ref.cpp). The CPU path takes no partials.
void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);

// CUDA path (activation_cuda.cu). stream is a cudaStream_t.
void fwd_cuda(const FwdProblem& p, void* stream);
void bwd_cuda(const BwdProblem& p, void* stream);

}  // namespace tigon::activation
