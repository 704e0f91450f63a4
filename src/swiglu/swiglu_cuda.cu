// SwiGLU / GeGLU CUDA path: launch shape and dtype dispatch.
#include "common/cuda_types.cuh"
#include "common/row_launch.cuh"
#include "swiglu/swiglu.h"
#include "swiglu/swiglu_launch.cuh"

namespace tigon::swiglu {

using cuda::row_launch;
using cuda::vectorizable;

void fwd_cuda(const FwdProblem& p, void* stream) {
  const FwdArgs a{p.a.data,       p.b.data,       p.c.data,       p.a.rows, p.a.cols,
                  p.a.row_stride, p.b.row_stride, p.c.row_stride, p.gate,   p.down};
  const Launch l = row_launch(p.a, vectorizable({&p.a, &p.b, &p.c}));
  TIGON_SWITCH_FLOAT(p.a.dtype, T, launch_fwd<T>(a, p.activation, l, static_cast<cudaStream_t>(stream)));
}

void bwd_cuda(const BwdProblem& p, void* stream) {
  const BwdArgs a{p.dc.data,       p.a.data,       p.b.data,       p.da.data,       p.db.data,       p.a.rows, p.a.cols,
                  p.dc.row_stride, p.a.row_stride, p.b.row_stride, p.da.row_stride, p.db.row_stride, p.gate,   p.down};
  const Launch l = row_launch(p.a, vectorizable({&p.dc, &p.a, &p.b, &p.da, &p.db}));
  TIGON_SWITCH_FLOAT(p.a.dtype, T, launch_bwd<T>(a, p.activation, l, static_cast<cudaStream_t>(stream)));
}

}  // namespace tigon::swiglu
