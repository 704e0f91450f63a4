// Device-side helpers shared by the kernels: dtype <-> CUDA type, fp32 conversion, vector loads and stores, and the
// type-switch macro that turns a runtime DType into a template argument.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/error.h"
#include "common/tensor.h"

namespace tigon::cuda {

template <class T>
__device__ __forceinline__ float to_f(T v);
template <>
__device__ __forceinline__ float to_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// v rounded to T's precision and back: how kernels reproduce a rounding that a casting mode prescribes.
template <class T>
__device__ __forceinline__ float round_to(float v) {
  return to_f<T>(from_f<T>(v));
}

// N consecutive elements as floats. When N * sizeof(T) is a multiple of 16 the pointer must be 16-byte aligned and
// the load is N * sizeof(T) / 16 vector instructions; otherwise elementwise.
template <class T, int N>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[N]) {
  if constexpr ((N * sizeof(T)) % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int k = 0; k < N / kPer; ++k) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[k];
      const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int j = 0; j < kPer; ++j) out[k * kPer + j] = to_f<T>(e[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = to_f<T>(p[j]);
  }
}

// load_vec where `live` holds, else `fill` in every element. The 16-byte words are loaded under a predicate and
// converted after, so a thread that issues several of these before using any keeps their loads in flight together:
// with a load and its first use inside one branch, ptxas keeps each load behind the previous one's use.
template <class T, int N>
__device__ __forceinline__ void load_vec_if(bool live, const T* p, float (&out)[N], float fill) {
  if constexpr ((N * sizeof(T)) % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
    uint4 u[N / kPer];
#pragma unroll
    for (int k = 0; k < N / kPer; ++k) u[k] = live ? reinterpret_cast<const uint4*>(p)[k] : uint4{};
#pragma unroll
    for (int k = 0; k < N / kPer; ++k) {
      const T* e = reinterpret_cast<const T*>(&u[k]);
#pragma unroll
      for (int j = 0; j < kPer; ++j) out[k * kPer + j] = live ? to_f<T>(e[j]) : fill;
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = live ? to_f<T>(p[j]) : fill;
  }
}

// A 32-bit word of T as floats. bf16 is the top half of an fp32, so a shift (even element) or a mask (odd element);
// fp16 through the half->float conversion; fp32 as is.
template <class T>
__device__ __forceinline__ void unpack_word(uint32_t w, float (&x)[4 / sizeof(T)]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    x[0] = __uint_as_float(w << 16);
    x[1] = __uint_as_float(w & 0xffff0000u);
  } else if constexpr (std::is_same_v<T, __half>) {
    __half2 h;
    memcpy(&h, &w, 4);
    const float2 f = __half22float2(h);
    x[0] = f.x;
    x[1] = f.y;
  } else {
    x[0] = __uint_as_float(w);
  }
}

// One 16-byte vector as floats, word by word: a shift or a mask an element for bf16 (the conversion intrinsic
// takes two instructions for the upper half of each word).
template <class T>
__device__ __forceinline__ void unpack_words(const uint4& u, float (&x)[16 / sizeof(T)]) {
  constexpr int P = 4 / sizeof(T);  // elements per 32-bit word
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float y[P];
    unpack_word<T>(w[i], y);
#pragma unroll
    for (int e = 0; e < P; ++e) x[P * i + e] = y[e];
  }
}

// One 16-byte vector (as loaded by a caller, e.g. with a cache hint) as 16 / sizeof(T) floats.
template <class T>
__device__ __forceinline__ void unpack16(const uint4& u, float (&out)[16 / sizeof(T)]) {
  const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int j = 0; j < int(16 / sizeof(T)); ++j) out[j] = to_f<T>(e[j]);
}

// Makes `other` needed wherever `w` is first used: an identity byte permute of w that also reads other (one
// instruction; ptxas keeps inline PTX as written). ptxas issues a load only as early as it deems the load's latency
// needs, which behind long arithmetic (tanhf, erff) puts a second operand's load after the first operand's math:
// two memory round trips where one would do, and half the bytes in flight.
__device__ __forceinline__ void load_together(uint32_t& w, uint32_t other) {
  asm volatile("prmt.b32 %0, %0, %1, 0x3210;" : "+r"(w) : "r"(other));
}

// load_vec of N elements at p and at q, both loads issued before either is used (load_together) when they are
// 16-byte vectors.
template <class T, int N>
__device__ __forceinline__ void load_vecs(const T* p, float (&x)[N], const T* q, float (&y)[N]) {
  if constexpr (N * sizeof(T) == 16) {
    uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint4 v = *reinterpret_cast<const uint4*>(q);
    load_together(u.x, v.x);
    unpack16<T>(u, x);
    unpack16<T>(v, y);
  } else {
    load_vec<T, N>(p, x);
    load_vec<T, N>(q, y);
  }
}
// The same for three vectors.
template <class T, int N>
__device__ __forceinline__ void load_vecs(const T* p, float (&x)[N], const T* q, float (&y)[N], const T* r,
                                          float (&z)[N]) {
  if constexpr (N * sizeof(T) == 16) {
    uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint4 v = *reinterpret_cast<const uint4*>(q), w = *reinterpret_cast<const uint4*>(r);
    load_together(u.x, v.x);
    load_together(u.x, w.x);
    unpack16<T>(u, x);
    unpack16<T>(v, y);
    unpack16<T>(w, z);
  } else {
    load_vec<T, N>(p, x);
    load_vec<T, N>(q, y);
    load_vec<T, N>(r, z);
  }
}

// Two floats rounded into one 32-bit word of 16-bit values (the bf16x2 / half2 conversion instructions).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

// 16 / sizeof(T) floats rounded into one 16-byte vector, for a caller that stores it itself (e.g. with a cache hint).
template <class T>
__device__ __forceinline__ uint4 pack16(const float (&in)[16 / sizeof(T)]) {
  if constexpr (sizeof(T) == 2) {
    return make_uint4(pack2<T>(in[0], in[1]), pack2<T>(in[2], in[3]), pack2<T>(in[4], in[5]), pack2<T>(in[6], in[7]));
  } else {
    return make_uint4(__float_as_uint(in[0]), __float_as_uint(in[1]), __float_as_uint(in[2]), __float_as_uint(in[3]));
  }
}

template <class T, int N>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[N]) {
  if constexpr (sizeof(T) == 2 && (N * sizeof(T)) % 16 == 0) {
    // Built word by word and stored with an intrinsic: a plain uint4 store was sometimes split into 4-byte pieces.
#pragma unroll
    for (int k = 0; k < N / 8; ++k) {
      const uint4 u = make_uint4(pack2<T>(in[8 * k], in[8 * k + 1]), pack2<T>(in[8 * k + 2], in[8 * k + 3]),
                                 pack2<T>(in[8 * k + 4], in[8 * k + 5]), pack2<T>(in[8 * k + 6], in[8 * k + 7]));
      __stcg(reinterpret_cast<uint4*>(p) + k, u);  // the intrinsic keeps the store one 16-byte instruction
    }
  } else if constexpr ((N * sizeof(T)) % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int k = 0; k < N / kPer; ++k) {
      uint4 u;
      T* e = reinterpret_cast<T*>(&u);
#pragma unroll
      for (int j = 0; j < kPer; ++j) e[j] = from_f<T>(in[k * kPer + j]);
      __stcg(reinterpret_cast<uint4*>(p) + k, u);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = from_f<T>(in[j]);
  }
}

// N elements of T kept in their storage format (N * sizeof(T) a multiple of 16 bytes): half the registers of
// floats for 16-bit types, which buys occupancy in kernels that hold a whole row. Read element j (a compile-time
// constant after unrolling) as a float.
template <class T, int N>
struct Packed {
  static_assert((N * sizeof(T)) % 16 == 0, "Packed holds whole 16-byte vectors");
  static constexpr int kWords = N * sizeof(T) / 16;
  uint4 u[kWords];

  __device__ __forceinline__ void load(const T* p) {
#pragma unroll
    for (int k = 0; k < kWords; ++k) u[k] = reinterpret_cast<const uint4*>(p)[k];
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int k = 0; k < kWords; ++k) u[k] = make_uint4(0, 0, 0, 0);
  }
  __device__ __forceinline__ float operator[](int j) const { return to_f<T>(reinterpret_cast<const T*>(u)[j]); }
};

// 16 bytes read once (a weight streamed by gemv, a KV cache): the read-only path, not kept in L1, so data that is
// reused (the rows of x, the queries) keeps it.
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// log2(e): exp(x) as exp2_fast(x * kLog2e).
constexpr float kLog2e = 1.4426950408889634f;

// The SFU's approximate 2^x and 1/x (one MUFU instruction each, within 2 ulp of fp32; denormals flushed). For math
// whose result is rounded to a 16-bit type or compared at fp32 tolerance, in place of the multi-instruction exp2f /
// IEEE division. 2^(+large) = inf and 1/inf = 0, so sigmoid-like forms 1 / (1 + 2^y) saturate cleanly.
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_fast(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace tigon::cuda

// TIGON_SWITCH_FLOAT(dtype, T, ...): runs the body with T = float, __half or __nv_bfloat16.
#define TIGON_SWITCH_FLOAT(dtype, T, ...)                                                          \
  switch (dtype) {                                                                                 \
    case ::tigon::DType::kFloat32: {                                                               \
      using T = float;                                                                             \
      __VA_ARGS__;                                                                                 \
    } break;                                                                                       \
    case ::tigon::DType::kFloat16: {                                                               \
      using T = __half;                                                                            \
      __VA_ARGS__;                                                                                 \
    } break;                                                                                       \
    case ::tigon::DType::kBFloat16: {                                                              \
      using T = __nv_bfloat16;                                                                     \
      __VA_ARGS__;                                                                                 \
    } break;                                                                                       \
    default: ::tigon::fail(TIGON_ERROR_INTERNAL, "unexpected dtype ", ::tigon::dtype_name(dtype)); \
  }
