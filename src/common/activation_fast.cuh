// Torch's gated activations at the speed of the special-function units, rounded to bf16 / fp16 exactly as torch's.
//
// The accurate forms (activation_math.cuh: expf, IEEE division, tanhf) cost ~25 instructions an element and a
// branch each, which makes an elementwise bf16 kernel issue-bound below the memory rate. Here each activation is
// computed from ex2.approx and rcp.approx (cuda_types.cuh) together with a bound g on its distance to torch's fp32
// value; when no rounding boundary of the 16-bit type lies within g of the fast value, both round to the same 16-bit
// number, and otherwise (a few elements in ten thousand, more in the far negative tail) the caller recomputes that
// element with the accurate form. Rounding is monotone, so "round(v - g) == round(v + g)" with the ends rounded
// outwards is a proof, not an estimate; the bounds g come from the error terms noted at each function and are checked
// against torch over every 16-bit input (tests/python/test_swiglu.py, the exhaustive test).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/activation_math.cuh"
#include "common/cuda_types.cuh"
#include "tigon/activation.h"

namespace tigon::cuda {

constexpr float kFastLog2e = 1.4426950408889634f;

// True when some value within g (>= 0) of v may round to another T than v does: [|v| - g, |v| + g], its ends rounded
// outwards, holds a rounding boundary of T (or reaches zero). bf16 boundaries are the fp32 patterns whose low 16
// bits are 0x8000 (ties to even, so the ends count as inside); the fp16 test rounds both ends.
template <class T>
__device__ __forceinline__ bool rounding_in_doubt(float v, float g) {
  const float lo = __fsub_rd(fabsf(v), g), hi = __fadd_ru(fabsf(v), g);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return ((__float_as_uint(lo) + 0x7fffu) ^ (__float_as_uint(hi) + 0x8000u)) >= 0x10000u;
  } else {
    static_assert(std::is_same_v<T, __half>, "a 16-bit type");
    return (__half_as_ushort(__float2half_rn(lo)) != __half_as_ushort(__float2half_rn(hi))) | (lo <= 0.f);
  }
}

// The same for a relative bound, |v - exact| <= 2^-k |v|. For bf16 it counts fp32 units in the last place, three
// integer operations: 2^-k |v| is under 2^(24-k) units of v's binade, and no more steps of the bit pattern across the
// binade boundary below (the nearest midpoint of another binade is 2^14 steps away).
template <class T, int K>
__device__ __forceinline__ bool rounding_in_doubt_rel(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    constexpr uint32_t kUnits = 1u << (24 - K);
    return ((__float_as_uint(v) + (kUnits - 0x8000u)) & 0xffffu) <= 2 * kUnits;
  } else {
    return rounding_in_doubt<T>(v, fabsf(v) * (1.f / (1 << K)));
  }
}

// Activations with a fast form here; the others (gelu-erf) stay on the accurate one.
template <int Act>
constexpr bool kHasFastForm = Act == TIGON_ACT_SILU || Act == TIGON_ACT_GELU_TANH;

// tanh(u) = 1 - 2 / (1 + 2^(2u log2 e)). Against tanhf: the exponential's argument is rounded once (relative error
// of e at most |2u log2 e| 2^-24 ln 2, weighed by 2e / (1 + e)^2 <= 0.22 / |2u log2 e| away from 0: <= 2^-25 absolute),
// ex2.approx (2 ulp from the rounded result, 2^-21.7 relative, weighed by <= 0.5), 1 + e (2^-24, weighed alike),
// rcp.approx (2^-23 of 2r <= 2), the subtraction (2^-25) and tanhf's own 2 ulp (2^-23): |t - tanhf| < 2^-20.7, taken
// as 2^-20.
__device__ __forceinline__ float tanh_fast(float u) {
  return 1.f - 2.f * rcp_fast(1.f + exp2_fast(u * (2.f * kFastLog2e)));
}
constexpr float kTanhFastError = 1.f / (1 << 20);

// act(x), fast, and whether its rounding to T may differ from act_fwd<Act>(x)'s. Bounds:
//  - silu, x / (1 + e^-x) for x >= -16: e's argument rounded (|x log2 e| < 24: 2^-20 absolute, 2^-20.5 relative in
//    e) with log2 e's own rounding (2^-22.2 at |x| = 16), ex2.approx (2^-21.7), 1 + e, rcp.approx and the product
//    against expf (2 ulp), 1 + e and the IEEE division: < 2^-19.1 |F|, taken as 2^-18 |F|. Below -16 (e^-x > 2^23)
//    the element always takes the accurate form.
//  - gelu-tanh, 0.5x (1 + tanh u) with u computed as torch does: 1 + t moves by |t - tanhf| plus a rounding of 1 + t
//    (2^-23), scaled by 0.5|x|, plus the final product's rounding: 0.5|x| (2^-20 + 2^-23) + 2^-23 |F|, taken as
//    |x| 2^-20 + |F| 2^-22.
template <class T, int Act>
__device__ __forceinline__ float act_fwd_fast(float x, bool& doubt) {
  if constexpr (Act == TIGON_ACT_SILU) {
    const float f = x * rcp_fast(1.f + exp2_fast(-x * kFastLog2e));
    doubt = (x < -16.f) | rounding_in_doubt_rel<T, 18>(f);
    return f;
  } else {
    static_assert(Act == TIGON_ACT_GELU_TANH, "activations with a fast form: kHasFastForm");
    const float f = 0.5f * x * (1.f + tanh_fast(gelu_tanh_inner(x)));
    const float g = fabsf(x) * kTanhFastError + fabsf(f) * (1.f / (1 << 22));
    doubt = rounding_in_doubt<T>(f, g);
    return f;
  }
}

// dy act'(x), fast, in torch's order of operations (act_bwd<Act>), and whether its rounding to T may differ. The
// exhaustive test covers every x but dy's mantissas at two exponents: the bounds are relative, and dy scales both
// forms exactly, except where a step falls below fp32's normal range; there each step may round by 2^-150 more,
// which kSubnormalSlack covers.
constexpr float kSubnormalSlack = 0x1p-146f;
//  - silu, dy s (1 + x (1 - s)) with s = 1 / (1 + e^-x): s moves by < 2^-19.1 s (as above, x >= -16); F moves by
//    |dy| |1 + x - 2xs| |ds| <= |dy| (1 + |x|) 2^-19.1, plus one rounding apart at each of its four steps:
//    g = (|F| + |dy| (1 + 3|x|)) 2^-18.
//  - gelu-tanh: F moves by |dy| (0.5 + |x| |t| inner') |dt| with |dt| <= 2^-20 (plus 1 + t's rounding), and the
//    roundings of its steps: g = |dy| (0.5 + |x| inner') 2^-19 + |F| 2^-21.
template <class T, int Act>
__device__ __forceinline__ float act_bwd_fast(float x, float dy, bool& doubt) {
  if constexpr (Act == TIGON_ACT_SILU) {
    const float s = rcp_fast(1.f + exp2_fast(-x * kFastLog2e));
    const float f = dy * s * (1.f + x * (1.f - s));
    const float g = fmaf(fabsf(f) + fabsf(dy) * (1.f + 3.f * fabsf(x)), 1.f / (1 << 18), kSubnormalSlack);
    doubt = (x < -16.f) | rounding_in_doubt<T>(f, g);
    return f;
  } else {
    static_assert(Act == TIGON_ACT_GELU_TANH, "activations with a fast form: kHasFastForm");
    float inner_derivative;
    const float f = gelu_tanh_bwd_given(x, tanh_fast(gelu_tanh_inner(x)), dy, inner_derivative);
    const float g = fabsf(dy) * (0.5f + fabsf(x) * inner_derivative) * (1.f / (1 << 19)) +
                    fmaf(fabsf(f), 1.f / (1 << 21), kSubnormalSlack);
    doubt = rounding_in_doubt<T>(f, g);
    return f;
  }
}

}  // namespace tigon::cuda
