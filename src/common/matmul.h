// Matrix products on the tensor cores through cuBLASLt, on the caller's stream, with the caller's workspace.
// In cuBLASLt's column-major terms: D (m x n) = act(op(A) · op(B) (+ D when accumulating, or + C) (+ bias[i] on every
// row i)), act none, ReLU or GELU (tanh form) in the GEMM's epilogue.
// A row-major [r, c] tensor with row stride s is a column-major c x r matrix with leading dimension s.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"

namespace tigon::cuda {

// The activations cuBLASLt's epilogues apply (its GELU is the tanh approximation, F.gelu(approximate="tanh")).
enum class Epilogue { kNone, kRelu, kGelu };

struct Matmul {
  DType ab = DType::kBFloat16;  // A and B (fp32, fp16 or bf16; fp32 accumulation and scaling), or int8
  DType d = DType::kBFloat16;   // D: ab, or fp32; int32 for int8 A and B (int32 accumulation and scaling, IMMA:
                                // A transposed, B not, no epilogue, no C; cuBLASLt's rules in include/tigon/int8.h)
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
  const void* c = nullptr;     // beta = 1 with this C (m x n of type d, leading dimension ldc) instead of D
  int64_t ldc = 0;
  Epilogue act = Epilogue::kNone;
  void* aux = nullptr;  // kGelu: the activation's input (m x n of type d, leading dimension ldaux, a multiple of 8)
  int64_t ldaux = 0;
};

// workspace: scratch cuBLASLt may use (split-K, stream-K), 256-byte aligned; 32 MiB is what NVIDIA recommends on
// Hopper. Handles, descriptors and the heuristic's choice of algorithm are made on first use and cached per thread and
// device (keyed by everything the choice depends on), so a training loop pays for them once. Host work only.
void matmul(const Matmul& mm, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// As matmul(), but false (launching nothing) where cuBLASLt has no algorithm for the product, e.g. an epilogue it
// does not offer for these types or alignments; the caller then takes another path. Other failures throw.
bool try_matmul(const Matmul& mm, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace tigon::cuda
