// Reading and writing fp32/fp16/bf16 elements on the host, for the CPU reference paths. Values travel as double so
// the references accumulate in fp64; round_to() gives the value a dtype would store, which is how the references
// reproduce the roundings that each casting mode prescribes.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/tensor.h"

namespace tigon {

inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN kept quiet: the same rounding as __float2bfloat16_rn and torch.
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline double load_elem(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kFloat16: return double(static_cast<const _Float16*>(base)[i]);
    case DType::kBFloat16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DType::kInt64: return double(static_cast<const int64_t*>(base)[i]);
    case DType::kInt8: return static_cast<const int8_t*>(base)[i];
  }
  return 0;
}

// Stores v rounded once to the dtype (through fp32 for the 16-bit types, as a GPU kernel holding fp32 would).
inline void store_elem(void* base, DType t, int64_t i, double v) {
  switch (t) {
    case DType::kFloat32: static_cast<float*>(base)[i] = float(v); return;
    case DType::kFloat16: static_cast<_Float16*>(base)[i] = _Float16(float(v)); return;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(float(v)); return;
    case DType::kInt32: static_cast<int32_t*>(base)[i] = int32_t(v); return;
    case DType::kInt64: static_cast<int64_t*>(base)[i] = int64_t(v); return;
    case DType::kInt8: static_cast<int8_t*>(base)[i] = int8_t(v); return;
  }
}

// The value v takes when stored in dtype t (via fp32).
inline double round_to(DType t, double v) {
  switch (t) {
    case DType::kFloat32: return float(v);
    case DType::kFloat16: return double(_Float16(float(v)));
    case DType::kBFloat16: return bf16_bits_to_float(float_to_bf16_bits(float(v)));
    default: return v;
  }
}

}  // namespace tigon
