// PolyNorm inside the library: the validated problems both implementations take.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/poly_norm.h"

namespace tigon::poly_norm {

struct FwdProblem {
  RowMatrix x, y;
  const float* weight = nullptr;  // 3 values: the x^3, x^2 and x terms
  const float* bias = nullptr;    // 1 value
  float* rstd = nullptr;          // [rows, 3] (x^3, x^2, x) or nullptr
  float eps = 1e-6f;
};

struct BwdProblem {
  RowMatrix dy, x, dx;  // dx.data nullptr: not written
  const float* weight = nullptr;
  const float* rstd = nullptr;  // [rows, 3]
  float* dweight = nullptr;     // 3 values or nullptr
  float* dbias = nullptr;       // 1 value or nullptr
};

// Blocks of the CUDA backward (each writes one partial row of the parameter sums): from the rows and the device.
int64_t partial_rows(int64_t rows, int device);
size_t cuda_workspace_bytes(int64_t rows, int device);

void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);
void fwd_cuda(const FwdProblem& p, void* stream);
void bwd_cuda(const BwdProblem& p, void* workspace, void* stream);

}  // namespace tigon::poly_norm
