// Distillation kernel arguments and the typed launchers of the row kernels, instantiated once per dtype in
// distill_cuda_<dtype>.cu so the dispatch in distill_cuda.cu compiles no row kernels itself.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "distill/distill.h"

namespace tigon::distill {

// Workspace layout (floats): kTotals totals (the count of rows kept first), then one loss per row.
enum Total { kCount = 0, kTotals = 4 };

struct RowArgs {
  const void* student = nullptr;
  const void* teacher = nullptr;
  void* grad = nullptr;  // nullptr: no gradient
  int64_t rows = 0, cols = 0, x_stride = 0, t_stride = 0, g_stride = 0;
  const void* labels = nullptr;  // nullptr: every row counts
  bool labels64 = true;
  int64_t ignore_index = -100;
  bool teacher_logits = true;  // LOGITS: the teacher's log-sum-exp is taken (else log-probabilities or probabilities)
  float inv_temp = 1.f;        // 1 / T
  float z_scale = 0.f;         // log2(e) / T: a student logit in the exp2 domain
  float t_scale = 0.f;         // log2(e) / T (LOGITS) or log2(e) (LOG_PROBS): a teacher value in the exp2 domain
  float t_log = 1.f;           // 1 / T (LOGITS) or 1 (LOG_PROBS): a teacher value as a natural-log term
  float beta = 0.5f;
  int reduction = TIGON_DISTILL_REDUCTION_BATCHMEAN;
  float* row_loss = nullptr;      // one per row: the workspace's, or the output itself for NONE
  const float* totals = nullptr;  // written by the totals kernel before the row kernel reads it
};

// Which row kernel runs: the library's plan (the cluster kernel where rows are 16-byte aligned and fit), or for tests
// (tigon_testing_distill_kernel) the classic kernel.
enum class RowKernel { kCluster, kClassic };
RowKernel row_kernel_choice();

// vec: every row of student, teacher and grad is 16-byte aligned. follows_totals: launched right after the totals
// kernel on the same stream (the cluster kernel then starts as its programmatic dependent). Returns the name of the
// kernel that ran ("cluster4", "classic").
template <class T>
const char* launch_rows(const RowArgs& a, Kind kind, bool probs, bool vec, RowKernel choice, cudaStream_t stream,
                        bool follows_totals);

}  // namespace tigon::distill
