// Pointwise activation CUDA path: launch shape, vector width, and the dtype / activation dispatch.
#include "activation/activation.h"
#include "activation/activation_kernels.cuh"
#include "common/cuda_check.h"
#include "common/row_launch.cuh"

namespace tigon::activation {
namespace {

using cuda::row_launch;
using cuda::vectorizable;
using Launch = cuda::RowLaunch;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The column sums' fixed layout (activation.h): 32 x kSumRows threads, partial_rows() block rows.
Launch sum_plan(const RowMatrix& m, bool vec) {
  Launch l;
  l.vec = vec;
  const int64_t lanes = 32 * (vec ? 16 / dtype_bytes(m.dtype) : 1);
  l.block = dim3(32, kSumRows);
  l.grid = dim3(unsigned(ceil_div(m.cols, lanes)), unsigned(partial_rows(m.rows, m.cols, m.dtype)));
  return l;
}

template <class T, int Act>
void fwd_act(const FwdArgs& a, const Launch& l, cudaStream_t s) {
  constexpr int V = 16 / sizeof(T);
  if (a.residual) {
    if (l.vec)
      kern::act_fwd_kernel<T, Act, V, true><<<l.grid, l.block, 0, s>>>(a);
    else
      kern::act_fwd_kernel<T, Act, 1, true><<<l.grid, l.block, 0, s>>>(a);
  } else {
    if (l.vec)
      kern::act_fwd_kernel<T, Act, V, false><<<l.grid, l.block, 0, s>>>(a);
    else
      kern::act_fwd_kernel<T, Act, 1, false><<<l.grid, l.block, 0, s>>>(a);
  }
}

// The column sums serve linear + activation, whose activations end at SILU: the squared ReLU's kernels have none.
constexpr bool has_sums(int act) { return act <= TIGON_ACT_SILU; }

template <class T, int Act>
void bwd_act(const BwdArgs& a, const Launch& l, cudaStream_t s) {
  constexpr int V = 16 / sizeof(T);
  if constexpr (!has_sums(Act)) {
    if (l.vec)
      kern::act_bwd_kernel<T, Act, V, false><<<l.grid, l.block, 0, s>>>(a);
    else
      kern::act_bwd_kernel<T, Act, 1, false><<<l.grid, l.block, 0, s>>>(a);
  } else if (a.partial) {
    if (l.vec)
      kern::act_bwd_kernel<T, Act, V, true><<<l.grid, l.block, 0, s>>>(a);
    else
      kern::act_bwd_kernel<T, Act, 1, true><<<l.grid, l.block, 0, s>>>(a);
  } else {
    if (l.vec)
      kern::act_bwd_kernel<T, Act, V, false><<<l.grid, l.block, 0, s>>>(a);
    else
      kern::act_bwd_kernel<T, Act, 1, false><<<l.grid, l.block, 0, s>>>(a);
  }
}

// Runs F<T, Act>(args...) for the runtime activation.
#define TIGON_SWITCH_ACT(act, F, T, ...)                                     \
  switch (act) {                                                             \
    case TIGON_ACT_RELU: F<T, TIGON_ACT_RELU>(__VA_ARGS__); break;           \
    case TIGON_ACT_GELU_ERF: F<T, TIGON_ACT_GELU_ERF>(__VA_ARGS__); break;   \
    case TIGON_ACT_GELU_TANH: F<T, TIGON_ACT_GELU_TANH>(__VA_ARGS__); break; \
    case TIGON_ACT_SILU: F<T, TIGON_ACT_SILU>(__VA_ARGS__); break;           \
    case TIGON_ACT_RELU2: F<T, TIGON_ACT_RELU2>(__VA_ARGS__); break;         \
    default: F<T, TIGON_ACT_NONE>(__VA_ARGS__);                              \
  }

}  // namespace

void fwd_cuda(const FwdProblem& p, void* stream) {
  const FwdArgs a{p.x.data, p.bias,         p.residual.data,       p.y.data,      p.x.rows,
                  p.x.cols, p.x.row_stride, p.residual.row_stride, p.y.row_stride};
  const Launch l = row_launch(p.x, vectorizable({&p.x, &p.y, &p.residual}) && (!p.bias || cuda::aligned16(p.bias)));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  TIGON_SWITCH_FLOAT(p.x.dtype, T, TIGON_SWITCH_ACT(p.activation, fwd_act, T, a, l, s));
  TIGON_CUDA_CHECK_LAUNCH();
}

void bwd_cuda(const BwdProblem& p, void* stream) {
  const BwdArgs a{p.dy.data, p.saved.data,    p.dx.data,          p.partial,      p.dy.rows,
                  p.dy.cols, p.dy.row_stride, p.saved.row_stride, p.dx.row_stride};
  const bool vec = vectorizable({&p.dy, &p.saved, &p.dx});
  const Launch l = p.partial ? sum_plan(p.dy, vec) : row_launch(p.dy, vec);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.activation == kActRelu2FromOutput) {
    TIGON_SWITCH_FLOAT(p.dy.dtype, T, (bwd_act<T, kActRelu2FromOutput>(a, l, s)));
  } else {
    TIGON_SWITCH_FLOAT(p.dy.dtype, T, TIGON_SWITCH_ACT(p.activation, bwd_act, T, a, l, s));
  }
  TIGON_CUDA_CHECK_LAUNCH();
}

}  // namespace tigon::activation
