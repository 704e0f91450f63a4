// Softmax C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "softmax/softmax.h"
#include "tigon/softmax.h"

namespace tigon::softmax {
namespace {

RowMatrix first(const tigon_tensor* t, const char* arg) {
  const RowMatrix m = as_rows(require(t, arg), arg);
  check_dtype_in(m.dtype, arg, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  if (m.rows > 0 && m.cols == 0) fail_arg(arg, "last dimension must be non-empty (softmax over no elements)");
  return m;
}

}  // namespace
}  // namespace tigon::softmax

using namespace tigon;
using namespace tigon::softmax;

extern "C" {

tigon_status_t tigon_softmax_fwd(const tigon_tensor* x, const tigon_tensor* y, [[maybe_unused]] void* stream) {
  return api_guard("tigon_softmax_fwd", [&] {
    FwdProblem p;
    p.x = first(x, "x");
    p.y = rows_like(y, "y", *x, "x", p.x);
    check_exact_alias(p.y, "y", p.x, "x");
    if (p.x.rows == 0) return;
    if (is_cuda(*x)) {
      TIGON_ON_CUDA(*x, fwd_cuda(p, stream));
    } else {
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_softmax_bwd(const tigon_tensor* dy, const tigon_tensor* y, const tigon_tensor* dx,
                                 [[maybe_unused]] void* stream) {
  return api_guard("tigon_softmax_bwd", [&] {
    BwdProblem p;
    p.y = first(y, "y");
    p.dy = rows_like(dy, "dy", *y, "y", p.y);
    p.dx = rows_like(dx, "dx", *y, "y", p.y);
    if (p.dx.data != p.dy.data) check_exact_alias(p.dx, "dx", p.y, "y");
    if (p.dx.data != p.y.data) check_exact_alias(p.dx, "dx", p.dy, "dy");
    if (p.y.rows == 0) return;
    if (is_cuda(*y)) {
      TIGON_ON_CUDA(*y, bwd_cuda(p, stream));
    } else {
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
