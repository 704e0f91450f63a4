// Int8 CUDA kernels against the CPU reference, through the same C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "int8_test_util.h"
#include "test_util.h"

using namespace tigon_test;

namespace {

const auto kF32 = tigon::dtype::float32;

// A device copy of a host vector of floats.
struct DevFloats {
  float* ptr = nullptr;
  int64_t n;
  explicit DevFloats(const std::vector<float>& h, int64_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&ptr, (h.size() + 1) * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DevFloats() { cudaFree(ptr); }
  tigon::TensorView view() { return tigon::TensorView(ptr, {n}, kF32, tigon::cuda(0)); }
  std::vector<float> fetch() const {
    std::vector<float> h(static_cast<size_t>(n));
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, h.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// ---- quantize_rows: the same bits as the reference -----------------------------------------------------------------

using QCase = std::tuple<DType, int64_t, int64_t, int64_t>;  // dtype, M, K, x row padding (odd: unaligned rows)

class Int8QuantizeCuda : public ::testing::TestWithParam<QCase> {};

TEST_P(Int8QuantizeCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, M, K, pad] = GetParam();
  std::mt19937 rng(3 + M + K * 5);
  HostMat x(dt, M, K, K + pad), q(DType::kInt8, M, K, K + 16);
  x.fill_random(rng, 2.0);
  for (int64_t k = 0; k < K; ++k) x.set(0, k, 0.0);  // a zero row
  HostMat rq = q;
  std::vector<float> rs(static_cast<size_t>(M)), s0(static_cast<size_t>(M), -1.f);
  auto xh = x.view(), rqv = rq.view();
  tigon::TensorView rsv(rs.data(), {M}, kF32);
  ASSERT_EQ(tigon_quantize_rows(xh, rqv, rsv, nullptr), TIGON_SUCCESS) << tigon_last_error();

  DevMat gx(x), gq(q);
  DevFloats gs(s0, M);
  auto xv = gx.view(), qv = gq.view(), sv = gs.view();
  ASSERT_EQ(tigon_quantize_rows(xv, qv, sv, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gq.fetch(), rq, 0, 0), 0.0);
  const auto s = gs.fetch();
  for (int64_t m = 0; m < M; ++m) EXPECT_EQ(s[size_t(m)], rs[size_t(m)]) << m;
}

const QCase kQuantShapes[] = {
    QCase{DType::kBFloat16, 64, 4096, 0},                                     // 16-byte loads
    QCase{DType::kFloat16, 7, 1000, 8},   QCase{DType::kFloat32, 5, 333, 0},  // K odd: element-wise kernel
    QCase{DType::kBFloat16, 3, 64, 3},                                        // unaligned rows: element-wise kernel
    QCase{DType::kBFloat16, 1, 65536, 0},
};

INSTANTIATE_TEST_SUITE_P(Shapes, Int8QuantizeCuda, ::testing::ValuesIn(kQuantShapes),
                         [](const ::testing::TestParamInfo<QCase>& info) {
                           const QCase& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "_pad" + std::to_string(std::get<3>(c));
                         });

// ---- int8_linear: the int32 products exact, then one fp32 epilogue against the fp64 reference -----------------------

using LCase = std::tuple<DType, int64_t, int64_t, int64_t, int, bool, int64_t>;  // + out row padding

class Int8LinearCuda : public ::testing::TestWithParam<LCase> {};

TEST_P(Int8LinearCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, M, N, K, act, with_bias, pad] = GetParam();
  std::mt19937 rng(9 + M + N * 3 + K);
  HostMat qx(DType::kInt8, M, K), qw(DType::kInt8, N, K), b(dt, 1, N), out(dt, M, N, N + pad);
  fill_int8(qx, rng);
  fill_int8(qw, rng);
  b.fill_random(rng);
  out.poison();
  const auto sx = random_scales(M, rng, 0.02), sw = random_scales(N, rng, 1.0 / (127.0 * std::sqrt(double(K))));
  HostMat ref = out;
  auto xh = qx.view(), wh = qw.view(), rv = ref.view();
  tigon::TensorView sxh(const_cast<float*>(sx.data()), {M}, kF32), swh(const_cast<float*>(sw.data()), {N}, kF32),
      bh(b.data(), {N}, to_dl(dt));
  ASSERT_EQ(tigon_int8_linear(xh, sxh, wh, swh, with_bias ? &*bh : nullptr, rv, {act}, nullptr, 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();

  DevMat gx(qx), gw(qw), gb(b), go(out);
  DevFloats gsx(sx, M), gsw(sw, N);
  auto xv = gx.view(), wv = gw.view(), ov = go.view(), bv = gb.vec_view(N), sxv = gsx.view(), swv = gsw.view();
  size_t bytes = 0;
  ASSERT_EQ(tigon_int8_linear_workspace_size(xv, wv, &bytes), TIGON_SUCCESS) << tigon_last_error();
  tigon::Buffer ws(bytes, tigon::cuda(0));
  ASSERT_EQ(tigon_int8_linear(xv, sxv, wv, swv, with_bias ? &*bv : nullptr, ov, {act}, ws.get(), ws.size(), nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // The dot products are exact on both sides; the epilogue is fp32 against fp64: one rounding of out apart.
  const double tol = rtol_of(dt);
  EXPECT_LE(worst_ratio(go.fetch(), ref, tol * 0.05, tol), 1.0);
}

const LCase kLinearShapes[] = {
    LCase{DType::kBFloat16, 128, 256, 512, TIGON_ACT_NONE, true, 0},  // vectorised epilogue
    LCase{DType::kFloat16, 64, 1024, 4096, TIGON_ACT_GELU_TANH, true, 0},
    LCase{DType::kBFloat16, 3, 36, 20, TIGON_ACT_RELU, false, 1},  // small, odd out rows: scalar stores
    LCase{DType::kBFloat16, 33, 64, 128, TIGON_ACT_SILU, true, 8},
    LCase{DType::kFloat32, 17, 40, 64, TIGON_ACT_GELU_ERF, false, 0},
    LCase{DType::kBFloat16, 1, 4096, 4096, TIGON_ACT_NONE, false, 0},     // one token
    LCase{DType::kBFloat16, 100, 264, 272, TIGON_ACT_GELU_ERF, true, 0},  // sm_90: the fused GEMM, partial tiles
};

INSTANTIATE_TEST_SUITE_P(Shapes, Int8LinearCuda, ::testing::ValuesIn(kLinearShapes),
                         [](const ::testing::TestParamInfo<LCase>& info) {
                           const LCase& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_act" +
                                  std::to_string(std::get<4>(c)) + (std::get<5>(c) ? "_bias" : "") + "_pad" +
                                  std::to_string(std::get<6>(c));
                         });

// ---- gemv_int8 -----------------------------------------------------------------------------------------------------

using GCase = std::tuple<DType, int64_t, int64_t, int64_t, int64_t, bool>;  // dtype, M, N, K, x padding, bias

class GemvInt8Cuda : public ::testing::TestWithParam<GCase> {};

TEST_P(GemvInt8Cuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, M, N, K, pad, with_bias] = GetParam();
  std::mt19937 rng(13 + M + N * 7 + K);
  HostMat x(dt, M, K, K + pad), qw(DType::kInt8, N, K), b(dt, 1, N), y(dt, M, N, N + 3);
  x.fill_random(rng);
  fill_int8(qw, rng);
  b.fill_random(rng);
  y.poison();
  const auto sw = random_scales(N, rng, 0.05 / 127.0);
  HostMat ry = y;
  auto xh = x.view(), wh = qw.view(), ryv = ry.view();
  tigon::TensorView swh(const_cast<float*>(sw.data()), {N}, kF32), bh(b.data(), {N}, to_dl(dt));
  ASSERT_EQ(tigon_gemv_int8(xh, wh, swh, with_bias ? &*bh : nullptr, ryv, nullptr, 0, nullptr), TIGON_SUCCESS)
      << tigon_last_error();

  DevMat gx(x), gw(qw), gb(b), gy(y);
  DevFloats gsw(sw, N);
  auto xv = gx.view(), wv = gw.view(), yv = gy.view(), bv = gb.vec_view(N), swv = gsw.view();
  size_t bytes = 0;
  ASSERT_EQ(tigon_gemv_int8_workspace_size(xv, wv, &bytes), TIGON_SUCCESS) << tigon_last_error();
  tigon::Buffer ws(bytes, tigon::cuda(0));
  ASSERT_EQ(tigon_gemv_int8(xv, wv, swv, with_bias ? &*bv : nullptr, yv, ws.get(), ws.size(), nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const HostMat got = gy.fetch();
  // One rounding of y apart, plus fp32 sums in another order (~sqrt(K) terms of about 0.05 each).
  const double tol = rtol_of(dt);
  EXPECT_LE(worst_ratio(got, ry, tol * 0.05 * std::sqrt(double(K)), tol), 1.0);
  // Deterministic: the same bits again.
  ASSERT_EQ(tigon_gemv_int8(xv, wv, swv, with_bias ? &*bv : nullptr, yv, ws.get(), ws.size(), nullptr), TIGON_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gy.fetch(), got, 0, 0), 0.0);
}

const GCase kGemvShapes[] = {
    GCase{DType::kBFloat16, 1, 14336, 4096, 0, true},   // the decode shape: no split
    GCase{DType::kBFloat16, 1, 4096, 4096, 0, false},   // split K, scaled combine
    GCase{DType::kFloat16, 16, 517, 2064, 0, true},     // 16 rows of x: tensor cores, two n8 tiles
    GCase{DType::kBFloat16, 3, 4096, 4096, 0, true},    // 3 rows: tensor cores from here, split K in clusters
    GCase{DType::kBFloat16, 8, 14336, 4096, 0, false},  // a decode batch of 8
    GCase{DType::kFloat16, 4, 200, 1040, 0, false},     // K % 64 == 16: the last step's lanes partly out
    GCase{DType::kBFloat16, 5, 300, 264, 0, false},     // K % 16 == 8: element-wise kernel
    GCase{DType::kBFloat16, 3, 129, 512, 3, true},      // unaligned rows of x: element-wise kernel
    GCase{DType::kFloat32, 4, 100, 784, 0, true},
    GCase{DType::kBFloat16, 17, 64, 1024, 0, false},  // 17 rows: a second block of rows
};

INSTANTIATE_TEST_SUITE_P(Shapes, GemvInt8Cuda, ::testing::ValuesIn(kGemvShapes),
                         [](const ::testing::TestParamInfo<GCase>& info) {
                           const GCase& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_pad" +
                                  std::to_string(std::get<4>(c)) + (std::get<5>(c) ? "_bias" : "");
                         });

}  // namespace
