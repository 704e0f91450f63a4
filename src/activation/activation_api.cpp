// Pointwise activation C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <algorithm>

#include "activation/activation.h"
#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "tigon/activation.h"

namespace tigon::activation {
namespace {

void check_params(const tigon_activation_params& params, bool backward) {
  if (params.activation < TIGON_ACT_NONE || params.activation > TIGON_ACT_RELU2)
    fail_arg("activation", "must be 0 (none), 1 (relu), 2 (gelu_erf), 3 (gelu_tanh), 4 (silu) or 5 (relu2), got ",
             params.activation);
  if (params.saved_output != 0 && params.saved_output != 1)
    fail_arg("saved_output", "must be 0 or 1, got ", params.saved_output);
  if (backward && params.saved_output == 1 && params.activation != TIGON_ACT_RELU &&
      params.activation != TIGON_ACT_RELU2 && params.activation != TIGON_ACT_NONE)
    fail_arg("saved_output",
             "the derivative of this activation needs its input (only relu, relu2 and none can be "
             "differentiated from their output)");
}

RowMatrix first(const tigon_tensor* t, const char* arg) {
  const RowMatrix m = as_rows(require(t, arg), arg);
  check_dtype_in(m.dtype, arg, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  return m;
}

}  // namespace

int64_t partial_rows(int64_t rows, int64_t cols, DType dtype) {
  const int64_t per_vec = 16 / dtype_bytes(dtype), lanes = 32 * per_vec;
  const int64_t strips = (cols + lanes - 1) / lanes, row_blocks = (rows + kSumRows - 1) / kSumRows;
  return std::max<int64_t>(1, std::min(row_blocks, (kSumBlocks + strips - 1) / strips));
}

}  // namespace tigon::activation

using namespace tigon;
using namespace tigon::activation;

extern "C" {

tigon_status_t tigon_activation_fwd(const tigon_tensor* x, const tigon_tensor* y, tigon_activation_params params,
                                    void* stream) {
  return api_guard("tigon_activation_fwd", [&] {
    check_params(params, false);
    FwdProblem p;
    p.x = first(x, "x");
    p.y = rows_like(y, "y", *x, "x", p.x);
    check_exact_alias(p.y, "y", p.x, "x");
    p.activation = params.activation;
    if (p.x.rows == 0 || p.x.cols == 0) return;
    if (is_cuda(*x)) {
      TIGON_ON_CUDA(*x, fwd_cuda(p, stream));
    } else {
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_activation_bwd(const tigon_tensor* dy, const tigon_tensor* saved, const tigon_tensor* dx,
                                    tigon_activation_params params, void* stream) {
  return api_guard("tigon_activation_bwd", [&] {
    check_params(params, true);
    BwdProblem p;
    p.dy = first(dy, "dy");
    p.saved = rows_like(saved, "saved", *dy, "dy", p.dy);
    p.dx = rows_like(dx, "dx", *dy, "dy", p.dy);
    check_exact_alias(p.dx, "dx", p.dy, "dy");
    check_exact_alias(p.dx, "dx", p.saved, "saved");
    p.activation =
        params.activation == TIGON_ACT_RELU2 && params.saved_output ? kActRelu2FromOutput : params.activation;
    if (p.dy.rows == 0 || p.dy.cols == 0) return;
    if (is_cuda(*dy)) {
      TIGON_ON_CUDA(*dy, bwd_cuda(p, stream));
    } else {
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
