// GEMV C API (tigon_gemv, and tigon_gemv_int8 of include/tigon/int8.h: the same kernels with an int8 weight):
// argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <initializer_list>

#include "common/device.h"
#include "common/error.h"
#include "common/overlap.h"
#include "common/tensor.h"
#include "gemv/gemv.h"
#include "tigon/gemv.h"
#include "tigon/int8.h"

namespace tigon::gemv {
namespace {

// x [..., K] and the weight [N, K] (named w_arg): x's dtype, or int8 (tigon_gemv_int8). Fills p.x and p.w.
void check_inputs(const tigon_tensor* x, const tigon_tensor* weight, const char* w_arg, bool int8, Problem* p) {
  const tigon_tensor& xt = require(x, "x");
  const tigon_tensor& wt = require(weight, w_arg);
  p->x = as_rows(xt, "x");
  check_dtype_in(p->x.dtype, "x", {DType::kBFloat16, DType::kFloat16, DType::kFloat32});
  if (p->x.cols == 0) fail_arg("x", "last dimension (K) must be non-empty, got shape ", shape_string(xt));
  check_same_device(xt, "x", wt, w_arg);
  if (wt.ndim != 2) fail_arg(w_arg, "must be 2-D [N, K], got shape ", shape_string(wt));
  p->w = as_rows(wt, w_arg);
  check_dtype_in(p->w.dtype, w_arg, {int8 ? DType::kInt8 : p->x.dtype});
  if (p->w.cols != p->x.cols)
    fail_arg(w_arg, "must be [N, K] with x's K = ", p->x.cols, ", got shape ", shape_string(wt));
}

size_t workspace_size(const tigon_tensor* x, const tigon_tensor* weight, const char* w_arg, bool int8, size_t* bytes) {
  if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
  Problem p;
  check_inputs(x, weight, w_arg, int8, &p);
  *bytes = 0;
  if (is_cuda(*x))
    TIGON_ON_CUDA(*x, *bytes = cuda_workspace_bytes(p.x.rows, p.w.rows, p.x.cols, p.x.dtype, x->device.device_id));
  return *bytes;
}

// tigon_gemv (scale NULL) and tigon_gemv_int8 (q_w and its scales): the remaining checks, then either path.
void gemv(const tigon_tensor* x, const tigon_tensor* weight, const char* w_arg, const tigon_tensor* scale,
          const tigon_tensor* bias, const tigon_tensor* y, void* workspace, size_t workspace_bytes, void* stream,
          const char* size_fn) {
  Problem p;
  check_inputs(x, weight, w_arg, scale != nullptr, &p);
  if (scale) {
    const tigon_tensor& st = require(scale, "scale_w");
    check_same_device(*x, "x", st, "scale_w");
    check_dtype_in(dtype_of(st, "scale_w"), "scale_w", {DType::kFloat32});
    p.w_scale = static_cast<const float*>(as_vector(st, "scale_w", p.w.rows));
  }
  if (bias) {
    const tigon_tensor& bt = require(bias, "bias");
    check_same_device(*x, "x", bt, "bias");
    check_dtype_in(dtype_of(bt, "bias"), "bias", {p.x.dtype});
    p.bias = as_vector(bt, "bias", p.w.rows);
  }
  const tigon_tensor& yt = require(y, "y");
  check_same_device(*x, "x", yt, "y");
  p.y = as_rows(yt, "y");
  check_dtype_in(p.y.dtype, "y", {p.x.dtype});
  if (p.y.rows != p.x.rows || p.y.cols != p.w.rows)
    fail_arg("y", "must have M = ", p.x.rows, " rows of N = ", p.w.rows, " (x's rows, ", w_arg, "'s rows), got shape ",
             shape_string(yt));
  const Span inputs[] = {{"x", x}, {w_arg, weight}, {"scale_w", scale}, {"bias", bias}};
  check_no_overlap({{"y", y}}, inputs);
  if (p.x.rows == 0 || p.w.rows == 0) return;
  if (is_cuda(*x)) {
    TIGON_ON_CUDA(*x, {
      check_workspace(workspace, workspace_bytes,
                      cuda_workspace_bytes(p.x.rows, p.w.rows, p.x.cols, p.x.dtype, x->device.device_id), size_fn);
      run_cuda(p, workspace, workspace_bytes, stream);
    });
  } else {
    (void)workspace, (void)workspace_bytes, (void)stream, (void)size_fn;
    run_cpu(p);
  }
}

}  // namespace
}  // namespace tigon::gemv

using namespace tigon;

extern "C" {

tigon_status_t tigon_gemv_workspace_size(const tigon_tensor* x, const tigon_tensor* weight, size_t* bytes) {
  return api_guard("tigon_gemv_workspace_size", [&] { gemv::workspace_size(x, weight, "weight", false, bytes); });
}

tigon_status_t tigon_gemv(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                          const tigon_tensor* y, void* workspace, size_t workspace_bytes, void* stream) {
  return api_guard("tigon_gemv", [&] {
    gemv::gemv(x, weight, "weight", nullptr, bias, y, workspace, workspace_bytes, stream, "tigon_gemv_workspace_size");
  });
}

tigon_status_t tigon_gemv_int8_workspace_size(const tigon_tensor* x, const tigon_tensor* q_w, size_t* bytes) {
  return api_guard("tigon_gemv_int8_workspace_size", [&] { gemv::workspace_size(x, q_w, "q_w", true, bytes); });
}

tigon_status_t tigon_gemv_int8(const tigon_tensor* x, const tigon_tensor* q_w, const tigon_tensor* scale_w,
                               const tigon_tensor* bias, const tigon_tensor* y, void* workspace, size_t workspace_bytes,
                               void* stream) {
  return api_guard("tigon_gemv_int8", [&] {
    if (scale_w == nullptr) fail_arg("scale_w", "is required but was NULL");
    gemv::gemv(x, q_w, "q_w", scale_w, bias, y, workspace, workspace_bytes, stream, "tigon_gemv_int8_workspace_size");
  });
}

}  // extern "C"
