// GroupNorm inside the library: the validated problems both implementations take.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/group_norm.h"

namespace tigon::group_norm {

// [N, C, S] contiguous: sample n, channel c, position s at (n * C + c) * S + s.
struct Shape {
  int64_t n = 0, c = 0, s = 1, groups = 1;
  DType dtype = DType::kFloat32;
  int64_t group_channels() const { return c / groups; }
  int64_t group_size() const { return c / groups * s; }  // elements normalised together
};

struct FwdProblem {
  Shape shape;
  const void* x = nullptr;
  void* y = nullptr;
  const void* weight = nullptr;  // each nullptr: 1 and 0
  const void* bias = nullptr;
  DType param_dtype = DType::kFloat32;  // weight's and bias's
  float* mean = nullptr;                // [N, G]
  float* rstd = nullptr;
  float eps = 0.f;
};

struct BwdProblem {
  Shape shape;
  const void* dy = nullptr;
  const void* x = nullptr;
  void* dx = nullptr;  // nullptr: not written
  const void* weight = nullptr;
  DType param_dtype = DType::kFloat32;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  void* dweight = nullptr;  // each nullptr: not wanted
  void* dbias = nullptr;
  DType grad_dtype = DType::kFloat32;  // dweight's and dbias's
};

// CUDA backward workspace: per-(sample, channel) fp32 partial sums of dy * xhat and dy, two [N, C] arrays.
size_t cuda_workspace_bytes(const Shape& s);

void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);
void fwd_cuda(const FwdProblem& p, void* stream);
void bwd_cuda(const BwdProblem& p, void* workspace, void* stream);

}  // namespace tigon::group_norm
