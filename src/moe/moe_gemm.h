// The MoE block's grouped GEMMs: one GEMM per expert over that expert's slice of the rows sorted by expert, with
// the slices' bounds read from device memory (offsets), so the host never learns how many rows each expert got.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"

namespace tigon::moe {

enum class GemmKind {
  // D_e [m_e, n] = A_e [m_e, k] W_e^T, W_e = b + e n k a row-major [n, k] (a projection: x W^T)
  kForward,
  // D_e [m_e, n] = A_e [m_e, k] W_e, W_e = b + e k n a row-major [k, n] (a projection's data gradient)
  kData,
  // D_e [m, n] = A_e^T B_e with A_e [m_e, m] and B_e [m_e, n] row slices, D_e = d + e m n (a weight gradient);
  // experts with m_e = 0 are skipped (their D_e is left as it is)
  kWeight,
};

struct GroupedGemm {
  GemmKind kind = GemmKind::kForward;
  DType dtype = DType::kBFloat16;  // every operand: bf16 or fp16, fp32 accumulation, one rounding
  int64_t experts = 0;
  const int64_t* offsets = nullptr;  // device [experts + 1]: expert e's rows are [offsets[e], offsets[e + 1])
  int64_t m = 0, n = 0, k = 0;       // the fixed sizes: n and k (kForward, kData) or m and n (kWeight)
  const void* a = nullptr;           // the sorted rows [P, lda]
  int64_t lda = 0;
  const void* b = nullptr;  // the experts' weights (kForward, kData) or the sorted rows [P, ldb] (kWeight)
  int64_t ldb = 0;
  void* d = nullptr;  // the sorted rows [P, ldd] (kForward, kData) or the experts' weights (kWeight)
  int64_t ldd = 0;
};

// Workspace of one grouped GEMM of any kind over `experts` groups (per-expert metadata and CUTLASS's own).
size_t grouped_gemm_workspace(int64_t experts, int device);

void grouped_gemm(const GroupedGemm& g, void* workspace, int device, cudaStream_t stream);

// The instantiations, one translation unit per dtype.
size_t grouped_gemm_workspace_bf16(int64_t experts, int device);
size_t grouped_gemm_workspace_fp16(int64_t experts, int device);
void grouped_gemm_bf16(const GroupedGemm& g, void* workspace, int device, cudaStream_t stream);
void grouped_gemm_fp16(const GroupedGemm& g, void* workspace, int device, cudaStream_t stream);

}  // namespace tigon::moe
