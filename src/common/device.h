// Running on the tensors' CUDA device. TIGON_ON_CUDA(tensor, statement) runs the statement with the tensor's device
// current (restoring the caller's afterwards); in a CPU-only build it reports that CUDA is not available instead, so
// op files need no #ifdefs of their own.
#pragma once

#include "common/error.h"

namespace tigon {

#ifdef TIGON_WITH_CUDA
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

// Multiprocessor count of a device (cached per device; no synchronisation).
int sm_count(int device);

// Whether device is an sm_90 (Hopper) GPU and this build holds sm_90a code: ops with a Hopper kernel and another
// path choose with it.
bool has_sm90a(int device);

// Fails with TIGON_ERROR_NOT_SUPPORTED unless device is an sm_90 (Hopper) GPU and this build holds sm_90a code (the
// wgmma / TMA kernels); `what` names the kernels in the message ("the CUDA MoE experts").
void require_sm90a(int device, const char* what);

#define TIGON_ON_CUDA(tensor, ...)                                       \
  do {                                                                   \
    ::tigon::DeviceGuard tigon_device_guard_((tensor).device.device_id); \
    __VA_ARGS__;                                                         \
  } while (0)
#else
#define TIGON_ON_CUDA(tensor, ...) \
  ::tigon::fail(TIGON_ERROR_NOT_SUPPORTED, "this build of Tigon has no CUDA kernels (CPU-only build)")
#endif

}  // namespace tigon
