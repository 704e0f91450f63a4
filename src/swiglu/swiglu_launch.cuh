// Typed launchers: the activation becomes a template argument here. Included by swiglu_cuda.cu only.
#pragma once

#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "swiglu/swiglu_kernels.cuh"
#include "swiglu/swiglu_launch.h"

namespace tigon::swiglu {

// The forward launches as a programmatic dependent of the kernel before it (glu_fwd waits for it first).
template <class T, int Act>
void launch_fwd_act(const FwdArgs& a, const Launch& l, cudaStream_t stream) {
  if (l.vec)
    cuda::launch_pdl(l.grid, l.block, 0, stream, kern::glu_fwd<T, Act, 16 / sizeof(T)>, a);
  else
    cuda::launch_pdl(l.grid, l.block, 0, stream, kern::glu_fwd<T, Act, 1>, a);
}

template <class T, int Act>
void launch_bwd_act(const BwdArgs& a, const Launch& l, cudaStream_t stream) {
  if (l.vec)
    kern::glu_bwd<T, Act, 16 / sizeof(T)><<<l.grid, l.block, 0, stream>>>(a);
  else
    kern::glu_bwd<T, Act, 1><<<l.grid, l.block, 0, stream>>>(a);
}

template <class T>
void launch_fwd(const FwdArgs& a, int activation, const Launch& l, cudaStream_t stream) {
  switch (activation) {
    case TIGON_GLU_SILU: launch_fwd_act<T, TIGON_GLU_SILU>(a, l, stream); break;
    case TIGON_GLU_GELU_TANH: launch_fwd_act<T, TIGON_GLU_GELU_TANH>(a, l, stream); break;
    default: launch_fwd_act<T, TIGON_GLU_GELU_ERF>(a, l, stream);
  }
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_bwd(const BwdArgs& a, int activation, const Launch& l, cudaStream_t stream) {
  switch (activation) {
    case TIGON_GLU_SILU: launch_bwd_act<T, TIGON_GLU_SILU>(a, l, stream); break;
    case TIGON_GLU_GELU_TANH: launch_bwd_act<T, TIGON_GLU_GELU_TANH>(a, l, stream); break;
    default: launch_bwd_act<T, TIGON_GLU_GELU_ERF>(a, l, stream);
  }
  TIGON_CUDA_CHECK_LAUNCH();
}

}  // namespace tigon::swiglu
