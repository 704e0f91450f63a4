// Sparsemax C API: the row-wise ops' validation and dispatch (common/rowwise.h) over this op's implementations.
#include "common/rowwise.h"
#include "sparsemax/sparsemax.h"
#include "tigon/sparsemax.h"

using namespace tigon;
using namespace tigon::sparsemax;

extern "C" {

tigon_status_t tigon_sparsemax_fwd(const tigon_tensor* x, const tigon_tensor* y, [[maybe_unused]] void* stream) {
  return rowwise::fwd_entry("tigon_sparsemax_fwd", "sparsemax", x, y, fwd_cpu,
                            [&]([[maybe_unused]] const FwdProblem& p) { TIGON_ON_CUDA(*x, fwd_cuda(p, stream)); });
}

tigon_status_t tigon_sparsemax_causal_fwd(const tigon_tensor* x, const tigon_tensor* y, [[maybe_unused]] void* stream) {
  return rowwise::fwd_entry(
      "tigon_sparsemax_causal_fwd", "sparsemax", x, y, fwd_cpu,
      [&]([[maybe_unused]] const FwdProblem& p) { TIGON_ON_CUDA(*x, fwd_cuda(p, stream)); }, true);
}

tigon_status_t tigon_sparsemax_bwd(const tigon_tensor* dy, const tigon_tensor* y, const tigon_tensor* dx,
                                   [[maybe_unused]] void* stream) {
  return rowwise::bwd_entry("tigon_sparsemax_bwd", "sparsemax", dy, y, dx, bwd_cpu,
                            [&]([[maybe_unused]] const BwdProblem& p) { TIGON_ON_CUDA(*y, bwd_cuda(p, stream)); });
}

}  // extern "C"
