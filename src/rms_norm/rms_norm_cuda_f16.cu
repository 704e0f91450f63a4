// RMSNorm kernels for __half inputs (one file per input dtype keeps each translation unit small and the build parallel).
#include "rms_norm/rms_norm_launch.cuh"

namespace tigon::rms_norm {
TIGON_RMS_NORM_INSTANTIATE(__half)
}  // namespace tigon::rms_norm
