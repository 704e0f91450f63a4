#include "common/device.h"

#ifdef TIGON_WITH_CUDA
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "common/cuda_check.h"

namespace tigon {

DeviceGuard::DeviceGuard(int device) {
  TIGON_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    TIGON_CUDA_CHECK(cudaSetDevice(device));
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) cudaSetDevice(previous_);
}

int sm_count(int device) {
  static std::mutex mu;
  static std::vector<int> counts;
  std::lock_guard<std::mutex> lock(mu);
  if (device >= int(counts.size())) counts.resize(device + 1, 0);
  if (counts[device] == 0)
    TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device));
  return counts[device];
}

namespace {

// The device's compute capability, major * 10 + minor.
int compute_capability(int device) {
  int major = 0, minor = 0;
  TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

bool built_for_sm90a() { return std::strstr(TIGON_CUDA_ARCHS_STRING, "90a") != nullptr; }

}  // namespace

bool has_sm90a(int device) { return compute_capability(device) == 90 && built_for_sm90a(); }

void require_sm90a(int device, const char* what) {
  const int cc = compute_capability(device);
  if (cc != 90) fail(TIGON_ERROR_NOT_SUPPORTED, what, " needs a Hopper GPU (sm_90); device ", device, " is sm_", cc);
  if (!built_for_sm90a())
    fail(TIGON_ERROR_NOT_SUPPORTED,
         "this build of Tigon has no sm_90a code (CMAKE_CUDA_ARCHITECTURES=", TIGON_CUDA_ARCHS_STRING, "); ", what,
         " needs it");
}

}  // namespace tigon
#endif
