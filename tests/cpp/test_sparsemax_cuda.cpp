// Sparsemax on the GPU against the CPU reference through the same C API: rows cached in shared memory and rows read
// from memory on every step, padded rows, in place; the backward checked from the GPU's own output (an element at
// tau may fall on either side of it in fp32). Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "causal_rowwise_test_util.h"
#include "cuda_test_util.h"
#include "test_util.h"
#include "tigon/sparsemax.h"

using namespace tigon_test;

namespace {

using Case = std::tuple<DType, int64_t, int64_t, int64_t>;  // dtype, rows, cols, row padding

class SparsemaxCuda : public ::testing::TestWithParam<Case> {};

TEST_P(SparsemaxCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, rows, cols, pad] = GetParam();
  std::mt19937 rng(unsigned(rows * 3 + cols));
  HostMat x(dt, rows, cols, cols + pad), y(dt, rows, cols), dy(dt, rows, cols, cols + pad), dx(dt, rows, cols);
  x.fill_random(rng, 3.0);
  dy.fill_random(rng);
  y.poison();
  dx.poison();
  HostMat ry = y;
  ASSERT_EQ(tigon_sparsemax_fwd(x.view(), ry.view(), nullptr), TIGON_SUCCESS);
  DevMat gx(x), gy(y), gdy(dy), gdx(dx);
  ASSERT_EQ(tigon_sparsemax_fwd(gx.view(), gy.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(tigon_sparsemax_bwd(gdy.view(), gy.view(), gdx.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double tol = 2 * rtol_of(dt);
  const HostMat got_y = gy.fetch();
  EXPECT_LE(worst_ratio(got_y, ry, tol * max_abs(x), tol), 1.0) << "y";  // z - tau: rounding relative to z
  HostMat got_y_copy = got_y, rdx = dx;
  ASSERT_EQ(tigon_sparsemax_bwd(dy.view(), got_y_copy.view(), rdx.view(), nullptr), TIGON_SUCCESS);
  EXPECT_LE(worst_ratio(gdx.fetch(), rdx, tol * 1e-1, tol), 1.0) << "dx";
  ASSERT_EQ(tigon_sparsemax_fwd(gx.view(), gx.view(), nullptr), TIGON_SUCCESS);  // in place
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gx.fetch(), got_y, 0, 0), 0.0) << "y over x";
}

INSTANTIATE_TEST_SUITE_P(Shapes, SparsemaxCuda,
                         ::testing::Values(Case{DType::kBFloat16, 4096, 4096, 0},  // cached rows
                                           Case{DType::kFloat32, 7, 1000, 0},
                                           Case{DType::kFloat16, 3, 65536, 0},     // past shared memory
                                           Case{DType::kBFloat16, 33, 1001, 4},    // odd, padded rows
                                           Case{DType::kFloat32, 1000, 1, 0},      // one element: 1
                                           Case{DType::kBFloat16, 2, 131072, 8}),  // long, padded
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "_pad" + std::to_string(std::get<3>(c));
                         });

// The causal form over [batch, L, L] scores: the kept entries as the reference, zeros above the diagonal.
TEST(SparsemaxCuda, CausalMatchesReference) {
  SKIP_WITHOUT_GPU();
  expect_causal_cuda_matches(tigon_sparsemax_causal_fwd, DType::kBFloat16, 2, 512, 0, 4);  // cached rows
  expect_causal_cuda_matches(tigon_sparsemax_causal_fwd, DType::kFloat32, 3, 37, 3, 4);    // odd, padded rows
}

}  // namespace
