// RMSNorm kernels for float inputs (one file per input dtype keeps each translation unit small and the build parallel).
#include "rms_norm/rms_norm_launch.cuh"

namespace tigon::rms_norm {
template void launch_fwd<float, float, float>(const FwdArgs&, const Plan&, cudaStream_t);
template int64_t launch_bwd<float, float, float>(const BwdArgs&, const Plan&, cudaStream_t);
}  // namespace tigon::rms_norm
