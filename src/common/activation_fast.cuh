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

// The relative error of e = 2^(-x log2 e) against expf(-x) for |x| <= 8: the argument's rounding and log2 e's own
// (|x| 2^-23.7), ex2.approx (2 ulp from the rounded result, 2^-21.7) and expf (2 ulp, 2^-22): < 2^-19.75. Below -8 the
// elements take the accurate forms. Then s = 1 / (1 + e) moves by at most s ((1 - s) e_err + 2^-21.7): 1 + e weighs
// e's error by e / (1 + e) = 1 - s, and 1 + e's two roundings, rcp.approx (1 ulp) and the IEEE division add 2^-21.7.
constexpr float kSiluFastMin = -8.f;

// act(x), fast, and whether its rounding to T may differ from act_fwd<Act>(x)'s. Bounds:
//  - silu, x s against x / (1 + e): s's error above plus the product's and the division's roundings: < 2^-19.35 |F|
//    for x >= -8, taken as 2^-19 |F|.
//  - gelu-tanh, 0.5x (1 + t) with u computed as torch does: 1 + t moves by |t - tanhf| plus its two roundings
//    (2^-24 |1 + t| each), scaled by 0.5|x|, plus the product's: 0.5|x| 2^-20.7 + 2^-22 |F|, taken as
//    |x| 2^-21 + |F| 2^-22.
template <class T, int Act>
__device__ __forceinline__ float act_fwd_fast(float x, bool& doubt) {
  if constexpr (Act == TIGON_ACT_SILU) {
    const float f = x * rcp_fast(1.f + exp2_fast(-x * kFastLog2e));
    doubt = (x < kSiluFastMin) | rounding_in_doubt_rel<T, 19>(f);
    return f;
  } else {
    static_assert(Act == TIGON_ACT_GELU_TANH, "activations with a fast form: kHasFastForm");
    const float f = 0.5f * x * (1.f + tanh_fast(gelu_tanh_inner(x)));
    const float g = fabsf(x) * (0.5f * kTanhFastError) + fabsf(f) * (1.f / (1 << 22));
    doubt = rounding_in_doubt<T>(f, g);
    return f;
  }
}

// dy act'(x), fast, in torch's order of operations (act_bwd<Act>), and whether its rounding to T may differ. The
// exhaustive test covers every x but dy's mantissas at two exponents: the bounds are relative, and dy scales both
// forms exactly, except where a step falls below fp32's normal range; there each step may round by 2^-150 more,
// which kSubnormalSlack covers.
constexpr float kSubnormalSlack = 0x1p-146f;
//  - silu, F = (dy s) (1 + x (1 - s)): s's error moves dy s by |dy| ds and 1 + x (1 - s) by |x| ds, and each of the
//    four steps may round apart: |F - T| <= (|F| + |dy s x|) ((1 - s) 2^-19.75 + 2^-21.7) + 2^-21.4 |F| +
//    2^-23 (1 - s) |dy s x|, taken as g = (|F| + |dy s x|) ((1 - s) 2^-19 + 2^-20).
//  - gelu-tanh, F = dy (0.5 (1 + t) + 0.5x (1 - t^2) inner'): t's error moves F by |dy| |0.5 - x t inner'| |dt|
//    (|dt| <= 2^-20.7), t^2 and 1 - t^2 round by 2^-25 each in both forms (|dy| |x| inner' 2^-24), 1 + t by 2^-24
//    twice, the two products of the right term by 2^-24 |dy rd| each and the sum and the product with dy by 2^-24
//    |F| each: g = |dy| (|0.5 - x t inner'| 2^-20 + (1 + |x| inner') 2^-22) + |F| 2^-22.
template <class T, int Act>
__device__ __forceinline__ float act_bwd_fast(float x, float dy, bool& doubt) {
  if constexpr (Act == TIGON_ACT_SILU) {
    const float s = rcp_fast(1.f + exp2_fast(-x * kFastLog2e));
    const float ds = dy * s, one_minus_s = 1.f - s;
    const float f = ds * (1.f + x * one_minus_s);
    const float g = fmaf(fmaf(fabsf(ds), fabsf(x), fabsf(f)), fmaf(one_minus_s, 0x1p-19f, 0x1p-20f), kSubnormalSlack);
    doubt = (x < kSiluFastMin) | rounding_in_doubt<T>(f, g);
    return f;
  } else {
    static_assert(Act == TIGON_ACT_GELU_TANH, "activations with a fast form: kHasFastForm");
    float inner_derivative;
    const float t = tanh_fast(gelu_tanh_inner(x));
    const float f = gelu_tanh_bwd_given(x, t, dy, inner_derivative);
    const float dt_weight = fabsf(fmaf(-x * t, inner_derivative, 0.5f));
    const float steps = fmaf(fabsf(x), inner_derivative, 1.f);
    const float g =
        fmaf(fabsf(dy), fmaf(dt_weight, 0x1p-20f, steps * 0x1p-22f), fmaf(fabsf(f), 0x1p-22f, kSubnormalSlack));
    doubt = rounding_in_doubt<T>(f, g);
    return f;
  }
}

}  // namespace tigon::cuda
