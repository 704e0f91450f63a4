// DyT C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <algorithm>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "dyt/dyt.h"
#include "tigon/dyt.h"

namespace tigon::dyt {
namespace {

RowMatrix floats(const tigon_tensor* t, const char* arg) {
  const RowMatrix m = as_rows(require(t, arg), arg);
  check_dtype_in(m.dtype, arg, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  return m;
}

// One fp32 value on x's device (alpha, dalpha).
float* scalar(const tigon_tensor* t, const char* arg, const tigon_tensor& xt) {
  const tigon_tensor& s = require(t, arg);
  check_same_device(xt, "x", s, arg);
  check_dtype_in(dtype_of(s, arg), arg, {DType::kFloat32});
  return static_cast<float*>(as_vector(s, arg, 1));
}

// A [C] vector of x's dtype or fp32 on x's device; its dtype in *dt (which, when `match`, it must equal).
void* channels(const tigon_tensor* t, const char* arg, const tigon_tensor& xt, const RowMatrix& xm, DType* dt,
               bool match) {
  return param_vector(t, arg, xt, "x", xm.cols, xm.dtype, dt, match);
}

}  // namespace

int64_t partial_rows(int64_t rows, int64_t cols, DType dtype) {
  const int64_t lanes = 32 * (16 / dtype_bytes(dtype));
  const int64_t strips = (cols + lanes - 1) / lanes, row_blocks = (rows + kSumRows - 1) / kSumRows;
  return std::max<int64_t>(1, std::min(row_blocks, (kSumBlocks + strips - 1) / strips));
}

size_t cuda_workspace_bytes(int64_t rows, int64_t cols, DType dtype) {
  const auto align256 = [](size_t b) { return (b + 255) / 256 * 256; };
  return 3 * align256(size_t(partial_rows(rows, cols, dtype)) * size_t(cols) * sizeof(float)) +
         align256(size_t(cols) * sizeof(float));
}

}  // namespace tigon::dyt

using namespace tigon;
using namespace tigon::dyt;

extern "C" {

tigon_status_t tigon_dyt_fwd(const tigon_tensor* x, const tigon_tensor* alpha, const tigon_tensor* gamma,
                             const tigon_tensor* beta, const tigon_tensor* y, [[maybe_unused]] void* stream) {
  return api_guard("tigon_dyt_fwd", [&] {
    FwdProblem p;
    p.x = floats(x, "x");
    const tigon_tensor& xt = *x;
    p.y = rows_like(y, "y", xt, "x", p.x);
    check_exact_alias(p.y, "y", p.x, "x");
    p.alpha = scalar(alpha, "alpha", xt);
    p.gamma = channels(gamma, "gamma", xt, p.x, &p.param_dtype, false);
    if (beta) p.beta = channels(beta, "beta", xt, p.x, &p.param_dtype, true);
    if (p.x.rows == 0 || p.x.cols == 0) return;
    if (is_cuda(xt)) {
      TIGON_ON_CUDA(xt, fwd_cuda(p, stream));
    } else {
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_dyt_bwd_workspace_size(const tigon_tensor* x, size_t* bytes) {
  return api_guard("tigon_dyt_bwd_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    const RowMatrix xm = floats(x, "x");
    *bytes = is_cuda(*x) ? cuda_workspace_bytes(xm.rows, xm.cols, xm.dtype) : 0;
  });
}

tigon_status_t tigon_dyt_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* alpha,
                             const tigon_tensor* gamma, const tigon_tensor* dx, const tigon_tensor* dalpha,
                             const tigon_tensor* dgamma, const tigon_tensor* dbeta, [[maybe_unused]] void* workspace,
                             [[maybe_unused]] size_t workspace_bytes, [[maybe_unused]] void* stream) {
  return api_guard("tigon_dyt_bwd", [&] {
    BwdProblem p;
    p.x = floats(x, "x");
    const tigon_tensor& xt = *x;
    p.dy = rows_like(dy, "dy", xt, "x", p.x);
    if (dx) {
      p.dx = rows_like(dx, "dx", xt, "x", p.x);
      if (p.dx.data != p.dy.data) check_exact_alias(p.dx, "dx", p.x, "x");
    }
    p.alpha = scalar(alpha, "alpha", xt);
    p.gamma = channels(gamma, "gamma", xt, p.x, &p.param_dtype, false);
    if (dalpha) p.dalpha = scalar(dalpha, "dalpha", xt);
    p.grad_dtype = p.param_dtype;
    bool have_grad_dtype = false;
    if (dgamma) {
      DType dt = p.param_dtype;
      p.dgamma = channels(dgamma, "dgamma", xt, p.x, &dt, false);
      if (dt != p.param_dtype && dt != DType::kFloat32)
        fail_arg("dgamma", "must be gamma's dtype or float32, got ", dtype_name(dt));
      p.grad_dtype = dt, have_grad_dtype = true;
    }
    if (dbeta) {
      DType dt = p.grad_dtype;
      p.dbeta = channels(dbeta, "dbeta", xt, p.x, &dt, have_grad_dtype);
      if (dt != p.param_dtype && dt != DType::kFloat32)
        fail_arg("dbeta", "must be gamma's dtype or float32, got ", dtype_name(dt));
      p.grad_dtype = dt;
    }
    [[maybe_unused]] const bool sums = p.dalpha || p.dgamma || p.dbeta;
    if (is_cuda(xt)) {
      TIGON_ON_CUDA(xt, {
        if (sums)
          check_workspace(workspace, workspace_bytes, cuda_workspace_bytes(p.x.rows, p.x.cols, p.x.dtype),
                          "tigon_dyt_bwd_workspace_size");
        bwd_cuda(p, workspace, stream);
      });
    } else {
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
