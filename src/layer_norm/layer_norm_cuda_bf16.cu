// LayerNorm kernels for __nv_bfloat16 inputs (one file per input dtype keeps each translation unit small and the build parallel).
#include "layer_norm/layer_norm_launch.cuh"

namespace tigon::layer_norm {
TIGON_LAYER_NORM_INSTANTIATE(__nv_bfloat16)
}  // namespace tigon::layer_norm
