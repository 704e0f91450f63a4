// Linear + activation C API: argument validation, the workspace sizes, then the CPU reference or the CUDA path.
#include <cstdint>
#include <utility>

#include "activation/activation.h"
#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "linear_act/linear_act.h"
#include "tigon/linear_act.h"

namespace tigon::linear_act {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

const char* act_name(int act) {
  switch (act) {
    case TIGON_ACT_RELU: return "relu";
    case TIGON_ACT_GELU_ERF: return "gelu_erf";
    case TIGON_ACT_GELU_TANH: return "gelu_tanh";
    case TIGON_ACT_SILU: return "silu";
    default: return "none";
  }
}

void check_params(const tigon_linear_act_params& params) {
  if (params.activation < TIGON_ACT_NONE || params.activation > TIGON_ACT_SILU)
    fail_arg("activation", "must be 0 (none), 1 (relu), 2 (gelu_erf), 3 (gelu_tanh) or 4 (silu), got ",
             params.activation);
}

// x [M, K] (K > 0) and weight [N, K] of one float dtype on one device.
void check_x_weight(const tigon_tensor* x, const tigon_tensor* weight, RowMatrix& xm, RowMatrix& wm) {
  const tigon_tensor& xt = require(x, "x");
  xm = as_rows(xt, "x");
  check_dtype_in(xm.dtype, "x", {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  if (xm.cols == 0) fail_arg("x", "needs in_features K > 0 (last dimension is 0)");
  const tigon_tensor& wt = require(weight, "weight");
  check_same_device(xt, "x", wt, "weight");
  if (wt.ndim != 2) fail_arg("weight", "must be [N, K] (nn.Linear's layout), got shape ", shape_string(wt));
  wm = as_rows(wt, "weight");
  check_dtype_in(wm.dtype, "weight", {xm.dtype});
  if (wm.cols != xm.cols) fail_arg("weight", "has in_features ", wm.cols, " but x has ", xm.cols);
  for (RowMatrix* m : {&xm, &wm})  // a lone row's stride is arbitrary; the GEMMs want a leading dimension >= K
    if (m->rows <= 1) m->row_stride = m->cols;
}

// An [M, N] matrix of dtype (named arg) on x's device.
RowMatrix check_mn(const tigon_tensor* t, const char* arg, const tigon_tensor& xt, int64_t M, int64_t N, DType dt) {
  const tigon_tensor& tt = require(t, arg);
  check_same_device(xt, "x", tt, arg);
  RowMatrix m = as_rows(tt, arg);
  check_dtype_in(m.dtype, arg, {dt});
  if (m.rows != M || m.cols != N)
    fail_arg(arg, "must be [M, N] = [", M, ", ", N, "] (x's rows, weight's rows), got ", m.rows, " rows of ", m.cols,
             " (shape ", shape_string(tt), ")");
  if (m.rows <= 1) m.row_stride = m.cols;
  return m;
}

// A contiguous vector of n values of `dt` or fp32 on x's device.
void* check_grad_vector(const tigon_tensor* t, const char* arg, const tigon_tensor& xt, int64_t n, DType dt,
                        DType& got) {
  const tigon_tensor& tt = require(t, arg);
  check_same_device(xt, "x", tt, arg);
  got = dtype_of(tt, arg);
  check_dtype_in(got, arg, {dt, DType::kFloat32});
  return as_vector(tt, arg, n);
}

void check_workspace(void* workspace, size_t workspace_bytes, size_t need, const char* size_function) {
  if (workspace_bytes < need || (need > 0 && workspace == nullptr))
    fail_arg("workspace", "needs ", need, " bytes (", size_function, "), got ", workspace_bytes);
  if ((reinterpret_cast<uintptr_t>(workspace) & 255u) != 0) fail_arg("workspace", "must be 256-byte aligned");
}

bool needs_z(int act) { return act != TIGON_ACT_NONE; }

}  // namespace

Workspace fwd_workspace(bool cuda) {
  Workspace w;
  if (cuda) w.bytes = align256(kGemmWorkspace);
  return w;
}

Workspace bwd_workspace(int64_t rows, int64_t cols, DType dtype, bool cuda) {
  Workspace w;
  if (!cuda) return w;
  w.partials_at = align256(kGemmWorkspace);
  const int64_t parts = activation::partial_rows(rows, cols, dtype);
  w.bytes = w.partials_at + align256(size_t(parts) * size_t(cols) * sizeof(float));
  return w;
}

namespace {

tigon_status_t workspace_size(const char* function, const tigon_tensor* x, const tigon_tensor* weight,
                              const tigon_linear_act_params& params, size_t* bytes, bool backward) {
  return api_guard(function, [&] {
    check_params(params);
    RowMatrix xm, wm;
    check_x_weight(x, weight, xm, wm);
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    const bool cuda = is_cuda(*x);
    *bytes = (backward ? bwd_workspace(xm.rows, wm.rows, xm.dtype, cuda) : fwd_workspace(cuda)).bytes;
  });
}

}  // namespace
}  // namespace tigon::linear_act

using namespace tigon;
using namespace tigon::linear_act;

extern "C" {

tigon_status_t tigon_linear_act_fwd_workspace_size(const tigon_tensor* x, const tigon_tensor* weight,
                                                   tigon_linear_act_params params, size_t* bytes) {
  return workspace_size("tigon_linear_act_fwd_workspace_size", x, weight, params, bytes, false);
}

tigon_status_t tigon_linear_act_bwd_workspace_size(const tigon_tensor* x, const tigon_tensor* weight,
                                                   tigon_linear_act_params params, size_t* bytes) {
  return workspace_size("tigon_linear_act_bwd_workspace_size", x, weight, params, bytes, true);
}

tigon_status_t tigon_linear_act_fwd(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                                    const tigon_tensor* residual, const tigon_tensor* out, const tigon_tensor* z,
                                    tigon_linear_act_params params, void* workspace, size_t workspace_bytes,
                                    void* stream) {
  return api_guard("tigon_linear_act_fwd", [&] {
    check_params(params);
    FwdProblem p;
    check_x_weight(x, weight, p.x, p.w);
    const tigon_tensor& xt = *x;
    const int64_t M = p.x.rows, N = p.w.rows;
    const DType dt = p.x.dtype;
    p.activation = params.activation;
    if (bias) {
      const tigon_tensor& bt = require(bias, "bias");
      check_same_device(xt, "x", bt, "bias");
      check_dtype_in(dtype_of(bt, "bias"), "bias", {dt});
      p.bias = as_vector(bt, "bias", N);
    }
    p.out = check_mn(out, "out", xt, M, N, dt);
    if (residual) p.residual = check_mn(residual, "residual", xt, M, N, dt);
    if (z) p.z = check_mn(z, "z", xt, M, N, dt);
    const bool any = M > 0 && N > 0;
    for (const auto& [in, arg] : {std::pair{p.x.data, "x"}, std::pair{p.w.data, "weight"},
                                  std::pair{p.residual.data, "residual"}, std::pair{p.z.data, "z"}})
      if (any && in == p.out.data) fail_arg("out", "must not overlap '", arg, "'");
    if (any && p.z.data && p.z.data == p.residual.data) fail_arg("z", "must not overlap 'residual'");
    const bool cuda = is_cuda(xt);
    if (cuda)
      check_workspace(workspace, workspace_bytes, fwd_workspace(true).bytes, "tigon_linear_act_fwd_workspace_size");
    if (!any) return;
    if (cuda) {
      TIGON_ON_CUDA(xt, fwd_cuda(p, workspace, stream));
    } else {
      (void)stream;
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_linear_act_bwd(const tigon_tensor* dy, const tigon_tensor* x, const tigon_tensor* weight,
                                    const tigon_tensor* z, const tigon_tensor* y, const tigon_tensor* dz,
                                    const tigon_tensor* dx, const tigon_tensor* dw, const tigon_tensor* db,
                                    tigon_linear_act_params params, void* workspace, size_t workspace_bytes,
                                    void* stream) {
  return api_guard("tigon_linear_act_bwd", [&] {
    check_params(params);
    BwdProblem p;
    check_x_weight(x, weight, p.x, p.w);
    const tigon_tensor& xt = *x;
    const int64_t M = p.x.rows, N = p.w.rows, K = p.x.cols;
    const DType dt = p.x.dtype;
    const int act = params.activation;
    p.activation = act;
    p.dy = check_mn(dy, "dy", xt, M, N, dt);
    const char* saved_arg = act == TIGON_ACT_RELU && !z && y ? "y" : "z";
    if (act == TIGON_ACT_RELU && !z && y) {
      p.saved = check_mn(y, "y", xt, M, N, dt);
    } else if (needs_z(act)) {
      if (!z)
        fail_arg("z", "is required for activation ", act_name(act), " (the backward reads the pre-activation",
                 act == TIGON_ACT_RELU ? "; or pass relu's output as y)" : ")");
      p.saved = check_mn(z, "z", xt, M, N, dt);
    } else if (z || y) {
      fail_arg(z ? "z" : "y", "must be NULL for activation none (its derivative is 1)");
    }
    if (needs_z(act)) {
      if (!dz) fail_arg("dz", "is required for activation ", act_name(act), " (it receives dy ∘ act'(z))");
      p.dz = check_mn(dz, "dz", xt, M, N, dt);
      check_exact_alias(p.dz, "dz", p.dy, "dy");
      check_exact_alias(p.dz, "dz", p.saved, saved_arg);
    } else {
      if (dz) fail_arg("dz", "must be NULL for activation none (dZ is dy)");
      p.dz = p.dy;
    }
    if (dx) {
      const tigon_tensor& t = require(dx, "dx");
      check_same_device(xt, "x", t, "dx");
      p.dx = as_rows(t, "dx");
      check_dtype_in(p.dx.dtype, "dx", {dt});
      if (p.dx.rows != M || p.dx.cols != K)
        fail_arg("dx", "must be [M, K] = [", M, ", ", K, "] like x, got ", p.dx.rows, " rows of ", p.dx.cols);
      if (M <= 1) p.dx.row_stride = K;
      if (M > 0 && (p.dx.data == p.dz.data || p.dx.data == p.dy.data)) fail_arg("dx", "must not overlap 'dz' or 'dy'");
    }
    if (dw) p.dw = check_grad_vector(dw, "dw", xt, N * K, dt, p.dw_dtype);
    if (db) p.db = check_grad_vector(db, "db", xt, N, dt, p.db_dtype);
    const bool cuda = is_cuda(xt);
    const Workspace ws = bwd_workspace(M, N, dt, cuda);
    if (cuda) check_workspace(workspace, workspace_bytes, ws.bytes, "tigon_linear_act_bwd_workspace_size");
    if (cuda) {
      TIGON_ON_CUDA(xt, bwd_cuda(p, ws, workspace, stream));
    } else {
      (void)stream;
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
