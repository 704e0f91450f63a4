// Pointwise activation CUDA kernels against the CPU reference, through the same C API, in place too. Skipped without
// a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "linear_act_test_util.h"
#include "test_util.h"
#include "tigon/activation.h"

using namespace tigon_test;

namespace {

// fp32 library functions against the fp64 reference: a rounding apart (atol = rtol: derivatives are differences of
// unit-sized terms).
void expect_close(const HostMat& got, const HostMat& ref, const char* what) {
  const double tol = rtol_of(got.dtype);
  EXPECT_LE(worst_ratio(got, ref, tol, tol), 1.0) << what;
}

using Case = std::tuple<DType, int, int64_t, int64_t, int64_t>;  // dtype, activation, rows, cols, row padding

class ActivationCuda : public ::testing::TestWithParam<Case> {};

TEST_P(ActivationCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, act, rows, cols, pad] = GetParam();
  std::mt19937 rng(23 + rows + cols + act);
  HostMat x(dt, rows, cols, cols + pad), y(dt, rows, cols), dy(dt, rows, cols, cols + pad), dx(dt, rows, cols);
  x.fill_random(rng, 3.0);
  dy.fill_random(rng);
  y.poison();
  dx.poison();
  HostMat ry = y, rdx = dx;
  ASSERT_EQ(tigon_activation_fwd(x.view(), ry.view(), {act, 0}, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(tigon_activation_bwd(dy.view(), x.view(), rdx.view(), {act, 0}, nullptr), TIGON_SUCCESS);
  DevMat gx(x), gy(y), gdy(dy), gdx(dx);
  ASSERT_EQ(tigon_activation_fwd(gx.view(), gy.view(), {act, 0}, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(tigon_activation_bwd(gdy.view(), gx.view(), gdx.view(), {act, 0}, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close(gy.fetch(), ry, "y");
  expect_close(gdx.fetch(), rdx, "dx");

  // In place (y over x, dx over dy; ReLU, RELU2 and NONE from the output): the same bits as out of place (the
  // squared ReLU's derivative from its output within the dtype's tolerance of the one from its input).
  const bool from_output = act == TIGON_ACT_RELU || act == TIGON_ACT_RELU2 || act == TIGON_ACT_NONE;
  HostMat x_copy = x;
  DevMat gx2(x_copy);
  ASSERT_EQ(tigon_activation_fwd(gx2.view(), gx2.view(), {act, 0}, nullptr), TIGON_SUCCESS);
  ASSERT_EQ(
      tigon_activation_bwd(gdy.view(), from_output ? gx2.view() : gx.view(), gdy.view(), {act, from_output}, nullptr),
      TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gx2.fetch(), gy.fetch(), 0, 0), 0.0) << "y over x";
  if (act == TIGON_ACT_RELU2) {
    expect_close(gdy.fetch(), gdx.fetch(), "dx over dy, from the output");
    // and within a rounding of the CPU reference's own derivative from the output
    HostMat ry2 = ry, rdy = dy;
    ASSERT_EQ(tigon_activation_bwd(rdy.view(), ry2.view(), rdy.view(), {act, 1}, nullptr), TIGON_SUCCESS);
    expect_close(gdy.fetch(), rdy, "dx from the output vs the CPU reference");
  } else {
    EXPECT_EQ(worst_ratio(gdy.fetch(), gdx.fetch(), 0, 0), 0.0) << "dx over dy";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ActivationCuda,
    ::testing::Values(
        // 16-byte vectors
        Case{DType::kBFloat16, TIGON_ACT_RELU, 64, 4096, 0}, Case{DType::kBFloat16, TIGON_ACT_GELU_TANH, 33, 2048, 8},
        Case{DType::kFloat16, TIGON_ACT_GELU_ERF, 17, 1024, 16}, Case{DType::kBFloat16, TIGON_ACT_SILU, 100, 512, 0},
        Case{DType::kFloat32, TIGON_ACT_NONE, 7, 3000, 4}, Case{DType::kFloat32, TIGON_ACT_SILU, 1000, 4, 0},
        // one element per thread: odd lengths, unaligned row strides, tiny rows
        Case{DType::kBFloat16, TIGON_ACT_RELU, 3, 1001, 0}, Case{DType::kFloat16, TIGON_ACT_SILU, 35, 33, 0},
        Case{DType::kBFloat16, TIGON_ACT_GELU_ERF, 6, 4096, 1}, Case{DType::kFloat32, TIGON_ACT_GELU_TANH, 1, 1, 0},
        // the squared ReLU: vectors, and one element per thread
        Case{DType::kBFloat16, TIGON_ACT_RELU2, 64, 4096, 0}, Case{DType::kFloat16, TIGON_ACT_RELU2, 5, 1001, 0},
        Case{DType::kFloat32, TIGON_ACT_RELU2, 9, 512, 3}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return std::string(short_name(std::get<0>(c))) + "_" + act_name(std::get<1>(c)) + "_" +
             std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_pad" +
             std::to_string(std::get<4>(c));
    });

}  // namespace
