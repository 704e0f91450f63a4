// GEMV C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <initializer_list>

#include "common/device.h"
#include "common/error.h"
#include "common/overlap.h"
#include "common/tensor.h"
#include "gemv/gemv.h"
#include "tigon/gemv.h"

namespace tigon::gemv {
namespace {

// x [..., K] and weight [N, K]: dtypes, devices, shapes. Fills p.x and p.w.
void check_inputs(const tigon_tensor* x, const tigon_tensor* weight, Problem* p) {
  const tigon_tensor& xt = require(x, "x");
  const tigon_tensor& wt = require(weight, "weight");
  p->x = as_rows(xt, "x");
  check_dtype_in(p->x.dtype, "x", {DType::kBFloat16, DType::kFloat16, DType::kFloat32});
  if (p->x.cols == 0) fail_arg("x", "last dimension (K) must be non-empty, got shape ", shape_string(xt));
  check_same_device(xt, "x", wt, "weight");
  if (wt.ndim != 2) fail_arg("weight", "must be 2-D [N, K], got shape ", shape_string(wt));
  p->w = as_rows(wt, "weight");
  check_dtype_in(p->w.dtype, "weight", {p->x.dtype});
  if (p->w.cols != p->x.cols)
    fail_arg("weight", "must be [N, K] with x's K = ", p->x.cols, ", got shape ", shape_string(wt));
}

}  // namespace
}  // namespace tigon::gemv

using namespace tigon;
using namespace tigon::gemv;

extern "C" {

tigon_status_t tigon_gemv_workspace_size(const tigon_tensor* x, const tigon_tensor* weight, size_t* bytes) {
  return api_guard("tigon_gemv_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    Problem p;
    check_inputs(x, weight, &p);
    *bytes = 0;
    if (is_cuda(*x))
      TIGON_ON_CUDA(*x, *bytes = cuda_workspace_bytes(p.x.rows, p.w.rows, p.x.cols, p.x.dtype, x->device.device_id));
  });
}

tigon_status_t tigon_gemv(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                          const tigon_tensor* y, void* workspace, size_t workspace_bytes, void* stream) {
  return api_guard("tigon_gemv", [&] {
    Problem p;
    check_inputs(x, weight, &p);
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
      fail_arg("y", "must have M = ", p.x.rows, " rows of N = ", p.w.rows, " (x's rows, weight's rows), got shape ",
               shape_string(yt));
    const Span inputs[] = {{"x", x}, {"weight", weight}, {"bias", bias}};
    check_no_overlap({{"y", y}}, inputs);
    if (p.x.rows == 0 || p.w.rows == 0) return;
    if (is_cuda(*x)) {
      TIGON_ON_CUDA(*x, {
        check_workspace(workspace, workspace_bytes,
                        cuda_workspace_bytes(p.x.rows, p.w.rows, p.x.cols, p.x.dtype, x->device.device_id),
                        "tigon_gemv_workspace_size");
        run_cuda(p, workspace, workspace_bytes, stream);
      });
    } else {
      (void)workspace, (void)workspace_bytes, (void)stream;
      run_cpu(p);
    }
  });
}

}  // extern "C"
