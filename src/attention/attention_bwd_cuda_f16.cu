// Attention backward kernels for fp16 tensors.
#include "attention/attention_bwd_kernels.cuh"

namespace tigon::attention::bwd {
void launch_f16(const Params& p, cudaStream_t stream) { launch<cute::half_t>(p, stream); }
}  // namespace tigon::attention::bwd
