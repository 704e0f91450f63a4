// Hopper backward kernel, head dim 128 (bf16 and fp16).
#include "attention/attention_bwd_sm90_launch.cuh"

namespace tigon::attention::sm90 {

void bwd_hdim128(const BwdProblem& p, void* workspace, cudaStream_t stream) {
  launch_bwd_any_dtype<128>(p, workspace, stream);
}

}  // namespace tigon::attention::sm90
