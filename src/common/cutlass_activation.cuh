// The library's activations (common/activation_math.cuh) as a CUTLASS epilogue compute functor, so a GEMM's fused
// epilogue computes exactly what the other Tigon ops do. Used by the sm_90 GEMMs' epilogue visitor trees.
#pragma once

#include <cutlass/cutlass.h>

#include <type_traits>

#include "common/activation_math.cuh"

namespace tigon::cuda {

template <int Act>
struct CutlassActivation {
  template <class T>
  struct Fn {
    CUTLASS_DEVICE T operator()(T const& x) const {
      if constexpr (std::is_same_v<T, float>) {
        return act_fwd<Act>(x);
      } else {
        T y;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < int(T::kElements); ++i) y[i] = act_fwd<Act>(x[i]);
        return y;
      }
    }
  };
};

}  // namespace tigon::cuda
