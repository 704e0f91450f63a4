// RMSNorm kernels for __nv_bfloat16 inputs (one file per input dtype keeps each translation unit small and the build parallel).
#include "rms_norm/rms_norm_launch.cuh"

namespace tigon::rms_norm {
TIGON_RMS_NORM_INSTANTIATE(__nv_bfloat16)
}  // namespace tigon::rms_norm
