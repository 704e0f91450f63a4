// Row kernels for float student and teacher.
#include "distill/distill_launch.cuh"

namespace tigon::distill {
TIGON_DISTILL_INSTANTIATE(float)
}  // namespace tigon::distill
