// The Hopper forward kernel's entry points, one per head dim (each in its own translation unit, so the builds run in
// parallel). They take a problem whose q, k, v and o meet fwd_cuda's checks (attention_fwd_cuda.cu).
#pragma once

#include <cuda_runtime.h>

#include "attention/attention.h"

namespace tigon::attention::sm90 {

void fwd_hdim64(const FwdProblem& p, cudaStream_t stream);
void fwd_hdim96(const FwdProblem& p, cudaStream_t stream);
void fwd_hdim128(const FwdProblem& p, cudaStream_t stream);
void fwd_hdim256(const FwdProblem& p, cudaStream_t stream);

}  // namespace tigon::attention::sm90
