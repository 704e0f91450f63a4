// The pointwise activations and their derivatives in fp64, straight from their definitions: what the CPU references
// of the activation, linear + activation and gated (SwiGLU / GeGLU) families compute.
#pragma once

#include <cmath>

#include "tigon/activation.h"
#include "tigon/swiglu.h"

namespace tigon {

struct ActAndGrad {
  double act, grad;  // act(x) and d act / d x
};

// kind: tigon_activation_t.
inline ActAndGrad activation_ref(int kind, double x) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
  constexpr double kGeluCubic = 0.044715;
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
  switch (kind) {
    case TIGON_ACT_RELU: return {x > 0 ? x : 0.0, x > 0 ? 1.0 : 0.0};
    case TIGON_ACT_RELU2: return {x > 0 ? x * x : 0.0, x > 0 ? 2.0 * x : 0.0};
    case TIGON_ACT_SILU: {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return {x * s, s * (1.0 + x * (1.0 - s))};
    }
    case TIGON_ACT_GELU_TANH: {
      const double inner = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
      const double t = std::tanh(inner);
      const double dinner = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
      return {0.5 * x * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner};
    }
    case TIGON_ACT_GELU_ERF: {
      const double cdf = 0.5 * (1.0 + std::erf(x * kInvSqrt2));
      return {x * cdf, cdf + x * kInvSqrt2Pi * std::exp(-0.5 * x * x)};
    }
    default: return {x, 1.0};  // TIGON_ACT_NONE
  }
}

// The gated activation of the SwiGLU / GeGLU family (kind: tigon_glu_activation_t), from the same math.
inline ActAndGrad glu_activation_ref(int glu, double a) {
  return activation_ref(glu == TIGON_GLU_SILU        ? TIGON_ACT_SILU
                        : glu == TIGON_GLU_GELU_TANH ? TIGON_ACT_GELU_TANH
                                                     : TIGON_ACT_GELU_ERF,
                        a);
}

}  // namespace tigon
