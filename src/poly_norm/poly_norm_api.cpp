// PolyNorm C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <cmath>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "poly_norm/poly_norm.h"
#include "tigon/poly_norm.h"

namespace tigon::poly_norm {
namespace {

RowMatrix floats(const tigon_tensor* t, const char* arg) {
  const RowMatrix m = as_rows(require(t, arg), arg);
  check_dtype_in(m.dtype, arg, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  if (m.rows > 0 && m.cols == 0) fail_arg(arg, "last dimension must be non-empty");
  return m;
}

// n fp32 values on x's device, contiguous.
float* fp32_vector(const tigon_tensor* t, const char* arg, const tigon_tensor& xt, int64_t n) {
  const tigon_tensor& v = require(t, arg);
  check_same_device(xt, "x", v, arg);
  check_dtype_in(dtype_of(v, arg), arg, {DType::kFloat32});
  return static_cast<float*>(as_vector(v, arg, n));
}

}  // namespace

}  // namespace tigon::poly_norm

using namespace tigon;
using namespace tigon::poly_norm;

extern "C" {

tigon_status_t tigon_poly_norm_fwd(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                                   const tigon_tensor* y, const tigon_tensor* rstd, tigon_poly_norm_params params,
                                   [[maybe_unused]] void* stream) {
  return api_guard("tigon_poly_norm_fwd", [&] {
    if (!(params.eps > 0.f) || !std::isfinite(params.eps)) fail_arg("eps", "must be > 0 and finite, got ", params.eps);
    FwdProblem p;
    p.x = floats(x, "x");
    const tigon_tensor& xt = *x;
    p.y = rows_like(y, "y", xt, "x", p.x);
    check_exact_alias(p.y, "y", p.x, "x");
    p.weight = fp32_vector(weight, "weight", xt, 3);
    p.bias = fp32_vector(bias, "bias", xt, 1);
    if (rstd) p.rstd = fp32_vector(rstd, "rstd", xt, p.x.rows * 3);
    p.eps = params.eps;
    if (p.x.rows == 0) return;
    if (is_cuda(xt)) {
      TIGON_ON_CUDA(xt, fwd_cuda(p, stream));
    } else {
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_poly_norm_bwd_workspace_size(const tigon_tensor* x, size_t* bytes) {
  return api_guard("tigon_poly_norm_bwd_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    [[maybe_unused]] const RowMatrix xm = floats(x, "x");
    *bytes = 0;
    if (is_cuda(*x)) TIGON_ON_CUDA(*x, *bytes = cuda_workspace_bytes(xm.rows, x->device.device_id));
  });
}

tigon_status_t tigon_poly_norm_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                   const tigon_tensor* rstd, const tigon_tensor* dx, const tigon_tensor* dweight,
                                   const tigon_tensor* dbias, [[maybe_unused]] void* workspace,
                                   [[maybe_unused]] size_t workspace_bytes, [[maybe_unused]] void* stream) {
  return api_guard("tigon_poly_norm_bwd", [&] {
    BwdProblem p;
    p.x = floats(x, "x");
    const tigon_tensor& xt = *x;
    p.dy = rows_like(dy, "dy", xt, "x", p.x);
    if (dx) {
      p.dx = rows_like(dx, "dx", xt, "x", p.x);
      check_exact_alias(p.dx, "dx", p.dy, "dy");
      if (p.dx.data != p.dy.data) check_exact_alias(p.dx, "dx", p.x, "x");
    }
    p.weight = fp32_vector(weight, "weight", xt, 3);
    p.rstd = fp32_vector(rstd, "rstd", xt, p.x.rows * 3);
    if (dweight) p.dweight = fp32_vector(dweight, "dweight", xt, 3);
    if (dbias) p.dbias = fp32_vector(dbias, "dbias", xt, 1);
    if (is_cuda(xt)) {
      TIGON_ON_CUDA(xt, {
        if (p.dweight || p.dbias)
          check_workspace(workspace, workspace_bytes, cuda_workspace_bytes(p.x.rows, xt.device.device_id),
                          "tigon_poly_norm_bwd_workspace_size");
        bwd_cuda(p, workspace, stream);
      });
    } else {
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
