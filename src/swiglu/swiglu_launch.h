// SwiGLU / GeGLU launch shapes and the typed launchers (defined in swiglu_launch.cuh). swiglu_cuda.cu plans the
// launch from the problem alone.
#pragma once

#include <cuda_runtime.h>

#include "common/row_launch.cuh"
#include "swiglu/swiglu_kernels.cuh"

namespace tigon::swiglu {

using Launch = cuda::RowLaunch;

template <class T>
void launch_fwd(const FwdArgs& a, int activation, const Launch& l, cudaStream_t stream);
template <class T>
void launch_bwd(const BwdArgs& a, int activation, const Launch& l, cudaStream_t stream);

}  // namespace tigon::swiglu
