// Attention backward kernels for bf16 tensors.
#include "attention/attention_bwd_kernels.cuh"

namespace tigon::attention::bwd {
void launch_bf16(const Params& p, cudaStream_t stream) { launch<cute::bfloat16_t>(p, stream); }
}  // namespace tigon::attention::bwd
