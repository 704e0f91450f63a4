// RMSNorm C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <cmath>
#include <initializer_list>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "rms_norm/rms_norm.h"
#include "tigon/rms_norm.h"

namespace tigon::rms_norm {
namespace {

constexpr std::initializer_list<DType> kFloatTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

void check_params(const tigon_rms_norm_params& params) {
  if (!(params.eps >= 0.f) || !std::isfinite(params.eps)) fail_arg("eps", "must be finite and >= 0, got ", params.eps);
  if (!std::isfinite(params.offset)) fail_arg("offset", "must be finite, got ", params.offset);
  if (params.casting_mode < TIGON_RMS_NORM_LLAMA || params.casting_mode > TIGON_RMS_NORM_NONE)
    fail_arg("casting_mode", "must be 0 (llama), 1 (gemma) or 2 (none), got ", params.casting_mode);
}

// Checks the weight against x and returns its data (nullptr when absent).
const void* check_weight(const tigon_tensor* weight, const tigon_tensor& x, const RowMatrix& xm, DType* w_dtype,
                         const tigon_rms_norm_params& params) {
  if (weight == nullptr) {
    if (params.offset != 0.f) fail_arg("offset", "must be 0 without a weight, got ", params.offset);
    *w_dtype = xm.dtype;
    return nullptr;
  }
  const tigon_tensor& w = require(weight, "weight");
  check_same_device(x, "x", w, "weight");
  *w_dtype = dtype_of(w, "weight");
  check_dtype_in(*w_dtype, "weight", {xm.dtype, DType::kFloat32});
  return as_vector(w, "weight", xm.cols);
}

void check_like_x(const RowMatrix& m, const char* arg, const RowMatrix& x) {
  if (m.rows != x.rows || m.cols != x.cols)
    fail_arg(arg, "must have ", x.rows, " rows of ", x.cols, " like x, got ", m.rows, " rows of ", m.cols);
}

void check_rstd(const tigon_tensor* rstd, const tigon_tensor& x, const RowMatrix& xm, float** out) {
  const tigon_tensor& r = require(rstd, "rstd");
  check_same_device(x, "x", r, "rstd");
  check_dtype_in(dtype_of(r, "rstd"), "rstd", {DType::kFloat32});
  *out = static_cast<float*>(as_vector(r, "rstd", xm.rows));
}

// The norm's own arguments, validated (the fused residual add's entries add theirs).
FwdProblem fwd_problem(const tigon_tensor& xt, const tigon_tensor* weight, const tigon_tensor* y,
                       const tigon_tensor* rstd, const tigon_rms_norm_params& params) {
  check_params(params);
  const tigon_tensor& yt = require(y, "y");
  FwdProblem p;
  p.x = as_rows(xt, "x");
  check_dtype_in(p.x.dtype, "x", kFloatTypes);
  if (p.x.cols == 0) fail_arg("x", "last dimension must be non-empty");
  check_same_device(xt, "x", yt, "y");
  p.y = as_rows(yt, "y");
  check_like_x(p.y, "y", p.x);
  p.w = check_weight(weight, xt, p.x, &p.w_dtype, params);
  check_dtype_in(p.y.dtype, "y", {p.x.dtype, DType::kFloat32});
  if (rstd) check_rstd(rstd, xt, p.x, &p.rstd);
  p.eps = params.eps;
  p.offset = params.offset;
  p.mode = params.casting_mode;
  return p;
}

void run_fwd(const FwdProblem& p, const tigon_tensor& xt, [[maybe_unused]] void* stream) {
  if (p.x.rows == 0) return;
  if (is_cuda(xt)) {
    TIGON_ON_CUDA(xt, fwd_cuda(p, stream));
  } else {
    fwd_cpu(p);
  }
}

// A tensor shaped and typed like x (the residual, h, dh), on x's device.
RowMatrix like_x(const tigon_tensor* t, const char* arg, const tigon_tensor& xt, const RowMatrix& x,
                 const char* x_arg = "x") {
  const tigon_tensor& tt = require(t, arg);
  check_same_device(xt, x_arg, tt, arg);
  RowMatrix m = as_rows(tt, arg);
  check_like_x(m, arg, x);
  check_dtype_in(m.dtype, arg, {x.dtype});
  return m;
}

void check_alias(const RowMatrix& out, const char* out_arg, const RowMatrix& in, const char* in_arg) {
  if (out.data == in.data && (out.dtype != in.dtype || out.row_stride != in.row_stride))
    fail_arg(out_arg, "may alias ", in_arg, " only with the same dtype and strides");
}

// x_arg: the norm input's name ("h" for the fused residual add's backward).
BwdProblem bwd_problem(const tigon_tensor* dy, const tigon_tensor& xt, const tigon_tensor* weight,
                       const tigon_tensor* rstd, const tigon_tensor* dx, const tigon_tensor* dw,
                       const tigon_rms_norm_params& params, const char* x_arg = "x") {
  check_params(params);
  BwdProblem p;
  p.x = as_rows(xt, x_arg);
  check_dtype_in(p.x.dtype, x_arg, kFloatTypes);
  if (p.x.cols == 0) fail_arg(x_arg, "last dimension must be non-empty");
  const tigon_tensor& dyt = require(dy, "dy");
  check_same_device(xt, x_arg, dyt, "dy");
  p.dy = as_rows(dyt, "dy");
  check_like_x(p.dy, "dy", p.x);
  check_dtype_in(p.dy.dtype, "dy", {p.x.dtype, DType::kFloat32});
  p.dx = like_x(dx, "dx", xt, p.x, x_arg);
  check_alias(p.dx, "dx", p.dy, "dy");
  p.w = check_weight(weight, xt, p.x, &p.w_dtype, params);
  float* rstd_data = nullptr;
  check_rstd(rstd, xt, p.x, &rstd_data);
  p.rstd = rstd_data;
  if (dw) {
    if (!weight) fail_arg("dw", "must be NULL when there is no weight");
    const tigon_tensor& dwt = require(dw, "dw");
    check_same_device(xt, "x", dwt, "dw");
    p.dw_dtype = dtype_of(dwt, "dw");
    check_dtype_in(p.dw_dtype, "dw", {p.w_dtype, DType::kFloat32});
    p.dw = as_vector(dwt, "dw", p.x.cols);
  }
  p.offset = params.offset;
  p.mode = params.casting_mode;
  return p;
}

void run_bwd(const BwdProblem& p, const tigon_tensor& xt, [[maybe_unused]] void* workspace,
             [[maybe_unused]] size_t workspace_bytes, [[maybe_unused]] void* stream) {
  if (is_cuda(xt)) {
    TIGON_ON_CUDA(xt, {
      const size_t need = p.dw ? bwd_cuda_workspace_bytes(p.x, xt.device.device_id) : 0;
      if (workspace_bytes < need || (need > 0 && workspace == nullptr))
        fail_arg("workspace", "needs ", need, " bytes (tigon_rms_norm_bwd_workspace_size), got ", workspace_bytes);
      bwd_cuda(p, workspace, workspace_bytes, stream);
    });
  } else {
    bwd_cpu(p);
  }
}

}  // namespace
}  // namespace tigon::rms_norm

using namespace tigon;
using namespace tigon::rms_norm;

extern "C" {

tigon_status_t tigon_rms_norm_fwd(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* y,
                                  const tigon_tensor* rstd, tigon_rms_norm_params params, void* stream) {
  return api_guard("tigon_rms_norm_fwd", [&] {
    const tigon_tensor& xt = require(x, "x");
    run_fwd(fwd_problem(xt, weight, y, rstd, params), xt, stream);
  });
}

tigon_status_t tigon_add_rms_norm_fwd(const tigon_tensor* x, const tigon_tensor* residual, const tigon_tensor* weight,
                                      const tigon_tensor* y, const tigon_tensor* h, const tigon_tensor* rstd,
                                      tigon_rms_norm_params params, void* stream) {
  return api_guard("tigon_add_rms_norm_fwd", [&] {
    const tigon_tensor& xt = require(x, "x");
    FwdProblem p = fwd_problem(xt, weight, y, rstd, params);
    p.add = true;
    p.res = like_x(residual, "residual", xt, p.x);
    p.h = like_x(h, "h", xt, p.x);
    check_alias(p.h, "h", p.x, "x");
    check_alias(p.h, "h", p.res, "residual");
    if (p.y.data == p.h.data) fail_arg("y", "must not alias h");
    run_fwd(p, xt, stream);
  });
}

tigon_status_t tigon_rms_norm_bwd_workspace_size(const tigon_tensor* x, const tigon_tensor* weight, size_t* bytes) {
  return api_guard("tigon_rms_norm_bwd_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    const tigon_tensor& xt = require(x, "x");
    const RowMatrix xm = as_rows(xt, "x");
    check_dtype_in(xm.dtype, "x", kFloatTypes);
    if (weight) check_same_device(xt, "x", require(weight, "weight"), "weight");
    *bytes = 0;
    if (is_cuda(xt) && weight) TIGON_ON_CUDA(xt, *bytes = bwd_cuda_workspace_bytes(xm, xt.device.device_id));
  });
}

tigon_status_t tigon_rms_norm_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                  const tigon_tensor* rstd, const tigon_tensor* dx, const tigon_tensor* dw,
                                  tigon_rms_norm_params params, void* workspace, size_t workspace_bytes, void* stream) {
  return api_guard("tigon_rms_norm_bwd", [&] {
    const tigon_tensor& xt = require(x, "x");
    run_bwd(bwd_problem(dy, xt, weight, rstd, dx, dw, params), xt, workspace, workspace_bytes, stream);
  });
}

tigon_status_t tigon_add_rms_norm_bwd(const tigon_tensor* dy, const tigon_tensor* dh, const tigon_tensor* h,
                                      const tigon_tensor* weight, const tigon_tensor* rstd, const tigon_tensor* dx,
                                      const tigon_tensor* dw, tigon_rms_norm_params params, void* workspace,
                                      size_t workspace_bytes, void* stream) {
  return api_guard("tigon_add_rms_norm_bwd", [&] {
    const tigon_tensor& ht = require(h, "h");
    BwdProblem p = bwd_problem(dy, ht, weight, rstd, dx, dw, params, "h");
    if (dh) {
      p.add_dh = true;
      p.dh = like_x(dh, "dh", ht, p.x, "h");
      check_alias(p.dx, "dx", p.dh, "dh");
    }
    run_bwd(p, ht, workspace, workspace_bytes, stream);
  });
}

}  // extern "C"
