// LayerNorm kernels for __half inputs (one file per input dtype keeps each translation unit small and the build parallel).
#include "layer_norm/layer_norm_launch.cuh"

namespace tigon::layer_norm {
TIGON_LAYER_NORM_INSTANTIATE(__half)
}  // namespace tigon::layer_norm
