// Row and scale kernels for __nv_bfloat16 logits.
#include "cross_entropy/cross_entropy_launch.cuh"

namespace tigon::cross_entropy {
TIGON_CROSS_ENTROPY_INSTANTIATE(__nv_bfloat16)
}  // namespace tigon::cross_entropy
