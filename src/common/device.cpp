#include "common/device.h"

#ifdef TIGON_WITH_CUDA
#include <cuda_runtime.h>

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

}  // namespace tigon
#endif
