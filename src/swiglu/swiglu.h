// SwiGLU / GeGLU inside the library: the validated problems the C API hands to either implementation.
#pragma once

#include "common/tensor.h"
#include "tigon/swiglu.h"

namespace tigon::swiglu {

struct FwdProblem {
  RowMatrix a, b, c;
  int activation = TIGON_GLU_SILU;
};

struct BwdProblem {
  RowMatrix dc, a, b, da, db;
  int activation = TIGON_GLU_SILU;
};

// CPU reference: fp64 math, one rounding per output (swiglu_ref.cpp).
void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);

// CUDA path (swiglu_cuda.cu). stream is a cudaStream_t.
void fwd_cuda(const FwdProblem& p, void* stream);
void bwd_cuda(const BwdProblem& p, void* stream);

}  // namespace tigon::swiglu
