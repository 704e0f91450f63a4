// Row and scale kernels for float logits.
#include "cross_entropy/cross_entropy_launch.cuh"

namespace tigon::cross_entropy {
TIGON_CROSS_ENTROPY_INSTANTIATE(float)
}  // namespace tigon::cross_entropy
