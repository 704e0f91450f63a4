// Cross entropy inside the library: the validated problems the C API hands to either implementation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor.h"
#include "tigon/cross_entropy.h"

namespace tigon::cross_entropy {

struct FwdProblem {
  RowMatrix logits;
  RowMatrix grad;  // grad.data == nullptr: no gradient wanted; may equal logits (written over it)
  const void* target = nullptr;
  bool target64 = true;           // int64 targets, else int32
  const float* weight = nullptr;  // nullptr: every class weighs 1
  float* loss = nullptr;          // rows elements for NONE, else 1
  float* z_loss = nullptr;        // optional, like loss
  float* accuracy = nullptr;      // optional, like loss
  int64_t* predicted = nullptr;   // optional, rows elements whatever the reduction: argmax, -1 for ignored rows
  bool token_scaling = false;     // each row's loss and gradient times its (detached) target probability
  int64_t ignore_index = -100;
  float smoothing = 0.f, z_scale = 0.f, softcap = 0.f;
  int reduction = TIGON_REDUCTION_MEAN;
};

struct BwdProblem {
  RowMatrix grad;
  const float* grad_output = nullptr;
  int64_t go_stride = 0;  // elements between rows' scales; 0 for one scale for all (or an expanded vector)
  bool per_row = false;   // grad_output has one value per row
};

// Workspace of the CUDA path: totals (W, C, sum of class weights) then three fp32 values per row.
size_t fwd_workspace_bytes(int64_t rows);

// Argument checks shared with the ops built on cross entropy (cross_entropy_api.cpp): the options, and on the CPU
// the targets (outside [0, V) and not ignore_index is an error naming 'target').
void check_params(const tigon_cross_entropy_params& p);
// An optional int64 output of `rows` elements on the device of `on` (named on_name): NULL when t is.
int64_t* check_predicted(const tigon_tensor* t, const tigon_tensor& on, const char* on_name, int64_t rows);
void check_targets_on_host(const FwdProblem& p);

// CPU reference: fp64 accumulation, written for clarity (cross_entropy_ref.cpp).
void fwd_cpu(const FwdProblem& p);
void bwd_cpu(const BwdProblem& p);

// CUDA path (cross_entropy_cuda.cu). stream is a cudaStream_t.
void fwd_cuda(const FwdProblem& p, void* workspace, void* stream);
void bwd_cuda(const BwdProblem& p, void* stream);

}  // namespace tigon::cross_entropy

// Test-only entries (exported, not in the public headers): tigon_testing_cross_entropy_kernel picks the CUDA row
// kernel for this process ("cluster", "cluster1" to "cluster8", "classic"; NULL: back to the library's plan), and
// tigon_testing_cross_entropy_last_kernel names the one this thread's last forward ran.
extern "C" {
TIGON_API tigon_status_t tigon_testing_cross_entropy_kernel(const char* name);
TIGON_API const char* tigon_testing_cross_entropy_last_kernel(void);
}
