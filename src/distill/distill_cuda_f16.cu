// Row kernels for __half student and teacher.
#include "distill/distill_launch.cuh"

namespace tigon::distill {
TIGON_DISTILL_INSTANTIATE(__half)
}  // namespace tigon::distill
