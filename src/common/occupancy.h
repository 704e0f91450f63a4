// Resident blocks per multiprocessor for a kernel and block size, asked once: the occupancy calculator costs
// microseconds of host time, too much for every launch of a persistent-grid kernel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "common/cuda_check.h"

namespace tigon::cuda {

template <class Kernel>
int resident_blocks(Kernel kernel, int threads) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), threads);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int n = 0;
  TIGON_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0));
  return cache[key] = std::max(1, n);
}

}  // namespace tigon::cuda
