// Embedding inside the library: the validated problems both implementations take.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/embedding.h"

namespace tigon::embedding {

struct Indices {
  const void* data = nullptr;
  DType dtype = DType::kInt64;  // or kInt32
  int64_t n = 0;
};

struct FwdProblem {
  Indices idx;
  RowMatrix weight, y;
};

struct BwdProblem {
  Indices idx;
  RowMatrix dy, dweight;  // dweight.rows: the vocabulary V
  int64_t padding_idx = -1;
};

// CUDA backward workspace: keys and positions before and after the sort, the sort's own temporary storage, and two
// fp32 partial-sum rows of `cols` per 64 sorted positions (an eighth of an n x cols bf16 gradient's bytes).
size_t cuda_workspace_bytes(int64_t n, int64_t vocab, int64_t cols);

void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);
void fwd_cuda(const FwdProblem& p, void* stream);
void bwd_cuda(const BwdProblem& p, void* workspace, void* stream);

}  // namespace tigon::embedding
