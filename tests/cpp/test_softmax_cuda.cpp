// Softmax on the GPU against the CPU reference through the same C API: rows in registers (several rows per warp, a
// row per block), the long-row and unaligned paths, in place. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "causal_rowwise_test_util.h"
#include "cuda_test_util.h"
#include "test_util.h"
#include "tigon/softmax.h"

using namespace tigon_test;

namespace {

using Case = std::tuple<DType, int64_t, int64_t, int64_t>;  // dtype, rows, cols, row padding

class SoftmaxCuda : public ::testing::TestWithParam<Case> {};

TEST_P(SoftmaxCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, rows, cols, pad] = GetParam();
  std::mt19937 rng(unsigned(rows + cols));
  HostMat x(dt, rows, cols, cols + pad), y(dt, rows, cols), dy(dt, rows, cols, cols + pad), dx(dt, rows, cols);
  x.fill_random(rng, 3.0);
  dy.fill_random(rng);
  y.poison();
  dx.poison();
  HostMat ry = y, rdx = dx;
  ASSERT_EQ(tigon_softmax_fwd(x.view(), ry.view(), nullptr), TIGON_SUCCESS);
  ASSERT_EQ(tigon_softmax_bwd(dy.view(), ry.view(), rdx.view(), nullptr), TIGON_SUCCESS);
  DevMat gx(x), gy(y), gdy(dy), gdx(dx);
  ASSERT_EQ(tigon_softmax_fwd(gx.view(), gy.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(tigon_softmax_bwd(gdy.view(), gy.view(), gdx.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double tol = 2 * rtol_of(dt);
  EXPECT_LE(worst_ratio(gy.fetch(), ry, tol * 1e-3, tol), 1.0) << "y";
  // dx: y * (dy - dot) cancels where dy is near dot; the bound is relative to the terms (|y| * (|dy| + |dot|))
  EXPECT_LE(worst_ratio(gdx.fetch(), rdx, tol * 1e-2, tol), 1.0) << "dx";
  ASSERT_EQ(tigon_softmax_fwd(gx.view(), gx.view(), nullptr), TIGON_SUCCESS);  // in place
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LE(worst_ratio(gx.fetch(), ry, tol * 1e-3, tol), 1.0) << "y over x";
}

INSTANTIATE_TEST_SUITE_P(Shapes, SoftmaxCuda,
                         ::testing::Values(Case{DType::kBFloat16, 4096, 4096, 0},  // a row per block, in registers
                                           Case{DType::kBFloat16, 1000, 64, 0},    // 2 threads per row
                                           Case{DType::kFloat32, 7, 1000, 0},      // 250 vectors
                                           Case{DType::kFloat16, 3, 65536, 0},     // past registers: uncached
                                           Case{DType::kBFloat16, 5, 1001, 0},     // unaligned: scalar uncached
                                           Case{DType::kFloat32, 33, 128, 4},      // padded rows
                                           Case{DType::kBFloat16, 2, 131072, 8}),  // long, padded
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "_pad" + std::to_string(std::get<3>(c));
                         });

// The causal form over [batch, L, L] scores: the kept entries as the reference, zeros above the diagonal.
TEST(SoftmaxCuda, CausalMatchesReference) {
  SKIP_WITHOUT_GPU();
  // in registers (aligned rows, a few rows per block), long in registers, unaligned (scalar uncached), padded rows
  expect_causal_cuda_matches(tigon_softmax_causal_fwd, DType::kBFloat16, 3, 256, 0, 1e-3);
  expect_causal_cuda_matches(tigon_softmax_causal_fwd, DType::kFloat32, 1, 1000, 0, 1e-3);
  expect_causal_cuda_matches(tigon_softmax_causal_fwd, DType::kBFloat16, 2, 129, 0, 1e-3);
  expect_causal_cuda_matches(tigon_softmax_causal_fwd, DType::kFloat16, 4, 64, 8, 1e-3);
}

}  // namespace
