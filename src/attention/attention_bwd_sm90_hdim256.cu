// Hopper backward kernel, head dim 256 (bf16 and fp16).
#include "attention/attention_bwd_sm90_launch.cuh"

namespace tigon::attention::sm90 {

void bwd_hdim256(const BwdProblem& p, void* workspace, cudaStream_t stream) {
  launch_bwd_any_dtype<256>(p, workspace, stream);
}

}  // namespace tigon::attention::sm90
