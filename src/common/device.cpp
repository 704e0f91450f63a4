#include "common/device.h"

#ifdef TIGON_WITH_CUDA
#include <cuda_runtime.h>

#include <mutex>
#include <utility>
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

namespace {
int cached_attribute(cudaDeviceAttr attr, int device) {
  static std::mutex mu;
  static std::vector<std::pair<int, int>> values;  // index: device * 2 + which
  const int slot = device * 2 + (attr == cudaDevAttrMultiProcessorCount ? 0 : 1);
  std::lock_guard<std::mutex> lock(mu);
  if (slot >= int(values.size())) values.resize(slot + 1, {0, 0});
  if (!values[slot].first) {
    TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&values[slot].second, attr, device));
    values[slot].first = 1;
  }
  return values[slot].second;
}
}  // namespace

int sm_count(int device) { return cached_attribute(cudaDevAttrMultiProcessorCount, device); }
int compute_major(int device) { return cached_attribute(cudaDevAttrComputeCapabilityMajor, device); }

}  // namespace tigon
#endif
