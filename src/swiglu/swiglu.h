// SwiGLU / GeGLU inside the library: the validated problems the C API hands to either implementation.
#pragma once

#include "common/tensor.h"
#include "tigon/swiglu.h"

namespace tigon::swiglu {

// gate and down: the multipliers, 1 when the params said 0.
struct FwdProblem {
  RowMatrix a, b, c;
  int activation = TIGON_GLU_SILU;
  float gate = 1.f, down = 1.f;
};

struct BwdProblem {
  RowMatrix dc, a, b, da, db;
  int activation = TIGON_GLU_SILU;
  float gate = 1.f, down = 1.f;
};

// CPU reference: fp64 math, rounded to the dtype where Hugging Face's module rounds (swiglu_ref.cpp).
void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);

// CUDA path (swiglu_cuda.cu). stream is a cudaStream_t.
void fwd_cuda(const FwdProblem& p, void* stream);
void bwd_cuda(const BwdProblem& p, void* stream);

}  // namespace tigon::swiglu
