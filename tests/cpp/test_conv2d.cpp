// Convolution's CPU reference (through the C API) against naive loops: bias, residual before the ReLU, strides,
// padding and dilation; and C API validation naming the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "test_util.h"
#include "tigon/conv2d.h"

using namespace tigon_test;

namespace {

// An [N, C, H, W] channels-last view of a HostMat holding N*H*W rows of C.
tigon::TensorView nhwc(HostMat& m, int64_t n, int64_t c, int64_t h, int64_t w) {
  return tigon::TensorView(m.bytes.data(), {n, c, h, w}, to_dl(m.dtype), tigon::cpu(), {h * w * c, 1, w * c, c});
}

TEST(Conv2dReference, MatchesNaiveLoops) {
  std::mt19937 rng(5);
  const int64_t n = 2, c = 3, h = 7, w = 6, k = 4, r = 3, s = 2;
  const int sh = 2, sw = 1, ph = 1, pw = 2, dh = 1, dw = 2;
  const int64_t p = (h + 2 * ph - dh * (r - 1) - 1) / sh + 1, q = (w + 2 * pw - dw * (s - 1) - 1) / sw + 1;
  HostMat x(DType::kFloat32, n * h * w, c), wt(DType::kFloat32, k * r * s, c), bias(DType::kFloat32, 1, k);
  HostMat res(DType::kFloat32, n * p * q, k), y(DType::kFloat32, n * p * q, k);
  x.fill_random(rng);
  wt.fill_random(rng);
  bias.fill_random(rng);
  res.fill_random(rng);
  y.poison();
  const tigon::TensorView bv(bias.bytes.data(), {k}, to_dl(DType::kFloat32));
  const tigon_conv2d_params prm{sh, sw, ph, pw, dh, dw, TIGON_ACT_RELU};
  ASSERT_EQ(tigon_conv2d_fwd(nhwc(x, n, c, h, w), nhwc(wt, k, c, r, s), bv, nhwc(res, n, k, p, q), nhwc(y, n, k, p, q),
                             prm, nullptr, 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oh = 0; oh < p; ++oh)
      for (int64_t ow = 0; ow < q; ++ow)
        for (int64_t o = 0; o < k; ++o) {
          double want = bias.at(0, o) + res.at((b * p + oh) * q + ow, o);
          for (int64_t i = 0; i < r; ++i)
            for (int64_t j = 0; j < s; ++j) {
              const int64_t ih = oh * sh - ph + i * dh, iw = ow * sw - pw + j * dw;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              for (int64_t ch = 0; ch < c; ++ch)
                want += x.at((b * h + ih) * w + iw, ch) * wt.at((o * r + i) * s + j, ch);
            }
          EXPECT_NEAR(y.at((b * p + oh) * q + ow, o), std::max(want, 0.0), 1e-5) << b << "," << oh << "," << ow;
        }
}

void expect_error(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(Conv2dApi, RejectsBadArguments) {
  HostMat x(DType::kFloat32, 1 * 5 * 5, 4), wt(DType::kFloat32, 8 * 3 * 3, 4), y(DType::kFloat32, 3 * 3, 8);
  HostMat w16(DType::kFloat16, 8 * 3 * 3, 4), wc(DType::kFloat32, 8 * 3 * 3, 2);
  const auto xv = nhwc(x, 1, 4, 5, 5), wv = nhwc(wt, 8, 4, 3, 3), yv = nhwc(y, 1, 8, 3, 3);
  const tigon_conv2d_params ok{1, 1, 0, 0, 1, 1, TIGON_ACT_NONE};
  ASSERT_EQ(tigon_conv2d_fwd(xv, wv, nullptr, nullptr, yv, ok, nullptr, 0, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  const tigon::TensorView nchw(x.bytes.data(), {1, 4, 5, 5}, to_dl(DType::kFloat32));  // row-major strides
  expect_error(tigon_conv2d_fwd(nchw, wv, nullptr, nullptr, yv, ok, nullptr, 0, nullptr), "x");
  expect_error(tigon_conv2d_fwd(nullptr, wv, nullptr, nullptr, yv, ok, nullptr, 0, nullptr), "x");
  expect_error(tigon_conv2d_fwd(xv, nhwc(w16, 8, 4, 3, 3), nullptr, nullptr, yv, ok, nullptr, 0, nullptr), "weight");
  expect_error(tigon_conv2d_fwd(xv, nhwc(wc, 8, 2, 3, 3), nullptr, nullptr, yv, ok, nullptr, 0, nullptr), "weight");
  expect_error(tigon_conv2d_fwd(xv, wv, nullptr, nullptr, nhwc(y, 1, 8, 9, 1), ok, nullptr, 0, nullptr), "y");
  expect_error(tigon_conv2d_fwd(xv, wv, nullptr, nullptr, yv, {0, 1, 0, 0, 1, 1, 0}, nullptr, 0, nullptr),
               "params.stride_h");
  expect_error(tigon_conv2d_fwd(xv, wv, nullptr, nullptr, yv, {1, 1, -1, 0, 1, 1, 0}, nullptr, 0, nullptr),
               "params.pad_h");
  expect_error(tigon_conv2d_fwd(xv, wv, nullptr, nullptr, yv, {1, 1, 0, 0, 1, 0, 0}, nullptr, 0, nullptr),
               "params.dilation_h");
  expect_error(tigon_conv2d_fwd(xv, wv, nullptr, nullptr, yv, {1, 1, 0, 0, 1, 1, TIGON_ACT_SILU}, nullptr, 0, nullptr),
               "params.activation");
  const tigon::TensorView short_bias(y.bytes.data(), {7}, to_dl(DType::kFloat32));
  expect_error(tigon_conv2d_fwd(xv, wv, short_bias, nullptr, yv, ok, nullptr, 0, nullptr), "bias");
  size_t bytes = 1;
  ASSERT_EQ(tigon_conv2d_fwd_workspace_size(xv, wv, nullptr, nullptr, yv, ok, &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);  // none on the CPU
  expect_error(tigon_conv2d_fwd_workspace_size(xv, wv, nullptr, nullptr, yv, ok, nullptr), "bytes");
  expect_error(tigon_conv2d_fwd_workspace_size(nchw, wv, nullptr, nullptr, yv, ok, &bytes), "x");
}

}  // namespace
