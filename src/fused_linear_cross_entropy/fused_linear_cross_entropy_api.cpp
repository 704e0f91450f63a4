// Fused linear + cross entropy C API: the chunk plan, argument validation, then the CPU reference or the CUDA path.
#include <algorithm>
#include <initializer_list>
#include <utility>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "cross_entropy/cross_entropy.h"
#include "fused_linear_cross_entropy/fused_linear_cross_entropy.h"
#include "tigon/fused_linear_cross_entropy.h"

namespace tigon::fused_linear_cross_entropy {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

void check_params(const tigon_fused_linear_cross_entropy_params& p) {
  cross_entropy::check_params(p.ce);
  if (p.chunk_rows < 0) fail_arg("chunk_rows", "must be > 0 (or 0 to follow memory_budget), got ", p.chunk_rows);
  if (p.dw_accumulation != TIGON_DW_ACCUMULATE_FP32 && p.dw_accumulation != TIGON_DW_ACCUMULATE_DTYPE)
    fail_arg("dw_accumulation", "must be 0 (fp32) or 1 (dw's dtype), got ", p.dw_accumulation);
  if (p.narrow_dw != 0 && p.narrow_dw != 1) fail_arg("narrow_dw", "must be 0 or 1, got ", p.narrow_dw);
}

// x [N, H] and weight [V, H] of one dtype on one device.
void check_x_weight(const tigon_tensor& xt, const tigon_tensor& wt, RowMatrix& x, RowMatrix& w) {
  x = as_rows(xt, "x");
  check_dtype_in(x.dtype, "x", {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  if (x.cols == 0) fail_arg("x", "needs a hidden size > 0 (last dimension is 0)");
  check_same_device(xt, "x", wt, "weight");
  if (wt.ndim != 2) fail_arg("weight", "must be [V, H], got shape ", shape_string(wt));
  w = as_rows(wt, "weight");
  check_dtype_in(w.dtype, "weight", {x.dtype});
  if (w.cols != x.cols) fail_arg("weight", "has hidden size ", w.cols, " but x has ", x.cols);
  if (w.rows == 0) fail_arg("weight", "needs at least one class (V = 0)");
  for (RowMatrix* m : {&x, &w})  // a lone row's stride is arbitrary; the GEMMs want a leading dimension >= H
    if (m->rows <= 1) m->row_stride = m->cols;
}

// An fp32 vector of n elements on x's device.
float* check_fp32(const tigon_tensor* t, const char* arg, const tigon_tensor& x, int64_t n) {
  const tigon_tensor& o = require(t, arg);
  check_same_device(x, "x", o, arg);
  check_dtype_in(dtype_of(o, arg), arg, {DType::kFloat32});
  return static_cast<float*>(as_vector(o, arg, n));
}

}  // namespace

Plan make_plan(int64_t rows, int64_t cols, DType dtype, const tigon_fused_linear_cross_entropy_params& params,
               bool cuda) {
  Plan p;
  p.ld = (cols + 7) / 8 * 8;
  const uint64_t row_bytes = uint64_t(p.ld) * dtype_bytes(dtype);
  const uint64_t budget = params.memory_budget ? params.memory_budget : TIGON_FUSED_LINEAR_CROSS_ENTROPY_DEFAULT_BUDGET;
  const int64_t most = params.chunk_rows > 0 ? params.chunk_rows : int64_t(std::max<uint64_t>(1, budget / row_bytes));
  if (rows > 0) {  // the fewest chunks that fit, then the same size for all of them
    p.chunks = (rows + most - 1) / most;
    p.chunk_rows = (rows + p.chunks - 1) / p.chunks;
  }
  if (!cuda) return p;
  p.gemm_at = 0;
  p.partials_at = align256(kGemmWorkspace);
  p.db_at = p.partials_at + align256(cross_entropy::fwd_workspace_bytes(rows));
  p.logits_at = p.db_at + align256(size_t(cols) * sizeof(float));
  p.bytes = p.logits_at + align256(size_t(p.chunk_rows) * size_t(row_bytes));
  return p;
}

}  // namespace tigon::fused_linear_cross_entropy

using namespace tigon;
using namespace tigon::fused_linear_cross_entropy;

extern "C" {

tigon_status_t tigon_fused_linear_cross_entropy_workspace_size(const tigon_tensor* x, const tigon_tensor* weight,
                                                               tigon_fused_linear_cross_entropy_params params,
                                                               size_t* bytes, int64_t* chunk_rows) {
  return api_guard("tigon_fused_linear_cross_entropy_workspace_size", [&] {
    check_params(params);
    const tigon_tensor& xt = require(x, "x");
    RowMatrix xm, wm;
    check_x_weight(xt, require(weight, "weight"), xm, wm);
    const Plan plan = make_plan(xm.rows, wm.rows, xm.dtype, params, is_cuda(xt));
    if (bytes) *bytes = plan.bytes;
    if (chunk_rows) *chunk_rows = plan.chunk_rows;
  });
}

tigon_status_t tigon_fused_linear_cross_entropy_fwd(
    const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias, const tigon_tensor* target,
    const tigon_tensor* class_weight, const tigon_tensor* grad_output, const tigon_tensor* loss,
    const tigon_tensor* z_loss, const tigon_tensor* accuracy, const tigon_tensor* predicted, const tigon_tensor* dx,
    const tigon_tensor* dw, const tigon_tensor* db, tigon_fused_linear_cross_entropy_params params, void* workspace,
    size_t workspace_bytes, void* stream) {
  return api_guard("tigon_fused_linear_cross_entropy_fwd", [&] {
    check_params(params);
    const tigon_tensor& xt = require(x, "x");
    Problem p;
    check_x_weight(xt, require(weight, "weight"), p.x, p.w);
    const int64_t N = p.x.rows, H = p.x.cols, V = p.w.rows;
    const DType dt = p.x.dtype;
    const bool cuda = is_cuda(xt);
    const Plan plan = make_plan(N, V, dt, params, cuda);

    if (bias) {
      const tigon_tensor& bt = require(bias, "bias");
      check_same_device(xt, "x", bt, "bias");
      check_dtype_in(dtype_of(bt, "bias"), "bias", {dt});
      p.bias = as_vector(bt, "bias", V);
    }

    cross_entropy::FwdProblem& ce = p.ce;
    const tigon_tensor& tt = require(target, "target");
    check_same_device(xt, "x", tt, "target");
    const DType target_dtype = dtype_of(tt, "target");
    check_dtype_in(target_dtype, "target", {DType::kInt64, DType::kInt32});
    ce.target64 = target_dtype == DType::kInt64;
    ce.target = as_vector(tt, "target", N);
    if (class_weight) ce.weight = check_fp32(class_weight, "class_weight", xt, V);
    const int64_t n_out = params.ce.reduction == TIGON_REDUCTION_NONE ? N : 1;
    ce.loss = check_fp32(loss, "loss", xt, n_out);
    if (z_loss) ce.z_loss = check_fp32(z_loss, "z_loss", xt, n_out);
    if (accuracy) ce.accuracy = check_fp32(accuracy, "accuracy", xt, n_out);
    ce.predicted = cross_entropy::check_predicted(predicted, xt, "x", N);
    ce.ignore_index = params.ce.ignore_index;
    ce.smoothing = params.ce.label_smoothing;
    ce.z_scale = params.ce.lse_square_scale;
    ce.softcap = params.ce.softcap;
    ce.reduction = params.ce.reduction;
    ce.token_scaling = params.ce.token_scaling == 1;

    if (grad_output) {
      const tigon_tensor& gt = require(grad_output, "grad_output");
      check_same_device(xt, "x", gt, "grad_output");
      check_dtype_in(dtype_of(gt, "grad_output"), "grad_output", {DType::kFloat32});
      const int64_t n = numel(gt);
      const bool per_row = gt.ndim == 1 && n == N && N != 1;
      if (gt.ndim > 1 || (n != 1 && !per_row))
        fail_arg("grad_output", "must have 1 element or one per token (", N, "), got shape ", shape_string(gt));
      if (per_row && params.ce.reduction != TIGON_REDUCTION_NONE)
        fail_arg("grad_output", "has one value per token, which only reduction NONE produces");
      p.grad_output = reinterpret_cast<const float*>(static_cast<const char*>(gt.data) + gt.byte_offset);
      p.go_stride = per_row ? (gt.strides ? gt.strides[0] : 1) : 0;
    }

    if (dx) {
      const tigon_tensor& t = require(dx, "dx");
      check_same_device(xt, "x", t, "dx");
      p.dx = as_rows(t, "dx");
      check_dtype_in(p.dx.dtype, "dx", {dt});
      if (p.dx.rows != N || p.dx.cols != H)
        fail_arg("dx", "must have ", N, " rows of ", H, " like x, got ", p.dx.rows, " rows of ", p.dx.cols);
      if (N <= 1) p.dx.row_stride = H;
    }
    const bool low = dt != DType::kFloat32;
    if (dw) {
      const tigon_tensor& t = require(dw, "dw");
      check_same_device(xt, "x", t, "dw");
      p.dw_dtype = dtype_of(t, "dw");
      check_dtype_in(p.dw_dtype, "dw", {DType::kFloat32, dt});
      p.dw = as_vector(t, "dw", V * H);
      p.narrow_dw = params.narrow_dw == 1 && low;
      if (p.narrow_dw && p.dw_dtype != DType::kFloat32)
        fail_arg("dw", "narrow_dw rewrites an fp32 dw in place, got ", dtype_name(p.dw_dtype));
      if (p.narrow_dw && cuda && (reinterpret_cast<uintptr_t>(p.dw) & 15u) != 0)
        fail_arg("dw", "must be 16-byte aligned for narrow_dw");
      if (low && p.dw_dtype == dt && plan.chunks > 1 && params.dw_accumulation == TIGON_DW_ACCUMULATE_FP32)
        fail_arg("dw", N, " tokens take ", plan.chunks, " chunks of ", plan.chunk_rows, ", so a ", dtype_name(dt),
                 " dw would be rounded after each: pass an fp32 dw (narrow_dw = 1 for the weight's dtype), or allow "
                 "it with dw_accumulation = TIGON_DW_ACCUMULATE_DTYPE");
    }
    if (db) {
      if (!bias) fail_arg("db", "is the bias gradient, but there is no bias");
      const tigon_tensor& t = require(db, "db");
      check_same_device(xt, "x", t, "db");
      p.db_dtype = dtype_of(t, "db");
      check_dtype_in(p.db_dtype, "db", {DType::kFloat32, dt});
      p.db = as_vector(t, "db", V);
    }

    if (cuda) {
      TIGON_ON_CUDA(xt, {
        if (workspace_bytes < plan.bytes || workspace == nullptr)
          fail_arg("workspace", "needs ", plan.bytes, " bytes (tigon_fused_linear_cross_entropy_workspace_size), got ",
                   workspace_bytes);
        if ((reinterpret_cast<uintptr_t>(workspace) & 255u) != 0) fail_arg("workspace", "must be 256-byte aligned");
        fwd_cuda(p, plan, workspace, stream);
      });
    } else {
      (void)workspace, (void)workspace_bytes, (void)stream;  // the CPU path needs neither
      ce.logits.rows = N;                                    // what the target check reads
      ce.logits.cols = V;
      cross_entropy::check_targets_on_host(ce);
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_fused_linear_cross_entropy_bwd(const tigon_tensor* dx, const tigon_tensor* dw,
                                                    const tigon_tensor* db, const tigon_tensor* grad_output,
                                                    void* stream) {
  return api_guard("tigon_fused_linear_cross_entropy_bwd", [&] {
    const tigon_tensor& ot = require(grad_output, "grad_output");
    check_dtype_in(dtype_of(ot, "grad_output"), "grad_output", {DType::kFloat32});
    if (numel(ot) != 1) fail_arg("grad_output", "must have 1 element, got shape ", shape_string(ot));
    const float* go = reinterpret_cast<const float*>(static_cast<const char*>(ot.data) + ot.byte_offset);
    const std::pair<const tigon_tensor*, const char*> grads[] = {{dx, "dx"}, {dw, "dw"}, {db, "db"}};
    for (const auto& [t, arg] : grads) {  // each scaled where it lies, by cross entropy's scale kernel
      if (t == nullptr) continue;
      const tigon_tensor& gt = require(t, arg);
      check_same_device(ot, "grad_output", gt, arg);
      cross_entropy::BwdProblem b;
      b.grad = as_rows(gt, arg);
      check_dtype_in(b.grad.dtype, arg, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
      b.grad_output = go;
      if (b.grad.rows == 0 || b.grad.cols == 0) continue;
      if (is_cuda(gt)) {
        TIGON_ON_CUDA(gt, cross_entropy::bwd_cuda(b, stream));
      } else {
        (void)stream;
        cross_entropy::bwd_cpu(b);
      }
    }
  });
}

}  // extern "C"
