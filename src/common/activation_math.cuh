// The pointwise activations on the device: act(x) and dy · act'(x) in fp32, keyed on tigon_activation_t, by the
// formulas, and in the order, of torch's own CUDA kernels for relu, silu and gelu (and their backward), so each
// result lands on the rounding torch's gets: one fp32 ulp apart is enough to flip a bf16 rounding. (A faster
// tanh-GELU form, a·σ(2u) on the SFU, cost that parity and was dropped: docs/performance/swiglu-geglu.md.) Compiled
// without fast-math, expf / tanhf / erff are the accurate library functions torch uses too.
#pragma once

#include <cuda_runtime.h>

#include "tigon/activation.h"

namespace tigon::cuda {

constexpr float kGeluTanhBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluTanhKappa = 0.044715f;
constexpr float kGeluErfAlpha = 0.7071067811865476f;  // 1 / sqrt(2)
constexpr float kGeluErfBeta = 0.3989422804014327f;   // 1 / sqrt(2 pi)

template <int Act>
__device__ __forceinline__ float act_fwd(float x) {
  if constexpr (Act == TIGON_ACT_RELU) {
    return x > 0.f ? x : 0.f;
  } else if constexpr (Act == TIGON_ACT_RELU2) {  // torch's relu then square: x * x of the (exact) relu, one rounding
    const float r = x > 0.f ? x : 0.f;
    return r * r;
  } else if constexpr (Act == TIGON_ACT_SILU) {
    return x / (1.f + expf(-x));
  } else if constexpr (Act == TIGON_ACT_GELU_TANH) {
    const float x_cube = x * x * x;
    const float inner = kGeluTanhBeta * (x + kGeluTanhKappa * x_cube);
    return 0.5f * x * (1.f + tanhf(inner));
  } else if constexpr (Act == TIGON_ACT_GELU_ERF) {
    return x * 0.5f * (1.f + erff(x * kGeluErfAlpha));
  } else {
    return x;
  }
}

// dy · act'(x). For RELU and NONE, x may be the output as well (the sign is the same); RELU2's derivative from its
// output is act_bwd_relu2_from_output.
template <int Act>
__device__ __forceinline__ float act_bwd(float x, float dy) {
  if constexpr (Act == TIGON_ACT_RELU) {
    return x > 0.f ? dy : 0.f;
  } else if constexpr (Act == TIGON_ACT_RELU2) {  // torch's square backward, dy * (2 x), then relu's mask
    return x > 0.f ? dy * (2.f * x) : 0.f;
  } else if constexpr (Act == TIGON_ACT_SILU) {
    const float sigmoid = 1.f / (1.f + expf(-x));
    return dy * sigmoid * (1.f + x * (1.f - sigmoid));
  } else if constexpr (Act == TIGON_ACT_GELU_TANH) {
    const float x_sq = x * x, x_cube = x_sq * x;
    const float inner = kGeluTanhBeta * (x + kGeluTanhKappa * x_cube);
    const float tanh_inner = tanhf(inner);
    const float left = 0.5f * x, right = 1.f + tanh_inner;
    const float left_derivative = 0.5f * right;
    const float tanh_derivative = 1.f - tanh_inner * tanh_inner;
    const float inner_derivative = kGeluTanhBeta * (1.f + 3.f * kGeluTanhKappa * x_sq);
    const float right_derivative = left * tanh_derivative * inner_derivative;
    return dy * (left_derivative + right_derivative);
  } else if constexpr (Act == TIGON_ACT_GELU_ERF) {
    const float cdf = 0.5f * (1.f + erff(x * kGeluErfAlpha));
    const float pdf = expf(-0.5f * x * x) * kGeluErfBeta;
    return dy * (cdf + x * pdf);
  } else {
    return dy;
  }
}

// dy · 2 sqrt(y): the squared ReLU's derivative from its output y = relu(x)^2 (0 where y is 0).
__device__ __forceinline__ float act_bwd_relu2_from_output(float y, float dy) {
  return y > 0.f ? dy * (2.f * sqrtf(y)) : 0.f;
}

}  // namespace tigon::cuda
