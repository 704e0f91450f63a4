// The RoPE CPU reference (through the C API) against Hugging Face's formula written with rotate_half as a vector op,
// in fp64; and the C API's argument checks, each naming its argument.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "rope_test_util.h"

using namespace tigon_test;

namespace {

// x * cos + rotate(x) * sin (forward) or g * cos + rotate^T(g * sin) (backward, autograd of the forward), one head.
std::vector<double> naive_head(const std::vector<double>& x, const std::vector<double>& c, const std::vector<double>& s,
                               bool interleaved, bool backward) {
  const size_t D = x.size(), R = c.size(), h = R / 2;
  std::vector<double> out = x, rot(R), xs(R);
  for (size_t j = 0; j < R; ++j) xs[j] = backward ? x[j] * s[j] : x[j];
  for (size_t j = 0; j < R; ++j) {
    if (!interleaved)  // rotate_half = cat(-x2, x1); its transpose = cat(y2, -y1)
      rot[j] = backward ? (j < h ? xs[j + h] : -xs[j - h]) : (j < h ? -xs[j + h] : xs[j - h]);
    else  // pairs: (-x[2i+1], x[2i]); transpose (y[2i+1], -y[2i])
      rot[j] = backward ? (j % 2 == 0 ? xs[j + 1] : -xs[j - 1]) : (j % 2 == 0 ? -xs[j + 1] : xs[j - 1]);
  }
  for (size_t j = 0; j < R; ++j) out[j] = x[j] * c[j] + (backward ? rot[j] : rot[j] * s[j]);
  (void)D;
  return out;
}

// dtype, table dtype is fp32, layout, interleaved, backward, B, H, T, D, R, table batch
using Case = std::tuple<DType, bool, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
class RopeReference : public ::testing::TestWithParam<Case> {};

TEST_P(RopeReference, MatchesNaiveFp64) {
  const auto [dt, cs32, layout, inter, bwd, B, H, T, D, R, Bc] = GetParam();
  std::mt19937 rng(17 + B * 5 + H * 3 + T + D + R);
  const bool bthd = layout == TIGON_ROPE_BTHD;
  const std::array<int64_t, 4> shape = bthd ? std::array<int64_t, 4>{B, T, H, D} : std::array<int64_t, 4>{B, H, T, D};
  Host4 x(dt, shape, {0, 1, 2, 3}), out(dt, shape), cos(cs32 ? DType::kFloat32 : dt, {1, Bc, T, R}, {0, 0, 1, 2}),
      sin(cos.dtype, {1, Bc, T, R});
  x.fill_random(rng);
  fill_tables(cos, sin, inter, false, rng);
  out.poison();
  auto xv = x.view(), ov = out.view(), cv = table_view(cos), sv = table_view(sin);
  const tigon_rope_params p{inter ? 1 : 0, layout};
  tigon::check(bwd ? tigon_rope_bwd(xv, cv, sv, ov, p, nullptr) : tigon_rope_fwd(xv, cv, sv, ov, p, nullptr));

  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        auto at = [&](Host4& m, int64_t j) { return bthd ? m.at(b, t, h, j) : m.at(b, h, t, j); };
        std::vector<double> xr(D), c(R), s(R);
        for (int64_t j = 0; j < D; ++j) xr[j] = at(x, j);
        for (int64_t j = 0; j < R; ++j) {
          c[j] = cos.at(0, Bc == 1 ? 0 : b, t, j);
          s[j] = sin.at(0, Bc == 1 ? 0 : b, t, j);
        }
        const std::vector<double> want = naive_head(xr, c, s, inter, bwd);
        for (int64_t j = 0; j < D; ++j) {
          const double got = at(out, j);
          ASSERT_FALSE(std::isnan(got)) << "unwritten element at head dim " << j;
          worst = std::max(worst, std::fabs(got - want[j]) / (rtol_of(dt) + std::fabs(want[j])));
        }
      }
  EXPECT_LE(worst, rtol_of(dt));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RopeReference,
    ::testing::Values(Case{DType::kFloat32, true, TIGON_ROPE_BHTD, false, false, 2, 3, 5, 16, 16, 2},
                      Case{DType::kFloat32, true, TIGON_ROPE_BHTD, false, true, 2, 3, 5, 16, 16, 1},
                      Case{DType::kBFloat16, false, TIGON_ROPE_BTHD, false, false, 2, 4, 7, 128, 64, 1},
                      Case{DType::kBFloat16, true, TIGON_ROPE_BTHD, true, true, 1, 2, 7, 96, 96, 1},
                      Case{DType::kFloat16, false, TIGON_ROPE_BHTD, true, false, 3, 1, 4, 10, 6, 3},
                      Case{DType::kFloat16, true, TIGON_ROPE_BTHD, true, true, 1, 5, 3, 8, 8, 1},
                      Case{DType::kFloat32, true, TIGON_ROPE_BTHD, false, true, 2, 2, 3, 9, 2, 2}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return std::string(short_name(std::get<0>(c))) + (std::get<1>(c) ? "_cs32" : "_csx") +
             (std::get<2>(c) ? "_bthd" : "_bhtd") + (std::get<3>(c) ? "_inter" : "_half") +
             (std::get<4>(c) ? "_bwd" : "_fwd") + "_D" + std::to_string(std::get<8>(c)) + "_R" +
             std::to_string(std::get<9>(c)) + "_Bc" + std::to_string(std::get<10>(c));
    });

TEST(RopeReference, InPlaceEqualsOutOfPlaceAndLeavesPassThroughAlone) {
  std::mt19937 rng(5);
  Host4 x(DType::kBFloat16, {2, 3, 4, 12}), out(DType::kBFloat16, {2, 3, 4, 12}), cos(DType::kFloat32, {1, 1, 4, 8}),
      sin(DType::kFloat32, {1, 1, 4, 8});
  x.fill_random(rng);
  fill_tables(cos, sin, false, true, rng);
  const Host4 original = x;
  auto xv = x.view(), ov = out.view(), cv = table_view(cos), sv = table_view(sin);
  tigon::check(tigon_rope_fwd(xv, cv, sv, ov, {0, 0}, nullptr));
  tigon::check(tigon_rope_fwd(xv, cv, sv, xv, {0, 0}, nullptr));
  x.each([&](int64_t a, int64_t b, int64_t c, int64_t d) {
    EXPECT_EQ(x.at(a, b, c, d), out.at(a, b, c, d));
    if (d >= 8) EXPECT_EQ(x.at(a, b, c, d), original.at(a, b, c, d));
  });
  // Backward undoes the forward (HF tables: cos^2 + sin^2 = 1), within rounding.
  tigon::check(tigon_rope_bwd(xv, cv, sv, xv, {0, 0}, nullptr));
  x.each([&](int64_t a, int64_t b, int64_t c, int64_t d) {
    EXPECT_NEAR(x.at(a, b, c, d), original.at(a, b, c, d), 0.05 * (1 + std::fabs(original.at(a, b, c, d))));
  });
}

// ---- argument checks -----------------------------------------------------------------------------------------------

struct Bad {
  std::string arg;
  std::function<tigon_status_t()> call;
};

TEST(RopeApi, EveryBadArgumentIsNamed) {
  Host4 x(DType::kBFloat16, {2, 4, 6, 16}), out(DType::kBFloat16, {2, 4, 6, 16}), cos(DType::kFloat32, {1, 1, 6, 8}),
      sin(DType::kFloat32, {1, 1, 6, 8}), cos_odd(DType::kFloat32, {1, 1, 6, 7}),
      cos_wide(DType::kFloat32, {1, 1, 6, 18}), cos_b3(DType::kFloat32, {1, 3, 6, 8}),
      cos_t5(DType::kFloat32, {1, 1, 5, 8}), cos_f16(DType::kFloat16, {1, 1, 6, 8}),
      out_f32(DType::kFloat32, {2, 4, 6, 16}), out_small(DType::kBFloat16, {2, 4, 6, 15}),
      xi(DType::kInt32, {2, 4, 6, 16}), sin_bf(DType::kBFloat16, {1, 1, 6, 8});
  auto xv = x.view(), ov = out.view(), cv = table_view(cos), sv = table_view(sin);
  const tigon_rope_params ok{0, 0};
  tigon::TensorView x3(x.bytes.data(), {2, 4, 96}, tigon::dtype::bfloat16);
  tigon::TensorView x_strided(x.bytes.data(), {2, 4, 6, 8}, tigon::dtype::bfloat16, tigon::cpu(), {384, 96, 16, 2});
  tigon::TensorView x_other_strides(x.bytes.data(), {2, 4, 6, 16}, tigon::dtype::bfloat16, tigon::cpu(),
                                    {384, 16, 64, 1});
  tigon::TensorView cos_gpu(cos.bytes.data(), {1, 6, 8}, tigon::dtype::float32, tigon::cuda(0));
  tigon::TensorView k_dim(x.bytes.data(), {2, 4, 6, 8}, tigon::dtype::bfloat16);
  tigon::TensorView k_batch(x.bytes.data(), {1, 4, 6, 16}, tigon::dtype::bfloat16);
  const std::vector<Bad> cases = {
      {"'x'", [&] { return tigon_rope_fwd(nullptr, cv, sv, ov, ok, nullptr); }},
      {"'x'", [&] { return tigon_rope_fwd(x3, cv, sv, ov, ok, nullptr); }},
      {"'x'", [&] { return tigon_rope_fwd(xi.view(), cv, sv, ov, ok, nullptr); }},
      {"'x'", [&] { return tigon_rope_fwd(x_strided, cv, sv, ov, ok, nullptr); }},
      {"'cos'", [&] { return tigon_rope_fwd(xv, nullptr, sv, ov, ok, nullptr); }},
      {"'cos'", [&] { return tigon_rope_fwd(xv, table_view(cos_odd), sv, ov, ok, nullptr); }},
      {"'cos'", [&] { return tigon_rope_fwd(xv, table_view(cos_wide), sv, ov, ok, nullptr); }},
      {"'cos'", [&] { return tigon_rope_fwd(xv, table_view(cos_b3), sv, ov, ok, nullptr); }},
      {"'cos'", [&] { return tigon_rope_fwd(xv, table_view(cos_t5), sv, ov, ok, nullptr); }},
      {"'cos'", [&] { return tigon_rope_fwd(xv, table_view(cos_f16), table_view(cos_f16), ov, ok, nullptr); }},
      {"'cos'", [&] { return tigon_rope_fwd(xv, cos_gpu, sv, ov, ok, nullptr); }},
      {"'sin'", [&] { return tigon_rope_fwd(xv, cv, table_view(cos_wide), ov, ok, nullptr); }},
      {"'sin'", [&] { return tigon_rope_fwd(xv, cv, table_view(sin_bf), ov, ok, nullptr); }},
      {"'out'", [&] { return tigon_rope_fwd(xv, cv, sv, out_f32.view(), ok, nullptr); }},
      {"'out'", [&] { return tigon_rope_fwd(xv, cv, sv, out_small.view(), ok, nullptr); }},
      {"'out'", [&] { return tigon_rope_fwd(xv, cv, sv, x_other_strides, ok, nullptr); }},
      {"'out'", [&] { return tigon_rope_fwd(xv, cv, sv, nullptr, ok, nullptr); }},
      {"'layout'", [&] { return tigon_rope_fwd(xv, cv, sv, ov, {0, 2}, nullptr); }},
      {"'interleaved'", [&] { return tigon_rope_fwd(xv, cv, sv, ov, {3, 0}, nullptr); }},
      {"'dy'", [&] { return tigon_rope_bwd(x3, cv, sv, ov, ok, nullptr); }},
      {"'dx'", [&] { return tigon_rope_bwd(xv, cv, sv, out_f32.view(), ok, nullptr); }},
      // q and k together: k must match q's dtype, head dim, batch and seq_len
      {"'k'", [&] { return tigon_rope_qk_fwd(xv, k_dim, cv, sv, ov, k_dim, ok, nullptr); }},
      {"'k'", [&] { return tigon_rope_qk_fwd(xv, k_batch, cv, sv, ov, k_batch, ok, nullptr); }},
      {"'k'", [&] { return tigon_rope_qk_fwd(xv, out_f32.view(), cv, sv, ov, out_f32.view(), ok, nullptr); }},
      {"'k_out'", [&] { return tigon_rope_qk_fwd(xv, xv, cv, sv, ov, out_small.view(), ok, nullptr); }},
      {"'dk_out'", [&] { return tigon_rope_qk_bwd(xv, x3, cv, sv, ov, ov, ok, nullptr); }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].call(), TIGON_ERROR_INVALID_ARGUMENT) << "case " << i;
    EXPECT_NE(std::string(tigon_last_error()).find("argument " + cases[i].arg), std::string::npos)
        << "case " << i << ": " << tigon_last_error();
  }
}

TEST(RopeApi, LayoutDecidesWhichDimIsTime) {
  // (B, T, H, D) = (1, 6, 4, 16) with cos for T = 6: valid as BTHD, a seq_len mismatch as BHTD.
  Host4 x(DType::kFloat32, {1, 6, 4, 16}), out(DType::kFloat32, {1, 6, 4, 16}), cos(DType::kFloat32, {1, 1, 6, 16}),
      sin(DType::kFloat32, {1, 1, 6, 16});
  auto xv = x.view(), ov = out.view(), cv = table_view(cos), sv = table_view(sin);
  EXPECT_EQ(tigon_rope_fwd(xv, cv, sv, ov, {0, TIGON_ROPE_BTHD}, nullptr), TIGON_SUCCESS);
  EXPECT_EQ(tigon_rope_fwd(xv, cv, sv, ov, {0, TIGON_ROPE_BHTD}, nullptr), TIGON_ERROR_INVALID_ARGUMENT);
}

}  // namespace
