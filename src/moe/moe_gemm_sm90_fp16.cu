// The MoE grouped GEMMs in fp16 (moe_gemm_sm90.cuh); one translation unit per dtype so the two compile in parallel.
#include "moe/moe_gemm_sm90.cuh"

namespace tigon::moe {

size_t grouped_gemm_workspace_fp16(int64_t experts, int device) {
  return sm90::Kinds<cutlass::half_t>::workspace(experts, device);
}

void grouped_gemm_fp16(const GroupedGemm& g, void* workspace, int device, cudaStream_t stream) {
  sm90::Kinds<cutlass::half_t>::gemm(g, workspace, device, stream);
}

}  // namespace tigon::moe
