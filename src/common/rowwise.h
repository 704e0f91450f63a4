// Row-wise ops over the last dimension whose backward reads only the forward's output (softmax, sparsemax): their
// shared problem types and argument validation.
#pragma once

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"

namespace tigon::rowwise {

struct FwdProblem {
  RowMatrix x, y;
  // The causal form: x is [..., L, L] and row r is row r % L of its matrix, which keeps its first r % L + 1 entries
  // (the rest masked as -inf, written as 0). 0: no mask.
  int64_t causal = 0;
};

struct BwdProblem {
  RowMatrix dy, y, dx;
};

// x [..., C] in fp32, fp16 or bf16 with C >= 1 (`op` names the op in the error), y like it; y may be exactly x.
FwdProblem fwd_problem(const tigon_tensor* x, const tigon_tensor* y, const char* op);
// The causal form of the above: x also [..., L, L] (square in its last two dimensions).
FwdProblem causal_fwd_problem(const tigon_tensor* x, const tigon_tensor* y, const char* op);
// y as x above, dy and dx like it; dx may be exactly dy or y.
BwdProblem bwd_problem(const tigon_tensor* dy, const tigon_tensor* y, const tigon_tensor* dx, const char* op);

// An op's C entries: validation, then cpu(p) or cuda(p) by the tensors' device (cuda wraps its launch in
// TIGON_ON_CUDA, so a CPU-only build never names the CUDA path). Nothing runs for zero rows.
template <class Cpu, class Cuda>
tigon_status_t fwd_entry(const char* entry, const char* op, const tigon_tensor* x, const tigon_tensor* y, Cpu cpu,
                         Cuda cuda, bool causal = false) {
  return api_guard(entry, [&] {
    const FwdProblem p = causal ? causal_fwd_problem(x, y, op) : fwd_problem(x, y, op);
    if (p.x.rows == 0) return;
    if (is_cuda(*x))
      cuda(p);
    else
      cpu(p);
  });
}

template <class Cpu, class Cuda>
tigon_status_t bwd_entry(const char* entry, const char* op, const tigon_tensor* dy, const tigon_tensor* y,
                         const tigon_tensor* dx, Cpu cpu, Cuda cuda) {
  return api_guard(entry, [&] {
    const BwdProblem p = bwd_problem(dy, y, dx, op);
    if (p.y.rows == 0) return;
    if (is_cuda(*y))
      cuda(p);
    else
      cpu(p);
  });
}

}  // namespace tigon::rowwise
