// LayerNorm kernels for float inputs: parameters are fp32 too, so one pair of launchers.
#include "layer_norm/layer_norm_launch.cuh"

namespace tigon::layer_norm {
template void launch_fwd<float, float>(const FwdArgs&, const Plan&, cudaStream_t);
template int64_t launch_bwd<float, float>(const BwdArgs&, const Plan&, cudaStream_t);
}  // namespace tigon::layer_norm
