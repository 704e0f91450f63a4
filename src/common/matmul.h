// Matrix products on the tensor cores through cuBLASLt, on the caller's stream, with the caller's workspace.
// In cuBLASLt's column-major terms: D (m x n) = op(A) · op(B) (+ D when accumulating) (+ bias[i] on every row i).
// A row-major [r, c] tensor with row stride s is a column-major c x r matrix with leading dimension s.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"

namespace tigon::cuda {

struct Matmul {
  DType ab = DType::kBFloat16;  // A and B (fp32, fp16 or bf16); fp32 accumulation and scaling always
  DType d = DType::kBFloat16;   // D: ab, or fp32
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* dst = nullptr;
  int64_t ldd = 0;
  const void* bias = nullptr;  // m values of type d, added to every column (cuBLASLt's BIAS epilogue)
  bool accumulate = false;     // beta = 1: D += op(A) · op(B), in the GEMM's epilogue
};

// workspace: scratch cuBLASLt may use (split-K, stream-K), 256-byte aligned; 32 MiB is what NVIDIA recommends on
// Hopper. Handles, descriptors and the heuristic's choice of algorithm are made on first use and cached per thread and
// device (keyed by everything the choice depends on), so a training loop pays for them once. Host work only.
void matmul(const Matmul& mm, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace tigon::cuda
