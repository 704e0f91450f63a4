// SiLU at the speed of the special-function units, rounded to bf16 / fp16 exactly as torch's.
//
// The accurate form (activation_math.cuh: expf and an IEEE division) costs ~25 instructions an element and a branch,
// which makes an elementwise bf16 kernel issue-bound below an H200's memory rate. Here SiLU is computed from
// ex2.approx and rcp.approx (cuda_types.cuh) together with a bound g on its distance to torch's fp32 value; when no
// rounding boundary of the 16-bit type lies within g of the fast value, both round to the same 16-bit number, and
// otherwise (about one element in two hundred of a normal distribution, and every x below -16) the caller recomputes
// that element with the accurate form. Rounding is monotone, so "round(v - g) == round(v + g)" with the ends rounded
// outwards is a proof, not an estimate; the bounds g come from the error terms noted at each function and are checked
// against torch over every 16-bit input (tests/python/test_swiglu.py, the exhaustive test).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_types.cuh"
#include "tigon/activation.h"

namespace tigon::cuda {

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

// Activations with a fast form here; the others (gelu-tanh, gelu-erf) stay on the accurate ones. A certified
// tanh-GELU and certified backward forms lost to the accurate ones where measured (bench/micro/glu_activation.cu).
template <int Act>
constexpr bool kHasFastForm = Act == TIGON_ACT_SILU;

// silu(x) = x / (1 + e^-x), fast, and whether its rounding to T may differ from act_fwd<SILU>(x)'s. Bound for
// x >= -16: e's argument rounded (|x log2 e| < 24: 2^-20 absolute, 2^-20.5 relative in e) with log2 e's own rounding
// (2^-22.2 at |x| = 16), ex2.approx (2^-21.7), 1 + e, rcp.approx and the product against expf (2 ulp), 1 + e and the
// IEEE division: < 2^-19.1 |F|, taken as 2^-18 |F|. Below -16 (e^-x > 2^23) the element always takes the accurate
// form.
template <class T, int Act>
__device__ __forceinline__ float act_fwd_fast(float x, bool& doubt) {
  static_assert(kHasFastForm<Act>, "activations with a fast form: kHasFastForm");
  const float f = x * rcp_fast(1.f + exp2_fast(-x * kLog2e));
  doubt = (x < -16.f) | rounding_in_doubt_rel<T, 18>(f);
  return f;
}

}  // namespace tigon::cuda
