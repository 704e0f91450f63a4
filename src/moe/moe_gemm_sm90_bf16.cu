// The MoE grouped GEMMs in bf16 (moe_gemm_sm90.cuh); one translation unit per dtype so the two compile in parallel.
#include "moe/moe_gemm_sm90.cuh"

namespace tigon::moe {

size_t grouped_gemm_workspace_bf16(int64_t experts, int device) {
  return sm90::Kinds<cutlass::bfloat16_t>::workspace(experts, device);
}

void grouped_gemm_bf16(const GroupedGemm& g, void* workspace, int device, cudaStream_t stream) {
  sm90::Kinds<cutlass::bfloat16_t>::gemm(g, workspace, device, stream);
}

}  // namespace tigon::moe
