// Row and scale kernels for __half logits.
#include "cross_entropy/cross_entropy_launch.cuh"

namespace tigon::cross_entropy {
TIGON_CROSS_ENTROPY_INSTANTIATE(__half)
}  // namespace tigon::cross_entropy
