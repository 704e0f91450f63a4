// GEMV CUDA kernels against the CPU reference, through the same C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "test_util.h"

using namespace tigon_test;

namespace {

// dtype, M, N, K, x row padding (elements; odd padding leaves rows unaligned: the element-wise kernel), bias
using Case = std::tuple<DType, int64_t, int64_t, int64_t, int64_t, bool>;

class GemvCuda : public ::testing::TestWithParam<Case> {};

TEST_P(GemvCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, M, N, K, pad, with_bias] = GetParam();
  std::mt19937 rng(3 + M + N * 7 + K);
  HostMat x(dt, M, K, K + pad), w(dt, N, K), b(dt, 1, N), y(dt, M, N, N + 3);
  x.fill_random(rng);
  w.fill_random(rng, 0.05);
  b.fill_random(rng);
  y.poison();
  HostMat ry = y;
  tigon::TensorView bh(b.data(), {N}, to_dl(dt));
  auto xh = x.view(), wh = w.view(), ryv = ry.view();
  tigon::gemv(xh, wh, with_bias ? &bh : nullptr, ryv);

  DevMat gx(x), gw(w), gb(b), gy(y);
  auto xv = gx.view(), wv = gw.view(), yv = gy.view(), bv = gb.vec_view(N);
  const size_t bytes = tigon::gemv_workspace_size(xv, wv);
  tigon::Buffer ws(bytes, tigon::cuda(0));
  tigon::gemv(xv, wv, with_bias ? &bv : nullptr, yv, ws.get(), ws.size());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const HostMat got = gy.fetch();
  // One rounding of y apart, plus fp32 sums in another order (relative to the sum's size, ~sqrt(K) terms of 0.05).
  const double tol = rtol_of(dt);
  EXPECT_LE(worst_ratio(got, ry, tol * 0.05 * std::sqrt(double(K)), tol), 1.0);

  // Deterministic: a second call gives the same bits (split K is added up in a fixed order).
  tigon::gemv(xv, wv, with_bias ? &bv : nullptr, yv, ws.get(), ws.size());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gy.fetch(), got, 0, 0), 0.0);
}

const Case kShapes[] = {
    Case{DType::kBFloat16, 1, 4096, 4096, 0, false},  // split K (few columns for the GPU)
    Case{DType::kBFloat16, 1, 14336, 4096, 0, true},  // no split
    Case{DType::kFloat16, 3, 1001, 1000, 8, true},    // K a multiple of 8 only, N odd, padded rows
    Case{DType::kBFloat16, 16, 517, 2056, 0, false},  // 16 rows: tiles of K in shared memory
    Case{DType::kBFloat16, 8, 4096, 14336, 0, false},
    Case{DType::kBFloat16, 17, 300, 264, 0, true},  // 17 rows: a second block of rows
    Case{DType::kFloat16, 40, 77, 4104, 0, false},
    Case{DType::kBFloat16, 2, 129, 33, 0, true},   // K odd: element-wise kernel
    Case{DType::kBFloat16, 5, 64, 512, 3, false},  // unaligned rows of x: element-wise kernel
    Case{DType::kFloat32, 4, 100, 772, 0, true},
    Case{DType::kBFloat16, 1, 1, 8, 0, true},
    Case{DType::kBFloat16, 1, 8, 131072, 0, false},  // very long K: many splits
    // 5 rows and more (16-bit, 16-byte rows): the tensor-core kernel
    Case{DType::kBFloat16, 6, 4096, 4096, 0, true},  // split K across a cluster, 8 rows staged for 6
    Case{DType::kFloat16, 5, 1000, 1032, 8, true},   // N past a warp's 16 rows, K not a multiple of 32, padded rows
    Case{DType::kBFloat16, 12, 14336, 4096, 0, false},
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
         std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_pad" +
         std::to_string(std::get<4>(c)) + (std::get<5>(c) ? "_bias" : "");
}
INSTANTIATE_TEST_SUITE_P(Shapes, GemvCuda, ::testing::ValuesIn(kShapes), case_name);

// Weights side by side: each part's rows against the CPU reference on the concatenated weight (the plan counts the
// parts' blocks, so sums may split K otherwise than tigon_gemv on one weight: compared with the GEMV tolerance).
class GemvCudaParts : public ::testing::TestWithParam<int64_t> {};

TEST_P(GemvCudaParts, MatchTheConcatenatedWeight) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(21);
  const int64_t M = GetParam(), K = 4096, rows[3] = {4096, 1024, 1000};  // q, k, v of a GQA layer; the last's tail
  HostMat x(DType::kBFloat16, M, K), all(DType::kBFloat16, 6120, K), b(DType::kBFloat16, 1, 6120);
  x.fill_random(rng);
  all.fill_random(rng, 0.05);
  b.fill_random(rng);
  HostMat want(DType::kBFloat16, M, 6120), y(DType::kBFloat16, M, 6120);
  y.poison();
  auto xh = x.view(), allh = all.view(), wanth = want.view();
  tigon::TensorView bh(b.data(), {6120}, tigon::dtype::bfloat16);
  tigon::gemv(xh, allh, &bh, wanth);
  DevMat gx(x), gall(all), gb(b), gy(y);
  auto xv = gx.view(), yv = gy.view();
  std::vector<tigon::TensorView> w, bias;
  for (int64_t i = 0, first = 0; i < 3; first += rows[i], ++i) {
    w.emplace_back(static_cast<uint8_t*>(gall.ptr) + first * K * 2, std::vector<int64_t>{rows[i], K},
                   tigon::dtype::bfloat16, tigon::cuda(0));
    bias.emplace_back(static_cast<uint8_t*>(gb.ptr) + first * 2, std::vector<int64_t>{rows[i]}, tigon::dtype::bfloat16,
                      tigon::cuda(0));
  }
  const tigon_tensor* wp[3] = {w[0], w[1], w[2]};
  const tigon_tensor* bp[3] = {bias[0], bias[1], bias[2]};
  ASSERT_EQ(tigon_gemv_parts(xv, wp, bp, 3, yv, nullptr, 0, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double tol = rtol_of(DType::kBFloat16);
  EXPECT_LE(worst_ratio(gy.fetch(), want, tol * 0.05 * std::sqrt(double(K)), tol), 1.0);
}
INSTANTIATE_TEST_SUITE_P(Rows, GemvCudaParts, ::testing::Values(2, 8));  // CUDA cores, tensor cores

TEST(GemvCudaApi, SplitKNeedsNoWorkspace) {
  SKIP_WITHOUT_GPU();
  HostMat x(DType::kBFloat16, 1, 4096), w(DType::kBFloat16, 64, 4096), y(DType::kBFloat16, 1, 64);
  DevMat gx(x), gw(w), gy(y);
  auto xv = gx.view(), wv = gw.view(), yv = gy.view();
  EXPECT_EQ(tigon::gemv_workspace_size(xv, wv), 0u);  // 64 columns on a whole GPU: K is split within a cluster
  EXPECT_EQ(tigon_gemv(xv, wv, nullptr, yv, nullptr, 0, nullptr), TIGON_SUCCESS) << tigon_last_error();
}

}  // namespace
