// Cross entropy C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <cmath>
#include <initializer_list>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "cross_entropy/cross_entropy.h"
#include "tigon/cross_entropy.h"

namespace tigon::cross_entropy {
namespace {

// An fp32 output with one element per row (NONE) or one element in all.
float* check_output(const tigon_tensor* t, const char* arg, const tigon_tensor& logits, int64_t n) {
  const tigon_tensor& o = require(t, arg);
  check_same_device(logits, "logits", o, arg);
  check_dtype_in(dtype_of(o, arg), arg, {DType::kFloat32});
  return static_cast<float*>(as_vector(o, arg, n));
}

}  // namespace

size_t fwd_workspace_bytes(int64_t rows) { return size_t(4 + 3 * rows) * sizeof(float); }

void check_params(const tigon_cross_entropy_params& p) {
  if (!(p.label_smoothing >= 0.f && p.label_smoothing <= 1.f))
    fail_arg("label_smoothing", "must be in [0, 1], got ", p.label_smoothing);
  if (!(p.lse_square_scale >= 0.f) || !std::isfinite(p.lse_square_scale))
    fail_arg("lse_square_scale", "must be finite and >= 0, got ", p.lse_square_scale);
  if (!(p.softcap >= 0.f) || !std::isfinite(p.softcap))
    fail_arg("softcap", "must be finite and > 0 (or 0 for none), got ", p.softcap);
  if (p.reduction < TIGON_REDUCTION_NONE || p.reduction > TIGON_REDUCTION_SUM)
    fail_arg("reduction", "must be 0 (none), 1 (mean) or 2 (sum), got ", p.reduction);
  if (p.token_scaling != 0 && p.token_scaling != 1) fail_arg("token_scaling", "must be 0 or 1, got ", p.token_scaling);
}

int64_t* check_predicted(const tigon_tensor* t, const tigon_tensor& on, const char* on_name, int64_t rows) {
  if (t == nullptr) return nullptr;
  const tigon_tensor& o = require(t, "predicted");
  check_same_device(on, on_name, o, "predicted");
  check_dtype_in(dtype_of(o, "predicted"), "predicted", {DType::kInt64});
  return static_cast<int64_t*>(as_vector(o, "predicted", rows));
}

// CPU only: a target outside [0, V) is the caller's mistake; the CUDA path marks the row NaN instead (no sync).
void check_targets_on_host(const FwdProblem& p) {
  for (int64_t i = 0; i < p.logits.rows; ++i) {
    const int64_t t = p.target64 ? static_cast<const int64_t*>(p.target)[i] : static_cast<const int32_t*>(p.target)[i];
    if (t != p.ignore_index && (t < 0 || t >= p.logits.cols))
      fail_arg("target", "row ", i, " has class ", t, ", outside [0, ", p.logits.cols, ") and not ignore_index ",
               p.ignore_index);
  }
}

}  // namespace tigon::cross_entropy

using namespace tigon;
using namespace tigon::cross_entropy;

extern "C" {

tigon_status_t tigon_cross_entropy_fwd_workspace_size(const tigon_tensor* logits, size_t* bytes) {
  return api_guard("tigon_cross_entropy_fwd_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    const tigon_tensor& lt = require(logits, "logits");
    const RowMatrix m = as_rows(lt, "logits");
    *bytes = is_cuda(lt) ? fwd_workspace_bytes(m.rows) : 0;
  });
}

tigon_status_t tigon_cross_entropy_fwd(const tigon_tensor* logits, const tigon_tensor* target,
                                       const tigon_tensor* weight, const tigon_tensor* loss, const tigon_tensor* z_loss,
                                       const tigon_tensor* accuracy, const tigon_tensor* predicted,
                                       const tigon_tensor* grad, tigon_cross_entropy_params params, void* workspace,
                                       size_t workspace_bytes, void* stream) {
  return api_guard("tigon_cross_entropy_fwd", [&] {
    check_params(params);
    const tigon_tensor& lt = require(logits, "logits");
    FwdProblem p;
    p.logits = as_rows(lt, "logits");
    check_dtype_in(p.logits.dtype, "logits", {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
    if (p.logits.cols == 0) fail_arg("logits", "needs at least one class (last dimension is 0)");
    const int64_t rows = p.logits.rows, cols = p.logits.cols;

    const tigon_tensor& tt = require(target, "target");
    check_same_device(lt, "logits", tt, "target");
    const DType target_dtype = dtype_of(tt, "target");
    check_dtype_in(target_dtype, "target", {DType::kInt64, DType::kInt32});
    p.target64 = target_dtype == DType::kInt64;
    p.target = as_vector(tt, "target", rows);

    if (weight) {
      const tigon_tensor& wt = require(weight, "weight");
      check_same_device(lt, "logits", wt, "weight");
      check_dtype_in(dtype_of(wt, "weight"), "weight", {DType::kFloat32});
      p.weight = static_cast<const float*>(as_vector(wt, "weight", cols));
    }

    const int64_t n_out = params.reduction == TIGON_REDUCTION_NONE ? rows : 1;
    p.loss = check_output(loss, "loss", lt, n_out);
    if (z_loss) p.z_loss = check_output(z_loss, "z_loss", lt, n_out);
    if (accuracy) p.accuracy = check_output(accuracy, "accuracy", lt, n_out);
    p.predicted = check_predicted(predicted, lt, "logits", rows);

    if (grad) {
      const tigon_tensor& gt = require(grad, "grad");
      check_same_device(lt, "logits", gt, "grad");
      p.grad = as_rows(gt, "grad");
      if (p.grad.rows != rows || p.grad.cols != cols)
        fail_arg("grad", "must have ", rows, " rows of ", cols, " like logits, got ", p.grad.rows, " rows of ",
                 p.grad.cols);
      check_dtype_in(p.grad.dtype, "grad", {p.logits.dtype});
      if (p.grad.data == p.logits.data && p.grad.row_stride != p.logits.row_stride)
        fail_arg("grad", "may alias logits only with the same strides");
      if (rows == 0) p.grad.data = nullptr;
    }

    p.ignore_index = params.ignore_index;
    p.smoothing = params.label_smoothing;
    p.z_scale = params.lse_square_scale;
    p.softcap = params.softcap;
    p.reduction = params.reduction;
    p.token_scaling = params.token_scaling == 1;
    if (is_cuda(lt)) {
      TIGON_ON_CUDA(lt, {
        const size_t need = fwd_workspace_bytes(rows);
        if (workspace_bytes < need || workspace == nullptr)
          fail_arg("workspace", "needs ", need, " bytes (tigon_cross_entropy_fwd_workspace_size), got ",
                   workspace_bytes);
        if ((reinterpret_cast<uintptr_t>(workspace) & 7u) != 0) fail_arg("workspace", "must be 8-byte aligned");
        fwd_cuda(p, workspace, stream);
      });
    } else {
      check_targets_on_host(p);
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_cross_entropy_bwd(const tigon_tensor* grad, const tigon_tensor* grad_output, void* stream) {
  return api_guard("tigon_cross_entropy_bwd", [&] {
    const tigon_tensor& gt = require(grad, "grad");
    BwdProblem p;
    p.grad = as_rows(gt, "grad");
    check_dtype_in(p.grad.dtype, "grad", {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
    const tigon_tensor& ot = require(grad_output, "grad_output");
    check_same_device(gt, "grad", ot, "grad_output");
    check_dtype_in(dtype_of(ot, "grad_output"), "grad_output", {DType::kFloat32});
    const int64_t n = numel(ot);
    if (ot.ndim > 1) fail_arg("grad_output", "must be a scalar or a vector, got shape ", shape_string(ot));
    if (n != 1 && n != p.grad.rows)
      fail_arg("grad_output", "must have 1 element or one per row (", p.grad.rows, "), got shape ", shape_string(ot));
    p.grad_output = reinterpret_cast<const float*>(static_cast<const char*>(ot.data) + ot.byte_offset);
    p.per_row = ot.ndim == 1 && n > 1;
    p.go_stride = p.per_row ? (ot.strides ? ot.strides[0] : 1) : 0;
    if (p.grad.rows == 0) return;
    if (is_cuda(gt)) {
      TIGON_ON_CUDA(gt, bwd_cuda(p, stream));
    } else {
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
