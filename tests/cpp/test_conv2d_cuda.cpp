// Convolution on the GPU against the CPU reference through the same C API: bf16 and fp16; epilogues none, bias,
// bias + ReLU and bias + residual + ReLU (each its own operation graph on the cuDNN path); strides, padding and
// dilation, 1x1 filters (GEMMs, and a strided one that is not) and a 7x7 filter; and the refusal of channels that are
// not a multiple of 8. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "test_util.h"
#include "tigon/conv2d.h"

using namespace tigon_test;

namespace {

tigon::TensorView nhwc(void* ptr, DType dt, tigon_device dev, int64_t n, int64_t c, int64_t h, int64_t w) {
  return tigon::TensorView(ptr, {n, c, h, w}, to_dl(dt), dev, {h * w * c, 1, w * c, c});
}

enum Epilogue { kNone, kBias, kBiasRelu, kBiasResidualRelu };
constexpr const char* kEpilogueNames[] = {"", "_bias", "_bias_relu", "_fused"};

// dtype, N, C, H, W, K, R, S, stride, pad, dilation, epilogue
using Case = std::tuple<DType, int, int, int, int, int, int, int, int, int, int, Epilogue>;

class Conv2dCuda : public ::testing::TestWithParam<Case> {};

TEST_P(Conv2dCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, n, c, h, w, k, r, s, stride, pad, dil, epilogue] = GetParam();
  const bool with_bias = epilogue != kNone, residual = epilogue == kBiasResidualRelu;
  const int p = (h + 2 * pad - dil * (r - 1) - 1) / stride + 1, q = (w + 2 * pad - dil * (s - 1) - 1) / stride + 1;
  std::mt19937 rng(unsigned(n + c + h + k + r));
  HostMat x(dt, int64_t(n) * h * w, c), wt(dt, int64_t(k) * r * s, c), bias(dt, 1, k), res(dt, int64_t(n) * p * q, k);
  HostMat y(dt, int64_t(n) * p * q, k);
  x.fill_random(rng);
  wt.fill_random(rng, 1.0 / std::sqrt(double(c * r * s)));
  bias.fill_random(rng);
  res.fill_random(rng);
  y.poison();
  HostMat ry = y;
  const tigon_conv2d_params prm{
      stride, stride, pad, pad, dil, dil, epilogue >= kBiasRelu ? TIGON_ACT_RELU : TIGON_ACT_NONE};
  const auto cpu = tigon::cpu();
  const tigon::TensorView hb(bias.data(), {k}, to_dl(dt));
  ASSERT_EQ(
      tigon_conv2d_fwd(nhwc(x.data(), dt, cpu, n, c, h, w), nhwc(wt.data(), dt, cpu, k, c, r, s),
                       with_bias ? hb.get() : nullptr, residual ? nhwc(res.data(), dt, cpu, n, k, p, q).get() : nullptr,
                       nhwc(ry.data(), dt, cpu, n, k, p, q), prm, nullptr, 0, nullptr),
      TIGON_SUCCESS)
      << tigon_last_error();
  DevMat gx(x), gw(wt), gb(bias), gres(res), gy(y);
  const auto gpu = tigon::cuda(0);
  const tigon::TensorView db(gb.ptr, {k}, to_dl(dt), gpu);
  const auto gxv = nhwc(gx.ptr, dt, gpu, n, c, h, w), gwv = nhwc(gw.ptr, dt, gpu, k, c, r, s);
  const auto gyv = nhwc(gy.ptr, dt, gpu, n, k, p, q), gresv = nhwc(gres.ptr, dt, gpu, n, k, p, q);
  const tigon_tensor* gbias = with_bias ? db.get() : nullptr;
  const tigon_tensor* gres_or_null = residual ? gresv.get() : nullptr;
  size_t need = 0;
  ASSERT_EQ(tigon_conv2d_fwd_workspace_size(gxv, gwv, gbias, gres_or_null, gyv, prm, &need), TIGON_SUCCESS)
      << tigon_last_error();
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, need > 0 ? need : 1), cudaSuccess);
  if (need > 0) {  // one byte short is refused, naming the workspace
    EXPECT_EQ(tigon_conv2d_fwd(gxv, gwv, gbias, gres_or_null, gyv, prm, ws, need - 1, nullptr),
              TIGON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tigon_last_error()).find("argument 'workspace'"), std::string::npos) << tigon_last_error();
  }
  ASSERT_EQ(tigon_conv2d_fwd(gxv, gwv, gbias, gres_or_null, gyv, prm, ws, need, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(ws);
  // fp32 accumulation against the reference's fp64, one rounding each: the outputs differ by about one rounding
  EXPECT_LE(worst_ratio(gy.fetch(), ry, 2 * rtol_of(dt), 2 * rtol_of(dt)), 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dCuda,
    ::testing::Values(Case{DType::kBFloat16, 2, 64, 14, 14, 64, 3, 3, 1, 1, 1, kBiasResidualRelu},  // ResNet 3x3
                      Case{DType::kBFloat16, 2, 64, 14, 14, 64, 3, 3, 1, 1, 1, kBiasRelu},
                      Case{DType::kFloat16, 2, 64, 14, 14, 64, 3, 3, 1, 1, 1, kBias},
                      Case{DType::kBFloat16, 2, 32, 12, 12, 64, 3, 3, 1, 1, 1, kNone},
                      Case{DType::kBFloat16, 3, 32, 9, 11, 128, 1, 1, 1, 0, 1, kNone},  // 1x1, odd sizes
                      // 1x1 as a GEMM: wide tiles in clusters with bias + shortcut + ReLU; 128 x 128 tiles, odd M
                      Case{DType::kBFloat16, 8, 64, 56, 56, 256, 1, 1, 1, 0, 1, kBiasResidualRelu},
                      Case{DType::kFloat16, 3, 40, 9, 11, 72, 1, 1, 1, 0, 1, kBiasResidualRelu},
                      Case{DType::kBFloat16, 2, 64, 14, 14, 128, 1, 1, 2, 0, 1, kBiasRelu},        // 1x1 stride 2
                      Case{DType::kFloat16, 2, 16, 23, 17, 64, 7, 7, 2, 3, 1, kBiasResidualRelu},  // strided 7x7
                      Case{DType::kFloat16, 1, 24, 13, 13, 8, 3, 3, 1, 2, 2, kBiasResidualRelu}),  // dilated
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& t = info.param;
      return std::string(short_name(std::get<0>(t))) + "_c" + std::to_string(std::get<2>(t)) + "_k" +
             std::to_string(std::get<5>(t)) + "_r" + std::to_string(std::get<6>(t)) + "_s" +
             std::to_string(std::get<8>(t)) + "_d" + std::to_string(std::get<10>(t)) + kEpilogueNames[std::get<11>(t)];
    });

TEST(Conv2dCudaApi, RefusesChannelsNotAMultipleOf8) {
  SKIP_WITHOUT_GPU();
  HostMat x(DType::kBFloat16, 4 * 4, 12), wt(DType::kBFloat16, 8 * 9, 12), y(DType::kBFloat16, 2 * 2, 8);
  DevMat gx(x), gw(wt), gy(y);
  const auto gpu = tigon::cuda(0);
  EXPECT_EQ(
      tigon_conv2d_fwd(nhwc(gx.ptr, DType::kBFloat16, gpu, 1, 12, 4, 4),
                       nhwc(gw.ptr, DType::kBFloat16, gpu, 8, 12, 3, 3), nullptr, nullptr,
                       nhwc(gy.ptr, DType::kBFloat16, gpu, 1, 8, 2, 2), {1, 1, 0, 0, 1, 1, 0}, nullptr, 0, nullptr),
      TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("argument 'x'"), std::string::npos) << tigon_last_error();
}

}  // namespace
