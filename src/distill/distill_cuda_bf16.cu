// Row kernels for __nv_bfloat16 student and teacher.
#include "distill/distill_launch.cuh"

namespace tigon::distill {
TIGON_DISTILL_INSTANTIATE(__nv_bfloat16)
}  // namespace tigon::distill
