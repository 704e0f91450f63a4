// Cross entropy kernel arguments and the typed launchers of the row kernel, instantiated once per logits dtype in
// cross_entropy_cuda_<dtype>.cu so the dispatch in cross_entropy_cuda.cu compiles no row kernels itself. Unlike the
// other ops' kernels, these stay split by dtype: each unit compiles for about a minute and a half, and the three
// folded into one took twice as long as the longest of them, on the build's critical path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cross_entropy/cross_entropy.h"

namespace tigon::cross_entropy {

// Workspace layout (floats): kTotals totals, then per-row ce, z and correct (rows each).
enum Total { kWeightSum = 0, kCount = 1, kWeightAll = 2, kTotals = 4 };

struct RowArgs {
  const void* logits = nullptr;
  void* grad = nullptr;  // nullptr: no gradient
  int64_t rows = 0, cols = 0, x_stride = 0, g_stride = 0;
  const void* target = nullptr;
  bool target64 = true;
  int64_t ignore_index = -100;
  const float* weight = nullptr;
  float smoothing = 0.f, z_scale = 0.f, softcap = 0.f;
  float inv_softcap = 0.f;  // 1 / softcap, set by launch_rows from softcap (callers need not)
  bool mean = true;
  bool want_arg = true;  // the argmax column is wanted (accuracy or predicted asked for); else the kernels skip it
  bool token_scaling = false;     // the row's terms and gradient times exp(x'_t - lse); every thread reads x'_t then
  int64_t* predicted = nullptr;   // the argmax column per row (-1: ignored), written by the row kernel
  const float* totals = nullptr;  // written by the totals kernel before the row kernel runs
  float* row_ce = nullptr;
  float* row_z = nullptr;
  float* row_correct = nullptr;
};

struct ScaleArgs {
  void* grad = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;
  const float* grad_output = nullptr;
  int64_t go_stride = 0;  // 0: one scale for every row
};

// The row kernels (cross_entropy_resident.cuh, cross_entropy_kernels.cuh). cluster needs vec; rows it cannot take
// run the classic kernel instead.
enum class RowKernel { kCluster, kClassic };
constexpr int kClusterMaxThreads = 256;  // the cluster kernel's launch bound
// Which row kernel runs: the library's plan (kCluster, cluster 0), or for tests (tigon_testing_cross_entropy_kernel)
// the classic kernel or the cluster kernel with a forced size, at shapes where the plan would not pick them.
struct KernelChoice {
  RowKernel kind = RowKernel::kCluster;
  int cluster = 0;  // kCluster: blocks per row (1-8), 0: the launcher's
};
// The library's plan, unless a test has chosen another (cross_entropy_cuda.cu).
KernelChoice row_kernel_choice();

// vec: 16-byte loads and stores (rows 16-byte aligned); otherwise element by element. Runs row_kernel_choice().
template <class T>
void launch_rows(const RowArgs& a, bool vec, cudaStream_t stream);
// The same with an explicit variant; returns the name of the kernel that ran ("cluster4", "classic"). alike: the
// logits' and the gradient's rows share their alignment (and elements are whole), which is all the cluster kernel
// needs. follows_totals: launched right after launch_totals on the same stream, so the cluster kernel may start before
// the totals kernel ends (programmatic dependent launch; it waits for the totals where it reads them).
template <class T>
const char* launch_rows_as(const RowArgs& a, bool vec, bool alike, KernelChoice k, cudaStream_t stream,
                           bool follows_totals = false);
template <class T>
void launch_scale(const ScaleArgs& a, bool vec, cudaStream_t stream);

// The loss options and the workspace layout of p over `rows` rows (ws: the forward's workspace, kTotals totals then
// the per-row partials); the caller sets the logits, the gradient and their strides.
RowArgs loss_args(const FwdProblem& p, int64_t rows, float* ws);

// The one-block kernels around the row kernel (cross_entropy_cuda.cu), for ops that run the row kernel over chunks
// of rows (fused linear + cross entropy): the totals of all a.rows rows into `totals` before the first chunk, and the
// outputs from the per-row partials of all a.rows rows after the last.
void launch_totals(const RowArgs& a, float* totals, cudaStream_t stream);
// follows_rows: launched right after the row kernel (or launch_totals) on the same stream, as its programmatic
// dependent.
void launch_finish(const RowArgs& a, float* loss, float* z_loss, float* accuracy, int reduction, cudaStream_t stream,
                   bool follows_rows = false);

}  // namespace tigon::cross_entropy
