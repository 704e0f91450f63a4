// Int8 C API: argument validation, the workspace sizes, then the CPU reference or the CUDA path by the tensors'
// device. (tigon_gemv_int8 is the GEMV family's: src/gemv/gemv_api.cpp.)
#include <cstdint>

#include "common/device.h"
#include "common/error.h"
#include "common/overlap.h"
#include "common/tensor.h"
#include "int8/int8.h"
#include "tigon/int8.h"

namespace tigon::int8 {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// A contiguous fp32 vector of n values on ref's device.
const float* check_scales(const tigon_tensor* t, const char* arg, const tigon_tensor& ref, const char* ref_arg,
                          int64_t n) {
  const tigon_tensor& st = require(t, arg);
  check_same_device(ref, ref_arg, st, arg);
  check_dtype_in(dtype_of(st, arg), arg, {DType::kFloat32});
  return static_cast<const float*>(as_vector(st, arg, n));
}

// An int8 [rows, K] matrix with the IMMA layout rules (K, row stride and address multiples of 4).
RowMatrix check_int8_operand(const tigon_tensor& t, const char* arg) {
  if (t.ndim != 2) fail_arg(arg, "must be 2-D [rows, K], got shape ", shape_string(t));
  RowMatrix m = as_rows(t, arg);
  check_dtype_in(m.dtype, arg, {DType::kInt8});
  if (m.rows <= 1) m.row_stride = m.cols;
  if (m.cols % 4 != 0) fail_arg(arg, "needs K a multiple of 4 (cuBLASLt's int8 GEMM), got K = ", m.cols);
  if (m.row_stride % 4 != 0) fail_arg(arg, "needs a row stride that is a multiple of 4, got ", m.row_stride);
  if (reinterpret_cast<uintptr_t>(m.data) % 4 != 0) fail_arg(arg, "must be 4-byte aligned");
  return m;
}

void check_linear_inputs(const tigon_tensor* q_x, const tigon_tensor* q_w, LinearProblem* p) {
  const tigon_tensor& xt = require(q_x, "q_x");
  const tigon_tensor& wt = require(q_w, "q_w");
  check_same_device(xt, "q_x", wt, "q_w");
  p->qx = check_int8_operand(xt, "q_x");
  p->qw = check_int8_operand(wt, "q_w");
  if (p->qx.cols == 0) fail_arg("q_x", "last dimension (K) must be non-empty, got shape ", shape_string(xt));
  if (p->qx.cols > (int64_t(1) << 17)) fail_arg("q_x", "K may be at most 131072 (exact int32 sums), got ", p->qx.cols);
  if (p->qw.cols != p->qx.cols) fail_arg("q_w", "has K = ", p->qw.cols, " but q_x has K = ", p->qx.cols);
  if (p->qw.rows % 4 != 0) fail_arg("q_w", "needs N (its rows) a multiple of 4, got ", p->qw.rows);
}

}  // namespace

size_t linear_workspace_bytes(int64_t M, int64_t N, bool cuda) {
  return cuda ? align256(kGemmWorkspace) + align256(size_t(M) * size_t(N) * sizeof(int32_t)) : 0;
}

}  // namespace tigon::int8

using namespace tigon;
using namespace tigon::int8;

extern "C" {

tigon_status_t tigon_quantize_rows(const tigon_tensor* x, const tigon_tensor* q, const tigon_tensor* scale,
                                   void* stream) {
  return api_guard("tigon_quantize_rows", [&] {
    QuantizeProblem p;
    const tigon_tensor& xt = require(x, "x");
    p.x = as_rows(xt, "x");
    check_dtype_in(p.x.dtype, "x", {DType::kBFloat16, DType::kFloat16, DType::kFloat32});
    const tigon_tensor& qt = require(q, "q");
    check_same_device(xt, "x", qt, "q");
    p.q = as_rows(qt, "q");
    check_dtype_in(p.q.dtype, "q", {DType::kInt8});
    if (p.q.rows != p.x.rows || p.q.cols != p.x.cols)
      fail_arg("q", "must be [M, K] = [", p.x.rows, ", ", p.x.cols, "] like x, got shape ", shape_string(qt));
    p.scale = const_cast<float*>(check_scales(scale, "scale", xt, "x", p.x.rows));
    const Span inputs[] = {{"x", x}};
    check_no_overlap({{"q", q}, {"scale", scale}}, inputs);
    if (p.x.rows == 0) return;
    if (is_cuda(xt)) {
      TIGON_ON_CUDA(xt, quantize_cuda(p, stream));
    } else {
      (void)stream;
      quantize_cpu(p);
    }
  });
}

tigon_status_t tigon_int8_linear_workspace_size(const tigon_tensor* q_x, const tigon_tensor* q_w, size_t* bytes) {
  return api_guard("tigon_int8_linear_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    LinearProblem p;
    check_linear_inputs(q_x, q_w, &p);
    *bytes = linear_workspace_bytes(p.qx.rows, p.qw.rows, is_cuda(*q_x));
  });
}

tigon_status_t tigon_int8_linear(const tigon_tensor* q_x, const tigon_tensor* scale_x, const tigon_tensor* q_w,
                                 const tigon_tensor* scale_w, const tigon_tensor* bias, const tigon_tensor* out,
                                 tigon_int8_linear_params params, void* workspace, size_t workspace_bytes,
                                 void* stream) {
  return api_guard("tigon_int8_linear", [&] {
    if (params.activation < TIGON_ACT_NONE || params.activation > TIGON_ACT_SILU)
      fail_arg("activation", "must be 0 (none), 1 (relu), 2 (gelu_erf), 3 (gelu_tanh) or 4 (silu), got ",
               params.activation);
    LinearProblem p;
    p.activation = params.activation;
    check_linear_inputs(q_x, q_w, &p);
    const tigon_tensor& xt = *q_x;
    const int64_t M = p.qx.rows, N = p.qw.rows;
    p.scale_x = check_scales(scale_x, "scale_x", xt, "q_x", M);
    p.scale_w = check_scales(scale_w, "scale_w", xt, "q_x", N);
    const tigon_tensor& ot = require(out, "out");
    check_same_device(xt, "q_x", ot, "out");
    p.out = as_rows(ot, "out");
    check_dtype_in(p.out.dtype, "out", {DType::kBFloat16, DType::kFloat16, DType::kFloat32});
    if (p.out.rows != M || p.out.cols != N)
      fail_arg("out", "must be [M, N] = [", M, ", ", N, "] (q_x's rows, q_w's rows), got shape ", shape_string(ot));
    if (bias) {
      const tigon_tensor& bt = require(bias, "bias");
      check_same_device(xt, "q_x", bt, "bias");
      check_dtype_in(dtype_of(bt, "bias"), "bias", {p.out.dtype});
      p.bias = as_vector(bt, "bias", N);
    }
    const Span inputs[] = {{"q_x", q_x}, {"scale_x", scale_x}, {"q_w", q_w}, {"scale_w", scale_w}, {"bias", bias}};
    check_no_overlap({{"out", out}}, inputs);
    const bool cuda = is_cuda(xt);
    if (cuda) {
      check_workspace(workspace, workspace_bytes, linear_workspace_bytes(M, N, true),
                      "tigon_int8_linear_workspace_size");
      if ((reinterpret_cast<uintptr_t>(workspace) & 255u) != 0) fail_arg("workspace", "must be 256-byte aligned");
    }
    if (M == 0 || N == 0) return;
    if (cuda) {
      TIGON_ON_CUDA(xt, linear_cuda(p, workspace, stream));
    } else {
      (void)workspace, (void)workspace_bytes, (void)stream;
      linear_cpu(p);
    }
  });
}

}  // extern "C"
