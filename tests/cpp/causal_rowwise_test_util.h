// The causal forms of the row-wise ops (softmax, sparsemax) checked against their plain forms: row i of each L x L
// matrix must be the plain forward of that row's first i + 1 entries, then exact zeros, with the masked entries of x
// poisoned so that reading one shows.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "test_util.h"
#ifdef TIGON_TEST_CUDA
#include <cuda_runtime.h>

#include "cuda_test_util.h"
#endif

namespace tigon_test {

using RowFwd = tigon_status_t (*)(const tigon_tensor*, const tigon_tensor*, void*);

// A (rows / L) x L x cols view of a host matrix whose rows stack L x L matrices.
inline tigon::TensorView stack_view(HostMat& m, int64_t L, tigon_device dev = tigon::cpu(), void* ptr = nullptr) {
  return tigon::TensorView(ptr ? ptr : m.data(), {m.rows / L, L, m.cols}, to_dl(m.dtype), dev,
                           {L * m.stride, m.stride, 1});
}

// Random batch x L x L scores (row padding pad) with NaN above each matrix's diagonal.
inline HostMat causal_scores(DType dt, int64_t batch, int64_t L, int64_t pad, unsigned seed) {
  std::mt19937 rng(seed);
  HostMat x(dt, batch * L, L, L + pad);
  x.fill_random(rng, 3.0);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = r % L + 1; c < L; ++c) x.set(r, c, std::nan(""));
  return x;
}

inline void expect_causal_is_prefix(RowFwd plain, RowFwd causal, DType dt, int64_t batch, int64_t L) {
  HostMat x = causal_scores(dt, batch, L, 3, unsigned(L)), y(dt, batch * L, L);
  y.poison();
  ASSERT_EQ(causal(stack_view(x, L), stack_view(y, L), nullptr), TIGON_SUCCESS) << tigon_last_error();
  for (int64_t r = 0; r < x.rows; ++r) {
    const int64_t n = r % L + 1;
    HostMat xr(dt, 1, n), yr(dt, 1, n);
    for (int64_t c = 0; c < n; ++c) xr.set(0, c, x.at(r, c));
    ASSERT_EQ(plain(xr.view(), yr.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
    for (int64_t c = 0; c < L; ++c) ASSERT_EQ(y.at(r, c), c < n ? yr.at(0, c) : 0.0) << "row " << r << " col " << c;
  }
  HostMat xi = x;  // in place: y over x
  ASSERT_EQ(causal(stack_view(xi, L), stack_view(xi, L), nullptr), TIGON_SUCCESS) << tigon_last_error();
  EXPECT_EQ(worst_ratio(xi, y, 0, 0), 0.0);
}

// The causal form's own argument: x must be [..., L, L].
inline void expect_causal_shape_errors(RowFwd causal) {
  HostMat x(DType::kFloat32, 4, 8), y(DType::kFloat32, 4, 8);
  const tigon::TensorView flat(x.data(), {8}, to_dl(x.dtype)), flat_y(y.data(), {8}, to_dl(y.dtype));
  for (tigon_status_t st : {causal(x.view(), y.view(), nullptr), causal(flat, flat_y, nullptr)}) {
    EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tigon_last_error()).find("argument 'x'"), std::string::npos) << tigon_last_error();
  }
}

#ifdef TIGON_TEST_CUDA
// The causal form on the GPU against the CPU reference (y within tol * (atol_scale + |y|), tol twice the dtype's
// rounding; exact zeros above the diagonal), and in place the same bits as out of place.
inline void expect_causal_cuda_matches(RowFwd causal, DType dt, int64_t batch, int64_t L, int64_t pad,
                                       double atol_scale) {
  const double tol = 2 * rtol_of(dt);
  HostMat x = causal_scores(dt, batch, L, pad, unsigned(L + pad)), y(dt, batch * L, L);
  y.poison();
  HostMat ry = y;
  ASSERT_EQ(causal(stack_view(x, L), stack_view(ry, L), nullptr), TIGON_SUCCESS) << tigon_last_error();
  DevMat gx(x), gy(y);
  const tigon_device dev = tigon::cuda(0);
  ASSERT_EQ(causal(stack_view(x, L, dev, gx.ptr), stack_view(y, L, dev, gy.ptr), nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const HostMat got = gy.fetch();
  EXPECT_LE(worst_ratio(got, ry, tol * atol_scale, tol), 1.0) << "y";
  for (int64_t r = 0; r < got.rows; ++r)
    for (int64_t c = r % L + 1; c < L; ++c) ASSERT_EQ(got.at(r, c), 0.0) << "row " << r << " col " << c;
  ASSERT_EQ(causal(stack_view(x, L, dev, gx.ptr), stack_view(x, L, dev, gx.ptr), nullptr), TIGON_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gx.fetch(), got, 0, 0), 0.0) << "y over x";
}
#endif

}  // namespace tigon_test
