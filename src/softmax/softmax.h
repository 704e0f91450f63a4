// Softmax inside the library: the validated problems both implementations take.
#pragma once

#include "common/tensor.h"
#include "tigon/softmax.h"

namespace tigon::softmax {

struct FwdProblem {
  RowMatrix x, y;
};

struct BwdProblem {
  RowMatrix dy, y, dx;
};

void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);
void fwd_cuda(const FwdProblem& p, void* stream);
void bwd_cuda(const BwdProblem& p, void* stream);

}  // namespace tigon::softmax
