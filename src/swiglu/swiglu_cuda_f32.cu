// SwiGLU / GeGLU kernels for float (one file per dtype keeps each translation unit small and the build parallel).
#include "swiglu/swiglu_launch.cuh"

namespace tigon::swiglu {
TIGON_SWIGLU_INSTANTIATE(float)
}  // namespace tigon::swiglu
