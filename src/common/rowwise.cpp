// Argument validation of the row-wise ops (common/rowwise.h).
#include "common/rowwise.h"

#include "common/error.h"

namespace tigon::rowwise {
namespace {

RowMatrix first(const tigon_tensor* t, const char* arg, const char* op) {
  const RowMatrix m = as_rows(require(t, arg), arg);
  check_dtype_in(m.dtype, arg, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  if (m.rows > 0 && m.cols == 0) fail_arg(arg, "last dimension must be non-empty (", op, " over no elements)");
  return m;
}

}  // namespace

FwdProblem fwd_problem(const tigon_tensor* x, const tigon_tensor* y, const char* op) {
  FwdProblem p;
  p.x = first(x, "x", op);
  p.y = rows_like(y, "y", *x, "x", p.x);
  check_exact_alias(p.y, "y", p.x, "x");
  return p;
}

FwdProblem causal_fwd_problem(const tigon_tensor* x, const tigon_tensor* y, const char* op) {
  FwdProblem p = fwd_problem(x, y, op);
  if (x->ndim < 2 || x->shape[x->ndim - 2] != x->shape[x->ndim - 1])
    fail_arg("x", "must be [..., L, L] for the causal mask, got ", shape_string(*x));
  p.causal = x->shape[x->ndim - 1];
  return p;
}

BwdProblem bwd_problem(const tigon_tensor* dy, const tigon_tensor* y, const tigon_tensor* dx, const char* op) {
  BwdProblem p;
  p.y = first(y, "y", op);
  p.dy = rows_like(dy, "dy", *y, "y", p.y);
  p.dx = rows_like(dx, "dx", *y, "y", p.y);
  if (p.dx.data != p.dy.data) check_exact_alias(p.dx, "dx", p.y, "y");
  if (p.dx.data != p.y.data) check_exact_alias(p.dx, "dx", p.dy, "dy");
  return p;
}

}  // namespace tigon::rowwise
