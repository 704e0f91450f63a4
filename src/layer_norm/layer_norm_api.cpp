// LayerNorm C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <cmath>
#include <initializer_list>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "layer_norm/layer_norm.h"
#include "tigon/layer_norm.h"

namespace tigon::layer_norm {
namespace {

constexpr std::initializer_list<DType> kFloatTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

RowMatrix check_x(const tigon_tensor& xt) {
  RowMatrix x = as_rows(xt, "x");
  check_dtype_in(x.dtype, "x", kFloatTypes);
  if (x.cols == 0) fail_arg("x", "last dimension must be non-empty");
  return x;
}

// A [cols] parameter (weight or bias) in x's dtype or fp32; returns its data.
const void* check_param(const tigon_tensor* t, const char* arg, const tigon_tensor& x, const RowMatrix& xm,
                        DType* dtype) {
  const tigon_tensor& p = require(t, arg);
  check_same_device(x, "x", p, arg);
  *dtype = dtype_of(p, arg);
  check_dtype_in(*dtype, arg, {xm.dtype, DType::kFloat32});
  return as_vector(p, arg, xm.cols);
}

// A rows x cols matrix on x's device with x's shape, one of the allowed dtypes.
RowMatrix check_like_x(const tigon_tensor* t, const char* arg, const tigon_tensor& x, const RowMatrix& xm,
                       std::initializer_list<DType> dtypes) {
  const tigon_tensor& tt = require(t, arg);
  check_same_device(x, "x", tt, arg);
  const RowMatrix m = as_rows(tt, arg);
  if (m.rows != xm.rows || m.cols != xm.cols)
    fail_arg(arg, "must have ", xm.rows, " rows of ", xm.cols, " like x, got ", m.rows, " rows of ", m.cols);
  check_dtype_in(m.dtype, arg, dtypes);
  return m;
}

// A per-row fp32 statistic (mean or rstd).
float* check_stat(const tigon_tensor* t, const char* arg, const tigon_tensor& x, const RowMatrix& xm) {
  const tigon_tensor& s = require(t, arg);
  check_same_device(x, "x", s, arg);
  check_dtype_in(dtype_of(s, arg), arg, {DType::kFloat32});
  return static_cast<float*>(as_vector(s, arg, xm.rows));
}

// dw or db: a [cols] vector in `own` or fp32.
void* check_grad(const tigon_tensor* t, const char* arg, const tigon_tensor& x, const RowMatrix& xm, DType own,
                 DType* dtype) {
  const tigon_tensor& g = require(t, arg);
  check_same_device(x, "x", g, arg);
  *dtype = dtype_of(g, arg);
  check_dtype_in(*dtype, arg, {own, DType::kFloat32});
  return as_vector(g, arg, xm.cols);
}

}  // namespace
}  // namespace tigon::layer_norm

using namespace tigon;
using namespace tigon::layer_norm;

extern "C" {

tigon_status_t tigon_layer_norm_fwd(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                                    const tigon_tensor* y, const tigon_tensor* mean, const tigon_tensor* rstd,
                                    tigon_layer_norm_params params, void* stream) {
  return api_guard("tigon_layer_norm_fwd", [&] {
    if (!(params.eps >= 0.f) || !std::isfinite(params.eps))
      fail_arg("eps", "must be finite and >= 0, got ", params.eps);
    const tigon_tensor& xt = require(x, "x");
    FwdProblem p;
    p.x = check_x(xt);
    p.y = check_like_x(y, "y", xt, p.x, {p.x.dtype});
    p.p_dtype = p.x.dtype;
    if (weight) p.w = check_param(weight, "weight", xt, p.x, &p.p_dtype);
    if (bias) {
      DType b_dtype;
      p.b = check_param(bias, "bias", xt, p.x, &b_dtype);
      if (weight && b_dtype != p.p_dtype)
        fail_dtype("bias", dtype_name(b_dtype), " differs from the weight's ", dtype_name(p.p_dtype));
      p.p_dtype = b_dtype;
    }
    if ((mean == nullptr) != (rstd == nullptr))
      fail_arg(mean ? "rstd" : "mean", "mean and rstd are saved together: pass both or neither");
    if (mean) {
      p.mean = check_stat(mean, "mean", xt, p.x);
      p.rstd = check_stat(rstd, "rstd", xt, p.x);
    }
    p.eps = params.eps;
    if (p.x.rows == 0) return;
    if (is_cuda(xt)) {
      TIGON_ON_CUDA(xt, fwd_cuda(p, stream));
    } else {
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_layer_norm_bwd_workspace_size(const tigon_tensor* x, size_t* bytes) {
  return api_guard("tigon_layer_norm_bwd_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    const tigon_tensor& xt = require(x, "x");
    const RowMatrix xm = as_rows(xt, "x");
    check_dtype_in(xm.dtype, "x", kFloatTypes);
    *bytes = 0;
    if (is_cuda(xt)) TIGON_ON_CUDA(xt, *bytes = bwd_cuda_workspace_bytes(xm, xt.device.device_id));
  });
}

tigon_status_t tigon_layer_norm_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                    const tigon_tensor* mean, const tigon_tensor* rstd, const tigon_tensor* dx,
                                    const tigon_tensor* dw, const tigon_tensor* db, void* workspace,
                                    size_t workspace_bytes, void* stream) {
  return api_guard("tigon_layer_norm_bwd", [&] {
    const tigon_tensor& xt = require(x, "x");
    BwdProblem p;
    p.x = check_x(xt);
    p.dy = check_like_x(dy, "dy", xt, p.x, {p.x.dtype});
    p.dx = check_like_x(dx, "dx", xt, p.x, {p.x.dtype});
    if (p.dx.data == p.dy.data && p.dx.row_stride != p.dy.row_stride)
      fail_arg("dx", "may alias dy only with the same strides");
    p.w_dtype = p.x.dtype;
    if (weight) p.w = check_param(weight, "weight", xt, p.x, &p.w_dtype);
    p.mean = check_stat(mean, "mean", xt, p.x);
    p.rstd = check_stat(rstd, "rstd", xt, p.x);
    if (dw) {
      if (!weight) fail_arg("dw", "must be NULL when there is no weight");
      p.dw = check_grad(dw, "dw", xt, p.x, p.w_dtype, &p.dw_dtype);
    }
    if (db) p.db = check_grad(db, "db", xt, p.x, p.x.dtype, &p.db_dtype);
    if (is_cuda(xt)) {
      TIGON_ON_CUDA(xt, {
        const size_t need = (p.dw || p.db) ? bwd_cuda_workspace_bytes(p.x, xt.device.device_id) : 0;
        if (workspace_bytes < need || (need > 0 && workspace == nullptr))
          fail_arg("workspace", "needs ", need, " bytes (tigon_layer_norm_bwd_workspace_size), got ", workspace_bytes);
        bwd_cuda(p, workspace, workspace_bytes, stream);
      });
    } else {
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
