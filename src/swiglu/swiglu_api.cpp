// SwiGLU / GeGLU C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <cmath>
#include <utility>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "swiglu/swiglu.h"
#include "tigon/swiglu.h"

namespace tigon::swiglu {
namespace {

void check_params(const tigon_swiglu_params& params) {
  if (params.activation < TIGON_GLU_SILU || params.activation > TIGON_GLU_GELU_ERF)
    fail_arg("activation", "must be 0 (silu), 1 (gelu_tanh) or 2 (gelu_erf), got ", params.activation);
  if (!std::isfinite(params.gate_multiplier))
    fail_arg("gate_multiplier", "must be finite, got ", params.gate_multiplier);
  if (!std::isfinite(params.down_multiplier))
    fail_arg("down_multiplier", "must be finite, got ", params.down_multiplier);
}

// A multiplier the params leave at 0 is 1 (see tigon/swiglu.h).
template <class P>
void set_options(P& p, const tigon_swiglu_params& params) {
  p.activation = params.activation;
  p.gate = params.gate_multiplier == 0.f ? 1.f : params.gate_multiplier;
  p.down = params.down_multiplier == 0.f ? 1.f : params.down_multiplier;
}

// The first operand: any float dtype, any row layout. Every other tensor is checked against it.
RowMatrix first(const tigon_tensor* t, const char* arg) {
  const RowMatrix m = as_rows(require(t, arg), arg);
  check_dtype_in(m.dtype, arg, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  return m;
}

bool empty(const RowMatrix& m) { return m.rows == 0 || m.cols == 0; }

}  // namespace
}  // namespace tigon::swiglu

using namespace tigon;
using namespace tigon::swiglu;

extern "C" {

tigon_status_t tigon_swiglu_fwd(const tigon_tensor* a, const tigon_tensor* b, const tigon_tensor* c,
                                tigon_swiglu_params params, void* stream) {
  return api_guard("tigon_swiglu_fwd", [&] {
    check_params(params);
    FwdProblem p;
    p.a = first(a, "a");
    p.b = rows_like(b, "b", *a, "a", p.a);
    p.c = rows_like(c, "c", *a, "a", p.a);
    check_exact_alias(p.c, "c", p.a, "a");
    check_exact_alias(p.c, "c", p.b, "b");
    set_options(p, params);
    if (empty(p.a)) return;
    if (is_cuda(*a)) {
      TIGON_ON_CUDA(*a, fwd_cuda(p, stream));
    } else {
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_swiglu_bwd(const tigon_tensor* dc, const tigon_tensor* a, const tigon_tensor* b,
                                const tigon_tensor* da, const tigon_tensor* db, tigon_swiglu_params params,
                                void* stream) {
  return api_guard("tigon_swiglu_bwd", [&] {
    check_params(params);
    BwdProblem p;
    p.a = first(a, "a");
    p.b = rows_like(b, "b", *a, "a", p.a);
    p.dc = rows_like(dc, "dc", *a, "a", p.a);
    p.da = rows_like(da, "da", *a, "a", p.a);
    p.db = rows_like(db, "db", *a, "a", p.a);
    if (p.da.data == p.db.data && !empty(p.a)) fail_arg("db", "must not alias 'da'");
    for (const auto& [out, out_arg] : {std::pair{&p.da, "da"}, std::pair{&p.db, "db"}}) {
      check_exact_alias(*out, out_arg, p.a, "a");
      check_exact_alias(*out, out_arg, p.b, "b");
      check_exact_alias(*out, out_arg, p.dc, "dc");
    }
    set_options(p, params);
    if (empty(p.a)) return;
    if (is_cuda(*a)) {
      TIGON_ON_CUDA(*a, bwd_cuda(p, stream));
    } else {
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
