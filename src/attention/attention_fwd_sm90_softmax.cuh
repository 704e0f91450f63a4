// Hopper forward kernel: register-fragment views of the wgmma accumulators, masking and the online softmax.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

#include <cmath>

#include "common/cuda_types.cuh"

namespace tigon::attention::sm90 {

using namespace cute;

// A wgmma accumulator fragment is ((2 columns, 2 rows 8 apart, N/8 column groups), M tiles, N tiles) per thread.
// As (rows, columns), a thread's rows are the softmax's unit of work.
template <class L>
CUTE_HOST_DEVICE constexpr auto rowcol(L l) {
  static_assert(rank(L{}) == 3 && rank<0>(L{}) == 3);
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// The same registers as the A operand of a register-sourced wgmma: each k16 slice of A is ((2 columns, 2 rows,
// 2 column groups)), exactly two consecutive 8-column groups of the accumulator, so P = softmax(S) feeds O += P V
// without moving between threads.
template <class L>
CUTE_HOST_DEVICE constexpr auto acc_as_a_operand(L l) {
  static_assert(rank(L{}) == 3 && size<2>(L{}) == 1 && size<0, 2>(L{}) % 2 == 0);
  auto k_groups = logical_divide(get<0, 2>(l), _2{});  // (2 column groups, N/16 k slices)
  return make_layout(make_layout(get<0, 0>(l), get<0, 1>(l), get<0>(k_groups)), get<1>(l), get<1>(k_groups));
}

// dst = src, element by element in register order, converted (fp32 -> bf16/fp16 rounds to nearest).
template <class Src, class Dst>
CUTE_DEVICE void convert_into(Src const& src, Dst& dst) {
  using From = typename Src::value_type;
  using To = typename Dst::value_type;
  constexpr int kN = decltype(size(src))::value;
  static_assert(kN == decltype(size(dst))::value);
  cutlass::NumericArrayConverter<To, From, kN> convert;
  *reinterpret_cast<cutlass::Array<To, kN>*>(raw_pointer_cast(dst.data())) =
      convert(*reinterpret_cast<cutlass::Array<From, kN> const*>(raw_pointer_cast(src.data())));
}

// Which keys a query row sees (include/tigon/attention.h): j < len_k, j <= i + shift + right (right >= 0) and
// j >= i + shift - left (left >= 0), shift = len_k - len_q. Host code has turned windows wider than both lengths into
// -1, so none of this overflows int32.
struct Visibility {
  int len_q, len_k, shift, left, right;

  __device__ int first_key(int row) const { return left >= 0 ? max(0, row + shift - left) : 0; }
  __device__ int end_key(int row) const { return right >= 0 ? min(len_k, row + shift + right + 1) : len_k; }

  // Whether some key of block [j0, j0 + n) is hidden from some row of [r0, r1]; false lets the block skip the
  // element-wise mask (all interior blocks of causal and windowed attention).
  __device__ bool block_needs_mask(int r0, int r1, int j0, int n) const {
    return j0 + n > len_k || (right >= 0 && j0 + n - 1 > r0 + shift + right) || (left >= 0 && j0 < r1 + shift - left);
  }
};

// Sets hidden scores to -inf. s: scores as (rows, columns); c: their (row, column) in the tile; row0, col0: the
// tile's first query row and key within the sequence.
template <class S, class C>
CUTE_DEVICE void apply_mask(S& s, C const& c, Visibility const& vis, int row0, int col0) {
  CUTE_UNROLL
  for (int r = 0; r < size<0>(s); ++r) {
    const int row = row0 + get<0>(c(r, 0));
    const int lo = vis.first_key(row) - col0, hi = vis.end_key(row) - col0;
    CUTE_UNROLL
    for (int k = 0; k < size<1>(s); ++k) {
      const int col = get<1>(c(r, k));
      if (col < lo || col >= hi) s(r, k) = -INFINITY;
    }
  }
}

// Four consecutive lanes hold one accumulator row between them.
CUTE_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
CUTE_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// Online softmax over a thread's kRows rows: running max m (of the kept scores x) and running sum l of
// 2^((x - m) * score_log2), both fp32. l is this thread's partial sum until finish() adds the quad's.
template <int kRows>
struct OnlineSoftmax {
  float m[kRows], l[kRows];
  float score_log2;

  CUTE_DEVICE explicit OnlineSoftmax(float score_log2_) : score_log2(score_log2_) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) m[r] = -INFINITY, l[r] = 0.f;
  }

  // Replaces the scores s (rows, columns) by their probabilities relative to the new running max and returns, per
  // row, the factor that moves earlier sums (l and the output) to that max.
  template <class S>
  CUTE_DEVICE void update(S& s, float (&rescale)[kRows]) {
    static_assert(decltype(size<0>(s))::value == kRows);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float mx = m[r];
      CUTE_UNROLL
      for (int k = 0; k < size<1>(s); ++k) mx = fmaxf(mx, s(r, k));
      mx = quad_max(mx);
      // A row that has seen only hidden keys keeps max -inf; subtracting 0 instead keeps 2^(-inf) = 0, not NaN.
      const float shift = mx == -INFINITY ? 0.f : mx * score_log2;
      rescale[r] = cuda::exp2_fast(m[r] * score_log2 - shift);
      m[r] = mx;
      float sum = 0.f;
      CUTE_UNROLL
      for (int k = 0; k < size<1>(s); ++k) {
        s(r, k) = cuda::exp2_fast(fmaf(s(r, k), score_log2, -shift));
        sum += s(r, k);
      }
      l[r] = l[r] * rescale[r] + sum;
    }
  }

  // Per row: the factor that normalises the output (0 for a row with no visible key, whose output is then 0) and
  // the natural-log lse (-inf for such a row).
  CUTE_DEVICE void finish(float (&out_scale)[kRows], float (&lse)[kRows]) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(l[r]);
      const bool any = sum > 0.f;
      out_scale[r] = any ? 1.f / sum : 0.f;
      lse[r] = any ? (m[r] * score_log2 + log2f(sum)) * float(M_LN2) : -INFINITY;
    }
  }
};

}  // namespace tigon::attention::sm90
