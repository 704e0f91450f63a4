// CUDA runtime error checks that throw tigon::Error (status TIGON_ERROR_CUDA) with the failing call in the message.
#pragma once

#include <cuda_runtime.h>

#include "common/error.h"

#define TIGON_CUDA_CHECK(call)                                                             \
  do {                                                                                     \
    cudaError_t tigon_err_ = (call);                                                       \
    if (tigon_err_ != cudaSuccess)                                                         \
      ::tigon::fail(TIGON_ERROR_CUDA, #call, " failed: ", cudaGetErrorString(tigon_err_)); \
  } while (0)

// After a kernel launch: reports a bad launch configuration without synchronising.
#define TIGON_CUDA_CHECK_LAUNCH() TIGON_CUDA_CHECK(cudaGetLastError())
