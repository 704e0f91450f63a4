// Hopper forward kernel, head dim 96 (bf16 and fp16).
#include "attention/attention_fwd_sm90_launch.cuh"

namespace tigon::attention::sm90 {

void fwd_hdim96(const FwdProblem& p, cudaStream_t stream) { launch_fwd_any_dtype<96>(p, stream); }

}  // namespace tigon::attention::sm90
