// Host-side launch helpers for kernels that size their shared memory to the device and run as thread block clusters
// (the cross entropy and distillation row kernels): the device's shared-memory limits, the opt-in to all of it, and
// whether a cluster shape can be resident at all. Each asks the runtime once and caches the answer.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "common/cuda_check.h"

namespace tigon::cuda {

// What the launchers need to know about the current device, asked once per device.
struct DeviceLimits {
  int smem_block = 0, smem_sm = 0;  // opt-in shared memory per block and per SM (bytes)
};
inline DeviceLimits device_limits() {
  static std::mutex mu;
  static std::vector<DeviceLimits> cache;
  int dev = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (dev >= int(cache.size())) cache.resize(dev + 1);
  DeviceLimits& d = cache[dev];
  if (d.smem_block == 0) {
    TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&d.smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&d.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  }
  return d;
}

// Lets a kernel use all the opt-in shared memory: once per kernel and device (a host call costs microseconds). Keyed
// by the kernel's address: every instantiation has the same type, and each needs its own attribute.
inline void allow_max_smem(const void* kernel, const DeviceLimits& d, int dev) {
  static std::mutex mu;
  static std::set<std::pair<int, const void*>> done;
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert({dev, kernel}).second) return;
  cudaFuncAttributes attr{};
  TIGON_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  TIGON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        d.smem_block - int(attr.sharedSizeBytes)));
}

// How many clusters of this shape can be resident at once (0: none, and a launch would fail: a cluster's blocks must
// fit in one GPC at once), asked once per kernel, device and shape.
inline int active_clusters(const void* kernel, const cudaLaunchConfig_t& cfg, int dev) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, unsigned, unsigned, size_t>, int> cache;
  const auto key = std::make_tuple(dev, kernel, cfg.attrs[0].val.clusterDim.x, cfg.blockDim.x, cfg.dynamicSmemBytes);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();  // a refused query is an answer, not an error to report later
    n = 0;
  }
  return cache[key] = std::max(n, 0);
}

// A launch configuration with its attributes kept beside it: a thread block cluster of `cluster` blocks along x
// (0: none) and, as its second attribute, programmatic dependent launch (numAttrs leaves it off; pdl() turns it on).
struct LaunchConfig {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg;
  int plain = 0;  // attributes without programmatic dependent launch
  LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, unsigned cluster = 0)
      : LaunchConfig(grid, block, smem, stream, dim3(cluster, cluster > 0 ? 1 : 0, cluster > 0 ? 1 : 0)) {}
  // cluster: the cluster's shape, or x = 0 for none
  LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, dim3 cluster) : attr(), cfg() {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    if (cluster.x > 0) {
      attr[plain].id = cudaLaunchAttributeClusterDimension;
      attr[plain].val.clusterDim.x = cluster.x;
      attr[plain].val.clusterDim.y = cluster.y;
      attr[plain].val.clusterDim.z = cluster.z;
      ++plain;
    }
    attr[plain].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[plain].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs = plain;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
  void pdl(bool on) { cfg.numAttrs = on ? plain + 1 : plain; }
};

// Launches kernel with c, as a programmatic dependent of the kernel before it in the stream when pdl (refused: a
// plain launch). False, with no error left behind, when the launch is refused either way.
template <class... Params, class... Args>
bool try_launch(LaunchConfig& c, bool pdl, void (*kernel)(Params...), Args... args) {
  if (pdl) {
    c.pdl(true);
    if (cudaLaunchKernelEx(&c.cfg, kernel, args...) == cudaSuccess) return true;
    (void)cudaGetLastError();
  }
  c.pdl(false);
  if (cudaLaunchKernelEx(&c.cfg, kernel, args...) == cudaSuccess) return true;
  (void)cudaGetLastError();  // a configuration error is not sticky: clear it and let the caller try another plan
  return false;
}

// Launches kernel as a programmatic dependent of the kernel before it in the stream, or plainly where the runtime
// refuses that; a launch refused both ways is an error. The kernel must call grid_dependency_wait() before it reads
// anything the kernel ahead of it may write, and before it writes anything at all.
// cluster: the thread block cluster's shape (x = 0: none).
template <class... Params, class... Args>
void launch_pdl(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, dim3 cluster, void (*kernel)(Params...),
                Args... args) {
  LaunchConfig c(grid, block, smem, stream, cluster);
  if (try_launch(c, true, kernel, args...)) return;
  TIGON_CUDA_CHECK(cudaLaunchKernelEx(&c.cfg, kernel, args...));  // refused both ways: the runtime says why
}
template <class... Params, class... Args>
void launch_pdl(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, void (*kernel)(Params...), Args... args) {
  launch_pdl(grid, block, smem, stream, dim3(0, 0, 0), kernel, args...);
}

}  // namespace tigon::cuda
