// GroupNorm C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "group_norm/group_norm.h"
#include "tigon/group_norm.h"

namespace tigon::group_norm {
namespace {

// x: [N, C, *] contiguous in fp32, fp16 or bf16, with G dividing C.
Shape input_shape(const tigon_tensor* t, const tigon_group_norm_params& prm) {
  const tigon_tensor& x = require(t, "x");
  Shape s;
  s.dtype = dtype_of(x, "x");
  check_dtype_in(s.dtype, "x", {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  if (x.ndim < 2) fail_arg("x", "must be [N, C, *] with at least 2 dimensions, got shape ", shape_string(x));
  s.n = x.shape[0], s.c = x.shape[1];
  for (int i = 2; i < x.ndim; ++i) s.s *= x.shape[i];
  if (prm.num_groups <= 0) fail_arg("params.num_groups", "must be > 0, got ", prm.num_groups);
  if (s.c % prm.num_groups != 0)
    fail_arg("params.num_groups", prm.num_groups, " does not divide the ", s.c, " channels of 'x'");
  if (!(prm.eps >= 0.f)) fail_arg("params.eps", "must be >= 0, got ", prm.eps);
  s.groups = prm.num_groups;
  as_vector(x, "x", numel(x));  // contiguous
  return s;
}

// Another [N, C, *] tensor of x's shape, dtype and device, contiguous.
void* like_x(const tigon_tensor* t, const char* arg, const tigon_tensor& x, const Shape& s) {
  const tigon_tensor& u = require(t, arg);
  check_same_device(x, "x", u, arg);
  const DType dt = dtype_of(u, arg);
  if (dt != s.dtype)
    fail_dtype(arg, dtype_name(dt), " differs from 'x' (", dtype_name(s.dtype), "); x, y, dy and dx share one dtype");
  bool same = u.ndim == x.ndim;
  for (int i = 0; same && i < x.ndim; ++i) same = u.shape[i] == x.shape[i];
  if (!same) fail_arg(arg, "must have the shape of 'x' ", shape_string(x), ", got ", shape_string(u));
  return as_vector(u, arg, numel(x));
}

// A contiguous [C] vector of x's dtype or fp32 (exactly *dt when `match`), on x's device.
void* channels(const tigon_tensor* t, const char* arg, const tigon_tensor& x, const Shape& s, DType* dt, bool match) {
  return param_vector(t, arg, x, "x", s.c, s.dtype, dt, match);
}

// mean or rstd: contiguous fp32 [N, G] on x's device.
float* stats(const tigon_tensor* t, const char* arg, const tigon_tensor& x, const Shape& s) {
  const tigon_tensor& v = require(t, arg);
  check_same_device(x, "x", v, arg);
  check_dtype_in(dtype_of(v, arg), arg, {DType::kFloat32});
  return static_cast<float*>(as_vector(v, arg, s.n * s.groups));
}

}  // namespace

size_t cuda_workspace_bytes(const Shape& s) {
  const size_t one = (size_t(s.n) * size_t(s.c) * sizeof(float) + 255) / 256 * 256;
  return 2 * one;
}

}  // namespace tigon::group_norm

using namespace tigon;
using namespace tigon::group_norm;

extern "C" {

tigon_status_t tigon_group_norm_fwd(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                                    const tigon_tensor* y, const tigon_tensor* mean, const tigon_tensor* rstd,
                                    tigon_group_norm_params params, [[maybe_unused]] void* stream) {
  return api_guard("tigon_group_norm_fwd", [&] {
    FwdProblem p;
    p.shape = input_shape(x, params);
    const tigon_tensor& xt = *x;
    p.x = as_vector(xt, "x", numel(xt));
    p.y = like_x(y, "y", xt, p.shape);
    p.mean = stats(mean, "mean", xt, p.shape);
    p.rstd = stats(rstd, "rstd", xt, p.shape);
    p.eps = params.eps;
    bool have_dtype = false;
    if (weight) p.weight = channels(weight, "weight", xt, p.shape, &p.param_dtype, false), have_dtype = true;
    if (bias) p.bias = channels(bias, "bias", xt, p.shape, &p.param_dtype, have_dtype);
    if (p.shape.n == 0 || p.shape.c == 0) return;
    if (is_cuda(xt)) {
      TIGON_ON_CUDA(xt, fwd_cuda(p, stream));
    } else {
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_group_norm_bwd_workspace_size(const tigon_tensor* x, tigon_group_norm_params params,
                                                   size_t* bytes) {
  return api_guard("tigon_group_norm_bwd_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    const Shape s = input_shape(x, params);
    *bytes = is_cuda(*x) ? cuda_workspace_bytes(s) : 0;
  });
}

tigon_status_t tigon_group_norm_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                    const tigon_tensor* mean, const tigon_tensor* rstd, const tigon_tensor* dx,
                                    const tigon_tensor* dweight, const tigon_tensor* dbias,
                                    tigon_group_norm_params params, [[maybe_unused]] void* workspace,
                                    [[maybe_unused]] size_t workspace_bytes, [[maybe_unused]] void* stream) {
  return api_guard("tigon_group_norm_bwd", [&] {
    BwdProblem p;
    p.shape = input_shape(x, params);
    const tigon_tensor& xt = *x;
    p.x = as_vector(xt, "x", numel(xt));
    p.dy = like_x(dy, "dy", xt, p.shape);
    if (dx) p.dx = like_x(dx, "dx", xt, p.shape);
    if (p.dx && p.dx == p.x) fail_arg("dx", "must not be 'x' (dy may be written over, x is read throughout)");
    p.mean = stats(mean, "mean", xt, p.shape);
    p.rstd = stats(rstd, "rstd", xt, p.shape);
    if (weight) p.weight = channels(weight, "weight", xt, p.shape, &p.param_dtype, false);
    p.grad_dtype = p.param_dtype;
    bool have_grad_dtype = false;
    const auto grad = [&](const tigon_tensor* t, const char* arg) -> void* {  // dweight, dbias: one dtype
      if (!t) return nullptr;
      DType dt = p.grad_dtype;
      void* data = channels(t, arg, xt, p.shape, &dt, have_grad_dtype);
      if (dt != p.param_dtype && dt != DType::kFloat32)
        fail_arg(arg, "must be weight's dtype or float32, got ", dtype_name(dt));
      p.grad_dtype = dt, have_grad_dtype = true;
      return data;
    };
    p.dweight = grad(dweight, "dweight");
    p.dbias = grad(dbias, "dbias");
    if (p.shape.n == 0 || p.shape.c == 0) return;
    if (is_cuda(xt)) {
      TIGON_ON_CUDA(xt, {
        if (p.dweight || p.dbias)
          check_workspace(workspace, workspace_bytes, cuda_workspace_bytes(p.shape),
                          "tigon_group_norm_bwd_workspace_size");
        bwd_cuda(p, workspace, stream);
      });
    } else {
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
