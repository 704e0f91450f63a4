// The C API's contract: version, status strings, and a clear INVALID_ARGUMENT naming the argument for bad input.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

using namespace tigon_test;

namespace {

TEST(Api, VersionAndStatusStrings) {
  EXPECT_EQ(std::string(tigon_version()).rfind("0.1.0", 0), 0u);
  EXPECT_STREQ(tigon_status_string(TIGON_ERROR_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(tigon_status_string(TIGON_SUCCESS), "success");
}

// Expects INVALID_ARGUMENT and a message that names `arg`.
void expect_bad(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT) << tigon_last_error();
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("'") + arg + "'"), std::string::npos)
      << "message does not name '" << arg << "': " << tigon_last_error();
}

struct Fixture {
  HostMat x{DType::kFloat32, 4, 16}, y{DType::kFloat32, 4, 16}, w{DType::kFloat32, 1, 16}, rstd{DType::kFloat32, 1, 4},
      dx{DType::kFloat32, 4, 16};
  tigon::TensorView xv = x.view(), yv = y.view(), dxv = dx.view();
  tigon::TensorView wv{w.data(), {16}, tigon::dtype::float32};
  tigon::TensorView rv{rstd.data(), {4}, tigon::dtype::float32};
  tigon_rms_norm_params p{1e-6f, 0.f, TIGON_RMS_NORM_LLAMA};
};

// A dtype error reads "argument '<name>': dtype ..." (front ends raise a type error for it); no other error does.
void expect_dtype_error(tigon_status_t st, const char* arg, bool dtype) {
  expect_bad(st, arg);
  const bool found = std::string(tigon_last_error()).find(std::string("'") + arg + "': dtype ") != std::string::npos;
  EXPECT_EQ(found, dtype) << tigon_last_error();
}

TEST(Api, DTypeErrorsFollowTheMessageConvention) {
  Fixture f;
  tigon::TensorView int_x(f.x.data(), {4, 16}, tigon::dtype::int64);
  expect_dtype_error(tigon_rms_norm_fwd(int_x, f.wv, f.yv, f.rv, f.p, nullptr), "x", true);
  tigon::TensorView f64_w(f.w.data(), {8}, tigon_dtype{TIGON_DTYPE_CODE_FLOAT, 64, 1});  // a dtype Tigon does not know
  expect_dtype_error(tigon_rms_norm_fwd(f.xv, f64_w, f.yv, f.rv, f.p, nullptr), "weight", true);
  HostMat half_b(DType::kFloat16, 1, 16);
  tigon::TensorView bv(half_b.data(), {16}, tigon::dtype::float16);
  expect_dtype_error(
      tigon_layer_norm_fwd(f.xv, f.wv, bv, f.yv, nullptr, nullptr, tigon_layer_norm_params{1e-5f}, nullptr), "bias",
      true);
  tigon::TensorView short_w(f.w.data(), {15}, tigon::dtype::float32);
  expect_dtype_error(tigon_rms_norm_fwd(f.xv, short_w, f.yv, f.rv, f.p, nullptr), "weight", false);
}

TEST(Api, RmsNormForwardValidation) {
  Fixture f;
  ASSERT_EQ(tigon_rms_norm_fwd(f.xv, f.wv, f.yv, f.rv, f.p, nullptr), TIGON_SUCCESS) << tigon_last_error();
  expect_bad(tigon_rms_norm_fwd(nullptr, f.wv, f.yv, f.rv, f.p, nullptr), "x");
  expect_bad(tigon_rms_norm_fwd(f.xv, f.wv, nullptr, f.rv, f.p, nullptr), "y");

  tigon::TensorView short_w(f.w.data(), {15}, tigon::dtype::float32);
  expect_bad(tigon_rms_norm_fwd(f.xv, short_w, f.yv, f.rv, f.p, nullptr), "weight");
  tigon::TensorView int_w(f.w.data(), {16}, tigon::dtype::int32);
  expect_bad(tigon_rms_norm_fwd(f.xv, int_w, f.yv, f.rv, f.p, nullptr), "weight");
  tigon::TensorView int_x(f.x.data(), {4, 16}, tigon::dtype::int64);
  expect_bad(tigon_rms_norm_fwd(int_x, f.wv, f.yv, f.rv, f.p, nullptr), "x");
  tigon::TensorView y_rows(f.y.data(), {3, 16}, tigon::dtype::float32);
  expect_bad(tigon_rms_norm_fwd(f.xv, f.wv, y_rows, f.rv, f.p, nullptr), "y");
  tigon::TensorView col_major(f.x.data(), {4, 16}, tigon::dtype::float32, tigon::cpu(), {1, 4});
  expect_bad(tigon_rms_norm_fwd(col_major, f.wv, f.yv, f.rv, f.p, nullptr), "x");
  tigon::TensorView overlapping(f.x.data(), {4, 16}, tigon::dtype::float32, tigon::cpu(), {8, 1});
  expect_bad(tigon_rms_norm_fwd(overlapping, f.wv, f.yv, f.rv, f.p, nullptr), "x");
  tigon::TensorView short_rstd(f.rstd.data(), {3}, tigon::dtype::float32);
  expect_bad(tigon_rms_norm_fwd(f.xv, f.wv, f.yv, short_rstd, f.p, nullptr), "rstd");
  tigon::TensorView gpu_w(f.w.data(), {16}, tigon::dtype::float32, tigon::cuda(0));
  expect_bad(tigon_rms_norm_fwd(f.xv, gpu_w, f.yv, f.rv, f.p, nullptr), "weight");
  tigon::TensorView empty_cols(f.x.data(), {4, 0}, tigon::dtype::float32);
  expect_bad(tigon_rms_norm_fwd(empty_cols, nullptr, empty_cols, nullptr, f.p, nullptr), "x");

  tigon_rms_norm_params bad = f.p;
  bad.casting_mode = 7;
  expect_bad(tigon_rms_norm_fwd(f.xv, f.wv, f.yv, f.rv, bad, nullptr), "casting_mode");
  bad = f.p;
  bad.eps = -1.f;
  expect_bad(tigon_rms_norm_fwd(f.xv, f.wv, f.yv, f.rv, bad, nullptr), "eps");
  bad = f.p;
  bad.offset = 1.f;
  expect_bad(tigon_rms_norm_fwd(f.xv, nullptr, f.yv, f.rv, bad, nullptr), "offset");
}

TEST(Api, RmsNormBackwardValidation) {
  Fixture f;
  HostMat dy(DType::kFloat32, 4, 16), dw(DType::kFloat32, 1, 16);
  auto dyv = dy.view();
  tigon::TensorView dwv(dw.data(), {16}, tigon::dtype::float32);
  ASSERT_EQ(tigon_rms_norm_fwd(f.xv, f.wv, f.yv, f.rv, f.p, nullptr), TIGON_SUCCESS);
  ASSERT_EQ(tigon_rms_norm_bwd(dyv, f.xv, f.wv, f.rv, f.dxv, dwv, f.p, nullptr, 0, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  expect_bad(tigon_rms_norm_bwd(dyv, f.xv, f.wv, nullptr, f.dxv, dwv, f.p, nullptr, 0, nullptr), "rstd");
  expect_bad(tigon_rms_norm_bwd(dyv, f.xv, nullptr, f.rv, f.dxv, dwv, f.p, nullptr, 0, nullptr), "dw");
  tigon::TensorView bf16_dx(f.dx.data(), {4, 16}, tigon::dtype::bfloat16);
  expect_bad(tigon_rms_norm_bwd(dyv, f.xv, f.wv, f.rv, bf16_dx, dwv, f.p, nullptr, 0, nullptr), "dx");
  tigon::TensorView dy_rows(dy.data(), {2, 16}, tigon::dtype::float32);
  expect_bad(tigon_rms_norm_bwd(dy_rows, f.xv, f.wv, f.rv, f.dxv, dwv, f.p, nullptr, 0, nullptr), "dy");

  size_t bytes = 123;
  ASSERT_EQ(tigon_rms_norm_bwd_workspace_size(f.xv, f.wv, &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);  // the CPU path needs none
  expect_bad(tigon_rms_norm_bwd_workspace_size(f.xv, f.wv, nullptr), "bytes");
}

TEST(Api, CppLayerThrowsWithTheMessage) {
  Fixture f;
  tigon::TensorView short_w(f.w.data(), {15}, tigon::dtype::float32);
  try {
    tigon::rms_norm_fwd(f.xv, &short_w, f.yv, nullptr);
    FAIL() << "expected tigon::Error";
  } catch (const tigon::Error& e) {
    EXPECT_EQ(e.status(), TIGON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("'weight'"), std::string::npos) << e.what();
  }
}

}  // namespace
