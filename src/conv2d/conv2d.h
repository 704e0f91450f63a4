// 2-D convolution inside the library: the validated problem both implementations take.
#pragma once

#include <cstdint>

#include "common/tensor.h"
#include "tigon/conv2d.h"

namespace tigon::conv2d {

// Channels-last, dense: x[n, h, w, c] at ((n * H + h) * W + w) * C + c; weight[k, r, s, c], y and residual[n, p, q, k]
// the same way.
struct Problem {
  DType dtype = DType::kFloat32;
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t k = 0, r = 0, s = 0;         // output channels, filter rows and columns
  int64_t p = 0, q = 0;                // output rows and columns
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  bool relu = false;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;      // [K] or nullptr
  const void* residual = nullptr;  // like y, or nullptr
  void* y = nullptr;
};

void fwd_cpu(const Problem& p);
// workspace: at least fwd_cuda_workspace(p, device) bytes (cuDNN's engine may need some; the other paths none)
void fwd_cuda(const Problem& p, int device, void* workspace, size_t workspace_bytes, void* stream);
size_t fwd_cuda_workspace(const Problem& p, int device);

// A 1 x 1, unit-stride, unpadded convolution in 16 bits whose tensors TMA takes is a GEMM over the channels
// (conv2d_1x1.cu); fwd_cuda runs those through the library's sm_90 epilogue GEMM.
bool is_gemm(const Problem& p);
void fwd_gemm_cuda(const Problem& p, int device, void* stream);

// The other problems through cuDNN's fused graph when cuDNN is loadable and has an engine for the problem
// (conv2d_cudnn.cpp); false: not run, the CUTLASS implicit GEMM takes it. cudnn_workspace: the bytes that problem's
// cuDNN plan needs (0 where cuDNN does not take it); building the plan on first use.
bool fwd_cudnn(const Problem& p, int device, void* workspace, size_t workspace_bytes, void* stream);
size_t cudnn_workspace(const Problem& p, int device);

}  // namespace tigon::conv2d
