// GEMV C API (tigon_gemv, tigon_gemv_parts, and tigon_gemv_int8 of include/tigon/int8.h: the same kernels with an
// int8 weight):
// argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <initializer_list>
#include <vector>

#include "common/device.h"
#include "common/error.h"
#include "common/overlap.h"
#include "common/tensor.h"
#include "gemv/gemv.h"
#include "tigon/gemv.h"
#include "tigon/int8.h"

namespace tigon::gemv {
namespace {

// x [..., K]: fills p.x.
void check_x(const tigon_tensor* x, Problem* p) {
  const tigon_tensor& xt = require(x, "x");
  p->x = as_rows(xt, "x");
  check_dtype_in(p->x.dtype, "x", {DType::kBFloat16, DType::kFloat16, DType::kFloat32});
  if (p->x.cols == 0) fail_arg("x", "last dimension (K) must be non-empty, got shape ", shape_string(xt));
}

// Weight i [N_i, K] (named w_arg): x's dtype, or int8 (tigon_gemv_int8). Fills p.w[i].
void check_weight(const tigon_tensor* x, const tigon_tensor* weight, const char* w_arg, bool int8, int i, Problem* p) {
  const tigon_tensor& wt = require(weight, w_arg);
  check_same_device(*x, "x", wt, w_arg);
  if (wt.ndim != 2) fail_arg(w_arg, "must be 2-D [N, K], got shape ", shape_string(wt));
  p->w[i] = as_rows(wt, w_arg);
  check_dtype_in(p->w[i].dtype, w_arg, {int8 ? DType::kInt8 : p->x.dtype});
  if (p->w[i].cols != p->x.cols)
    fail_arg(w_arg, "must be [N, K] with x's K = ", p->x.cols, ", got shape ", shape_string(wt));
}

// Bias i, NULL or [N_i] in x's dtype (named b_arg). Fills p.bias[i].
void check_bias(const tigon_tensor* x, const tigon_tensor* bias, const char* b_arg, int i, Problem* p) {
  if (!bias) return;
  const tigon_tensor& bt = require(bias, b_arg);
  check_same_device(*x, "x", bt, b_arg);
  check_dtype_in(dtype_of(bt, b_arg), b_arg, {p->x.dtype});
  p->bias[i] = as_vector(bt, b_arg, p->w[i].rows);
}

const char* const kWeight[] = {"weights[0]", "weights[1]", "weights[2]", "weights[3]"};
const char* const kBias[] = {"biases[0]", "biases[1]", "biases[2]", "biases[3]"};

// weights: parts of them, named w_args.
size_t workspace_size(const tigon_tensor* x, const tigon_tensor* const* weights, int parts, const char* const* w_args,
                      bool int8, size_t* bytes) {
  if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
  Problem p;
  check_x(x, &p);
  p.parts = parts;
  for (int i = 0; i < parts; ++i) check_weight(x, weights[i], w_args[i], int8, i, &p);
  *bytes = 0;
  if (is_cuda(*x))
    TIGON_ON_CUDA(*x, *bytes = cuda_workspace_bytes(p.x.rows, p.n(), p.x.cols, p.x.dtype, x->device.device_id));
  return *bytes;
}

void check_parts(const tigon_tensor* const* weights, int32_t parts) {
  if (parts < 1 || parts > kMaxParts) fail_arg("parts", "must be in [1, ", kMaxParts, "], got ", parts);
  if (weights == nullptr) fail_arg("weights", "is required but was NULL");
}

// y [..., N] (N the parts' rows summed), its overlap with the inputs, then either path.
void run(const tigon_tensor* x, const tigon_tensor* y, const char* w_arg, Problem& p, const std::vector<Span>& inputs,
         void* workspace, size_t workspace_bytes, void* stream, const char* size_fn) {
  const tigon_tensor& yt = require(y, "y");
  check_same_device(*x, "x", yt, "y");
  p.y = as_rows(yt, "y");
  check_dtype_in(p.y.dtype, "y", {p.x.dtype});
  if (p.y.rows != p.x.rows || p.y.cols != p.n())
    fail_arg("y", "must have M = ", p.x.rows, " rows of N = ", p.n(), " (x's rows, ", w_arg, "'s rows), got shape ",
             shape_string(yt));
  check_no_overlap({{"y", y}}, inputs.data(), inputs.size());
  if (p.x.rows == 0 || p.n() == 0) return;
  if (is_cuda(*x)) {
    TIGON_ON_CUDA(*x, {
      check_workspace(workspace, workspace_bytes,
                      cuda_workspace_bytes(p.x.rows, p.n(), p.x.cols, p.x.dtype, x->device.device_id), size_fn);
      run_cuda(p, workspace, workspace_bytes, stream);
    });
  } else {
    (void)workspace, (void)workspace_bytes, (void)stream, (void)size_fn;
    run_cpu(p);
  }
}

// tigon_gemv (scale NULL) and tigon_gemv_int8 (q_w and its scales).
void gemv(const tigon_tensor* x, const tigon_tensor* weight, const char* w_arg, const tigon_tensor* scale,
          const tigon_tensor* bias, const tigon_tensor* y, void* workspace, size_t workspace_bytes, void* stream,
          const char* size_fn) {
  Problem p;
  check_x(x, &p);
  check_weight(x, weight, w_arg, scale != nullptr, 0, &p);
  if (scale) {
    const tigon_tensor& st = require(scale, "scale_w");
    check_same_device(*x, "x", st, "scale_w");
    check_dtype_in(dtype_of(st, "scale_w"), "scale_w", {DType::kFloat32});
    p.w_scale = static_cast<const float*>(as_vector(st, "scale_w", p.w[0].rows));
  }
  check_bias(x, bias, "bias", 0, &p);
  run(x, y, w_arg, p, {{"x", x}, {w_arg, weight}, {"scale_w", scale}, {"bias", bias}}, workspace, workspace_bytes,
      stream, size_fn);
}

// tigon_gemv_parts: parts weights (and biases) side by side in y.
void gemv_parts(const tigon_tensor* x, const tigon_tensor* const* weights, const tigon_tensor* const* biases,
                int32_t parts, const tigon_tensor* y, void* workspace, size_t workspace_bytes, void* stream) {
  check_parts(weights, parts);
  Problem p;
  check_x(x, &p);
  p.parts = parts;
  std::vector<Span> inputs = {{"x", x}};
  for (int i = 0; i < parts; ++i) {
    check_weight(x, weights[i], kWeight[i], false, i, &p);
    check_bias(x, biases ? biases[i] : nullptr, kBias[i], i, &p);
    inputs.push_back({kWeight[i], weights[i]});
    inputs.push_back({kBias[i], biases ? biases[i] : nullptr});
  }
  run(x, y, "weights", p, inputs, workspace, workspace_bytes, stream, "tigon_gemv_parts_workspace_size");
}

}  // namespace
}  // namespace tigon::gemv

using namespace tigon;

extern "C" {

tigon_status_t tigon_gemv_workspace_size(const tigon_tensor* x, const tigon_tensor* weight, size_t* bytes) {
  return api_guard("tigon_gemv_workspace_size", [&] {
    const char* name = "weight";
    gemv::workspace_size(x, &weight, 1, &name, false, bytes);
  });
}

tigon_status_t tigon_gemv(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                          const tigon_tensor* y, void* workspace, size_t workspace_bytes, void* stream) {
  return api_guard("tigon_gemv", [&] {
    gemv::gemv(x, weight, "weight", nullptr, bias, y, workspace, workspace_bytes, stream, "tigon_gemv_workspace_size");
  });
}

tigon_status_t tigon_gemv_parts_workspace_size(const tigon_tensor* x, const tigon_tensor* const* weights, int32_t parts,
                                               size_t* bytes) {
  return api_guard("tigon_gemv_parts_workspace_size", [&] {
    gemv::check_parts(weights, parts);
    gemv::workspace_size(x, weights, parts, gemv::kWeight, false, bytes);
  });
}

tigon_status_t tigon_gemv_parts(const tigon_tensor* x, const tigon_tensor* const* weights,
                                const tigon_tensor* const* biases, int32_t parts, const tigon_tensor* y,
                                void* workspace, size_t workspace_bytes, void* stream) {
  return api_guard("tigon_gemv_parts",
                   [&] { gemv::gemv_parts(x, weights, biases, parts, y, workspace, workspace_bytes, stream); });
}

tigon_status_t tigon_gemv_int8_workspace_size(const tigon_tensor* x, const tigon_tensor* q_w, size_t* bytes) {
  return api_guard("tigon_gemv_int8_workspace_size", [&] {
    const char* name = "q_w";
    gemv::workspace_size(x, &q_w, 1, &name, true, bytes);
  });
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
