// 2-D convolution C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <string>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "conv2d/conv2d.h"
#include "tigon/conv2d.h"

namespace tigon::conv2d {
namespace {

// A 4-D [d0, d1, d2, d3] tensor (torch's [N, C, H, W] order) with dense channels-last strides; returns its data.
const void* channels_last(const tigon_tensor& t, const char* arg) {
  if (t.ndim != 4) fail_arg(arg, "must be 4-D [N, C, H, W], got shape ", shape_string(t));
  const int64_t c = t.shape[1], h = t.shape[2], w = t.shape[3];
  for (int i = 0; i < 4; ++i)
    if (t.shape[i] <= 0) fail_arg(arg, "must have no empty dimension, got shape ", shape_string(t));
  if (t.strides) {
    const int64_t want[4] = {h * w * c, 1, w * c, c};
    for (int i = 0; i < 4; ++i)
      if (t.shape[i] > 1 && t.strides[i] != want[i])
        fail_arg(arg, "must be dense channels-last (strides [", want[0], ", 1, ", want[2], ", ", want[3],
                 "], torch's memory_format=torch.channels_last), got shape ", shape_string(t));
  } else if (c > 1 && h * w > 1) {
    fail_arg(arg, "must be dense channels-last, got row-major (NCHW) strides for shape ", shape_string(t));
  }
  return static_cast<const char*>(t.data) + t.byte_offset;
}

int64_t out_extent(int64_t in, int pad, int dil, int64_t taps, int stride) {
  return (in + 2 * int64_t(pad) - int64_t(dil) * (taps - 1) - 1) / stride + 1;
}

Problem problem_of(const tigon_tensor* xt, const tigon_tensor* wt, const tigon_tensor* bt, const tigon_tensor* rt,
                   const tigon_tensor* yt, const tigon_conv2d_params& prm) {
  const tigon_tensor& x = require(xt, "x");
  const tigon_tensor& w = require(wt, "weight");
  const tigon_tensor& y = require(yt, "y");
  Problem p;
  p.dtype = dtype_of(x, "x");
  check_dtype_in(p.dtype, "x", {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  p.x = channels_last(x, "x");
  p.n = x.shape[0], p.c = x.shape[1], p.h = x.shape[2], p.w = x.shape[3];
  check_same_device(x, "x", w, "weight");
  if (dtype_of(w, "weight") != p.dtype)
    fail_dtype("weight", dtype_name(dtype_of(w, "weight")), " differs from 'x' (", dtype_name(p.dtype), ")");
  p.weight = channels_last(w, "weight");
  p.k = w.shape[0], p.r = w.shape[2], p.s = w.shape[3];
  if (w.shape[1] != p.c)
    fail_arg("weight", "must have x's ", p.c, " input channels (groups = 1), got shape ", shape_string(w));
  if (prm.stride_h < 1 || prm.stride_w < 1)
    fail_arg("params.stride_h", "and stride_w must be >= 1, got ", prm.stride_h, " and ", prm.stride_w);
  if (prm.pad_h < 0 || prm.pad_w < 0)
    fail_arg("params.pad_h", "and pad_w must be >= 0, got ", prm.pad_h, " and ", prm.pad_w);
  if (prm.dilation_h < 1 || prm.dilation_w < 1)
    fail_arg("params.dilation_h", "and dilation_w must be >= 1, got ", prm.dilation_h, " and ", prm.dilation_w);
  if (prm.activation != TIGON_ACT_NONE && prm.activation != TIGON_ACT_RELU)
    fail_arg("params.activation", "must be TIGON_ACT_NONE or TIGON_ACT_RELU, got ", prm.activation);
  p.stride_h = prm.stride_h, p.stride_w = prm.stride_w, p.pad_h = prm.pad_h, p.pad_w = prm.pad_w;
  p.dil_h = prm.dilation_h, p.dil_w = prm.dilation_w, p.relu = prm.activation == TIGON_ACT_RELU;
  p.p = out_extent(p.h, p.pad_h, p.dil_h, p.r, p.stride_h);
  p.q = out_extent(p.w, p.pad_w, p.dil_w, p.s, p.stride_w);
  if (p.p < 1 || p.q < 1)
    fail_arg("weight", "(", p.r, " x ", p.s, " taps, dilated) is larger than the padded input ", p.h, " x ", p.w);
  const auto output_like = [&](const tigon_tensor& t, const char* arg) {
    check_same_device(x, "x", t, arg);
    if (dtype_of(t, arg) != p.dtype)
      fail_dtype(arg, dtype_name(dtype_of(t, arg)), " differs from 'x' (", dtype_name(p.dtype), ")");
    const void* d = channels_last(t, arg);
    if (t.shape[0] != p.n || t.shape[1] != p.k || t.shape[2] != p.p || t.shape[3] != p.q)
      fail_arg(arg, "must be [", p.n, ", ", p.k, ", ", p.p, ", ", p.q, "], got shape ", shape_string(t));
    return d;
  };
  p.y = const_cast<void*>(output_like(y, "y"));
  if (rt) p.residual = output_like(*rt, "residual");
  if (bt) {
    DType bdt = p.dtype;
    p.bias = param_vector(bt, "bias", x, "x", p.k, p.dtype, &bdt, true);
  }
  return p;
}

}  // namespace
}  // namespace tigon::conv2d

using namespace tigon;
using namespace tigon::conv2d;

extern "C" {

tigon_status_t tigon_conv2d_fwd_workspace_size(const tigon_tensor* x, const tigon_tensor* weight,
                                               const tigon_tensor* bias, const tigon_tensor* residual,
                                               const tigon_tensor* y, tigon_conv2d_params params, size_t* bytes) {
  return api_guard("tigon_conv2d_fwd_workspace_size", [&] {
    if (!bytes) fail_arg("bytes", "must not be NULL");
    *bytes = 0;
    const Problem p = problem_of(x, weight, bias, residual, y, params);
    if (is_cuda(*x)) TIGON_ON_CUDA(*x, *bytes = fwd_cuda_workspace(p, x->device.device_id));
  });
}

tigon_status_t tigon_conv2d_fwd(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                                const tigon_tensor* residual, const tigon_tensor* y, tigon_conv2d_params params,
                                [[maybe_unused]] void* workspace, [[maybe_unused]] size_t workspace_bytes,
                                [[maybe_unused]] void* stream) {
  return api_guard("tigon_conv2d_fwd", [&] {
    const Problem p = problem_of(x, weight, bias, residual, y, params);
    if (is_cuda(*x)) {
      TIGON_ON_CUDA(*x, fwd_cuda(p, x->device.device_id, workspace, workspace_bytes, stream));
    } else {
      fwd_cpu(p);
    }
  });
}

}  // extern "C"
