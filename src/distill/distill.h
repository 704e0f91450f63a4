// Distillation divergences inside the library: the validated problem the C API hands to either implementation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/distill.h"

namespace tigon::distill {

// The divergence the kernels compute: JSD's end points are the two KLs, each with its own (cheaper) form.
enum class Kind { kForwardKL, kReverseKL, kJSD, kTVD };

struct FwdProblem {
  RowMatrix student, teacher;
  RowMatrix grad;  // grad.data == nullptr: no gradient wanted; may equal student or teacher (written over it)
  const void* labels = nullptr;
  bool labels64 = true;
  float* loss = nullptr;  // rows elements for NONE, else 1
  Kind kind = Kind::kForwardKL;
  int teacher_mode = TIGON_DISTILL_TEACHER_LOGITS;
  int reduction = TIGON_DISTILL_REDUCTION_BATCHMEAN;
  float beta = 0.5f, temperature = 1.f;
  int64_t ignore_index = -100;
};

// The kernels' divergence for validated params: KL, JSD(0) -> forward KL, JSD(1) -> reverse KL.
Kind kind_of(const tigon_distill_params& p);

// Workspace of the CUDA path: the count of rows kept (padded to 4 floats), then one loss per row.
size_t fwd_workspace_bytes(int64_t rows);

// CPU reference: fp64 accumulation, written for clarity (distill_ref.cpp).
void fwd_cpu(const FwdProblem& p);

// CUDA path (distill_cuda.cu). stream is a cudaStream_t.
void fwd_cuda(const FwdProblem& p, void* workspace, void* stream);

}  // namespace tigon::distill

// Test-only entries (exported, not in the public headers): tigon_testing_distill_kernel picks the CUDA row kernel for
// this process ("cluster", "classic"; NULL: the library's plan), and tigon_testing_distill_last_kernel names the one
// this thread's last forward ran ("cluster<N>" or "classic").
extern "C" {
TIGON_API tigon_status_t tigon_testing_distill_kernel(const char* name);
TIGON_API const char* tigon_testing_distill_last_kernel(void);
}
