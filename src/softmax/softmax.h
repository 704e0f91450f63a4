// Softmax inside the library: the validated problems (common/rowwise.h) both implementations take.
#pragma once

#include "common/rowwise.h"
#include "tigon/softmax.h"

namespace tigon::softmax {

using rowwise::BwdProblem;
using rowwise::FwdProblem;

void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);
void fwd_cuda(const FwdProblem& p, void* stream);
void bwd_cuda(const BwdProblem& p, void* stream);

}  // namespace tigon::softmax
