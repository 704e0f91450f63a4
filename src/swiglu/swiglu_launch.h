// SwiGLU / GeGLU launch shapes and the typed launchers (defined in swiglu_launch.cuh). swiglu_cuda.cu plans the
// launch from the problem alone.
#pragma once

#include <cuda_runtime.h>

#include "swiglu/swiglu_kernels.cuh"

namespace tigon::swiglu {

struct Launch {
  bool vec = false;  // 16-byte vectors (V = 16 / sizeof(T)), else one element per thread
  dim3 block, grid;
};

template <class T>
void launch_fwd(const FwdArgs& a, int activation, const Launch& l, cudaStream_t stream);
template <class T>
void launch_bwd(const BwdArgs& a, int activation, const Launch& l, cudaStream_t stream);

}  // namespace tigon::swiglu
