// MoE experts C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "moe/moe.h"
#include "tigon/moe.h"

namespace tigon::moe {
namespace {

const std::initializer_list<DType> kFloats = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

void check_shape(const tigon_tensor& t, const char* arg, std::initializer_list<int64_t> shape, const char* what) {
  bool ok = t.ndim == int32_t(shape.size());
  for (int i = 0; ok && i < t.ndim; ++i) ok = t.shape[i] == shape.begin()[i];
  if (!ok) fail_arg(arg, "must be ", what, ", got shape ", shape_string(t));
}

// A contiguous tensor of the given shape on x's device with one of the allowed dtypes.
const void* dense(const tigon_tensor* t, const char* arg, const tigon_tensor& x, std::initializer_list<int64_t> shape,
                  const char* what, DType want) {
  const tigon_tensor& u = require(t, arg);
  check_same_device(x, "x", u, arg);
  check_shape(u, arg, shape, what);
  const DType d = dtype_of(u, arg);
  if (d != want) fail_dtype(arg, dtype_name(d), " differs from 'x' (", dtype_name(want), ")");
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return as_vector(u, arg, n);
}

// [T, H] rows on x's device in x's dtype; their row stride to *stride.
void* rows_of(const tigon_tensor* t, const char* arg, const tigon_tensor& x, const Problem& p, int64_t* stride) {
  const tigon_tensor& u = require(t, arg);
  check_same_device(x, "x", u, arg);
  const RowMatrix m = as_rows(u, arg);
  if (m.rows != p.tokens || m.cols != p.hidden)
    fail_arg(arg, "must be [", p.tokens, ", ", p.hidden, "] like 'x', got shape ", shape_string(u));
  if (m.dtype != p.dtype) fail_dtype(arg, dtype_name(m.dtype), " differs from 'x' (", dtype_name(p.dtype), ")");
  *stride = m.row_stride;
  return m.data;
}

// The inputs every call takes; weights may be NULL (the workspace query).
Problem problem_of(const tigon_tensor* x, const tigon_tensor* ids, const tigon_tensor* weights,
                   const tigon_tensor* gate_up_weight, const tigon_tensor* down_weight, int activation) {
  Problem p;
  const tigon_tensor& xt = require(x, "x");
  if (xt.ndim != 2) fail_arg("x", "must be [tokens, hidden], got shape ", shape_string(xt));
  const RowMatrix xm = as_rows(xt, "x");
  check_dtype_in(xm.dtype, "x", kFloats);
  p.x = xm.data, p.x_stride = xm.row_stride, p.dtype = xm.dtype, p.tokens = xm.rows, p.hidden = xm.cols;

  const tigon_tensor& it = require(ids, "ids");
  check_same_device(xt, "x", it, "ids");
  if (it.ndim != 2 || it.shape[0] != p.tokens || it.shape[1] < 1)
    fail_arg("ids", "must be [", p.tokens, ", k] with k >= 1 (x's tokens), got shape ", shape_string(it));
  p.k = it.shape[1];
  p.ids_dtype = dtype_of(it, "ids");
  check_dtype_in(p.ids_dtype, "ids", {DType::kInt64, DType::kInt32});
  p.ids = as_vector(it, "ids", p.pairs());

  const tigon_tensor& gt = require(gate_up_weight, "gate_up_weight");
  if (gt.ndim != 3 || gt.shape[0] < 1 || gt.shape[1] < 2 || gt.shape[1] % 2 != 0 || gt.shape[2] != p.hidden)
    fail_arg("gate_up_weight", "must be [experts, 2 * intermediate, ", p.hidden, "] (x's hidden size last), got shape ",
             shape_string(gt));
  p.experts = gt.shape[0], p.inter = gt.shape[1] / 2;
  p.gate_up = dense(gate_up_weight, "gate_up_weight", xt, {p.experts, 2 * p.inter, p.hidden}, "contiguous", p.dtype);
  p.down = dense(down_weight, "down_weight", xt, {p.experts, p.hidden, p.inter},
                 "[experts, hidden, intermediate] matching gate_up_weight", p.dtype);

  if (weights != nullptr) {
    const tigon_tensor& wt = require(weights, "weights");
    check_same_device(xt, "x", wt, "weights");
    check_shape(wt, "weights", {p.tokens, p.k}, "[tokens, k] like 'ids'");
    p.weights_dtype = dtype_of(wt, "weights");
    if (p.weights_dtype != DType::kFloat32 && p.weights_dtype != p.dtype)
      fail_dtype("weights", dtype_name(p.weights_dtype), " must be float32 or x's (", dtype_name(p.dtype), ")");
    p.weights = as_vector(wt, "weights", p.pairs());
  }
  if (activation != TIGON_GLU_SILU && activation != TIGON_GLU_GELU_TANH && activation != TIGON_GLU_GELU_ERF)
    fail_arg("params.activation", "must be TIGON_GLU_SILU (0), TIGON_GLU_GELU_TANH (1) or TIGON_GLU_GELU_ERF (2), got ",
             activation);
  p.activation = activation;
  return p;
}

// What the CUDA path takes beyond the C API's general rules.
[[maybe_unused]] void check_cuda(const Problem& p) {
  if (p.dtype == DType::kFloat32)
    fail_dtype("x", "float32 is not supported on CUDA (the grouped GEMMs take float16 or bfloat16)");
  if (p.hidden % 8 != 0 || p.inter % 8 != 0)
    fail_arg("gate_up_weight", "hidden (", p.hidden, ") and intermediate (", p.inter,
             ") sizes must be multiples of 8 on CUDA (16-byte rows for the GEMMs' TMA loads)");
  if (p.x_stride % 8 != 0) fail_arg("x", "row stride ", p.x_stride, " must be a multiple of 8 on CUDA");
}

}  // namespace
}  // namespace tigon::moe

using namespace tigon;
using namespace tigon::moe;

extern "C" {

tigon_status_t tigon_moe_workspace_size(const tigon_tensor* x, const tigon_tensor* ids,
                                        const tigon_tensor* gate_up_weight, const tigon_tensor* down_weight,
                                        [[maybe_unused]] int32_t backward, size_t* bytes) {
  return api_guard("tigon_moe_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    [[maybe_unused]] const Problem p = problem_of(x, ids, nullptr, gate_up_weight, down_weight, TIGON_GLU_SILU);
    *bytes = 0;
    if (is_cuda(*x)) TIGON_ON_CUDA(*x, { *bytes = cuda_workspace_bytes(p, backward != 0); });
  });
}

tigon_status_t tigon_moe_fwd(const tigon_tensor* x, const tigon_tensor* ids, const tigon_tensor* weights,
                             const tigon_tensor* gate_up_weight, const tigon_tensor* down_weight,
                             const tigon_tensor* out, tigon_moe_params params, [[maybe_unused]] void* workspace,
                             [[maybe_unused]] size_t workspace_bytes, [[maybe_unused]] void* stream) {
  return api_guard("tigon_moe_fwd", [&] {
    if (weights == nullptr) fail_arg("weights", "is required but was NULL");
    Fwd f;
    f.p = problem_of(x, ids, weights, gate_up_weight, down_weight, params.activation);
    f.out = rows_of(out, "out", *x, f.p, &f.out_stride);
    if (f.p.tokens == 0 || f.p.hidden == 0) return;
    if (is_cuda(*x)) {
      TIGON_ON_CUDA(*x, {
        check_cuda(f.p);
        if (f.out_stride % 8 != 0) fail_arg("out", "row stride ", f.out_stride, " must be a multiple of 8 on CUDA");
        check_workspace(workspace, workspace_bytes, cuda_workspace_bytes(f.p, false), "tigon_moe_workspace_size");
        fwd_cuda(f, workspace, stream);
      });
    } else {
      fwd_cpu(f);
    }
  });
}

tigon_status_t tigon_moe_bwd(const tigon_tensor* x, const tigon_tensor* ids, const tigon_tensor* weights,
                             const tigon_tensor* gate_up_weight, const tigon_tensor* down_weight,
                             const tigon_tensor* dout, const tigon_tensor* dx, const tigon_tensor* dweights,
                             const tigon_tensor* dgate_up_weight, const tigon_tensor* ddown_weight,
                             tigon_moe_params params, [[maybe_unused]] void* workspace,
                             [[maybe_unused]] size_t workspace_bytes, [[maybe_unused]] void* stream) {
  return api_guard("tigon_moe_bwd", [&] {
    if (weights == nullptr) fail_arg("weights", "is required but was NULL");
    Bwd b;
    b.p = problem_of(x, ids, weights, gate_up_weight, down_weight, params.activation);
    const Problem& p = b.p;
    b.dout = rows_of(dout, "dout", *x, p, &b.dout_stride);
    if (dx != nullptr) b.dx = rows_of(dx, "dx", *x, p, &b.dx_stride);
    if (dweights != nullptr) {
      const tigon_tensor& t = require(dweights, "dweights");
      check_same_device(*x, "x", t, "dweights");
      check_shape(t, "dweights", {p.tokens, p.k}, "[tokens, k] like 'weights'");
      if (dtype_of(t, "dweights") != p.weights_dtype)
        fail_dtype("dweights", dtype_name(dtype_of(t, "dweights")), " differs from 'weights' (",
                   dtype_name(p.weights_dtype), ")");
      b.dweights = as_vector(t, "dweights", p.pairs());
    }
    if (dgate_up_weight != nullptr)
      b.dgate_up = const_cast<void*>(dense(dgate_up_weight, "dgate_up_weight", *x, {p.experts, 2 * p.inter, p.hidden},
                                           "gate_up_weight's shape, contiguous", p.dtype));
    if (ddown_weight != nullptr)
      b.ddown = const_cast<void*>(dense(ddown_weight, "ddown_weight", *x, {p.experts, p.hidden, p.inter},
                                        "down_weight's shape, contiguous", p.dtype));
    if (p.tokens == 0 || p.hidden == 0) {  // nothing routed: the weight gradients are zeros
      if (b.dgate_up || b.ddown) {
        if (is_cuda(*x)) {
          TIGON_ON_CUDA(*x, { bwd_cuda(b, nullptr, stream); });
        } else {
          bwd_cpu(b);
        }
      }
      return;
    }
    if (is_cuda(*x)) {
      TIGON_ON_CUDA(*x, {
        check_cuda(p);
        if (b.dout_stride % 8 != 0) fail_arg("dout", "row stride ", b.dout_stride, " must be a multiple of 8 on CUDA");
        if (b.dx != nullptr && b.dx_stride % 8 != 0)
          fail_arg("dx", "row stride ", b.dx_stride, " must be a multiple of 8 on CUDA");
        check_workspace(workspace, workspace_bytes, cuda_workspace_bytes(p, true), "tigon_moe_workspace_size");
        bwd_cuda(b, workspace, stream);
      });
    } else {
      bwd_cpu(b);
    }
  });
}

}  // extern "C"
