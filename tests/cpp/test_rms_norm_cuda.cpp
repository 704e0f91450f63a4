// CUDA kernels against the CPU reference, through the same C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "test_util.h"

using namespace tigon_test;

namespace {

using Case = std::tuple<DType, DType, DType, int, int64_t, int64_t, int64_t>;  // x, w, y, mode, rows, cols, pad

class RmsNormCuda : public ::testing::TestWithParam<Case> {};
// The same cases on the uncached kernels (tigon_testing_norm_uncached), which the plan otherwise keeps for long,
// unaligned or odd rows.
class RmsNormCudaUncached : public UncachedNorms, public ::testing::WithParamInterface<Case> {};

void check_case(const Case& c) {
  const auto [xt, wt, yt, mode, rows, cols, pad] = c;
  std::mt19937 rng(99 + rows + cols);
  const float offset = mode == TIGON_RMS_NORM_GEMMA ? 1.f : 0.f;
  const tigon::RMSNormParams p{1e-5f, offset, tigon_rms_norm_casting_t(mode)};
  HostMat x(xt, rows, cols, cols + pad), w(wt, 1, cols), y(yt, rows, cols, cols + pad), dy(yt, rows, cols),
      dx(xt, rows, cols), dw(wt, 1, cols), rstd(DType::kFloat32, 1, rows);
  x.fill_random(rng, 1.5, 0.2);
  w.fill_random(rng, 0.3, 1.0);
  dy.fill_random(rng);
  y.poison();
  dx.poison();
  dw.poison();
  rstd.poison();

  // reference on the host
  HostMat ry = y, rdx = dx, rdw = dw, rr = rstd;
  {
    auto xv = x.view(), yv = ry.view(), dyv = dy.view(), dxv = rdx.view();
    tigon::TensorView wv(w.data(), {cols}, to_dl(wt)), dwv(rdw.data(), {cols}, to_dl(wt)),
        rv(rr.data(), {rows}, tigon::dtype::float32);
    tigon::rms_norm_fwd(xv, &wv, yv, &rv, p);
    tigon::rms_norm_bwd(dyv, xv, &wv, rv, dxv, &dwv, p, nullptr, 0);
  }
  // the same on the GPU
  DevMat gx(x), gw(w), gy(y), gdy(dy), gdx(dx), gdw(dw), gr(rstd);
  auto xv = gx.view(), yv = gy.view(), dyv = gdy.view(), dxv = gdx.view();
  auto wv = gw.vec_view(cols), dwv = gdw.vec_view(cols), rv = gr.vec_view(rows);
  tigon::rms_norm_fwd(xv, &wv, yv, &rv, p);
  const size_t ws_bytes = tigon::rms_norm_bwd_workspace_size(xv, &wv);
  tigon::Buffer ws(ws_bytes, tigon::cuda(0));
  tigon::rms_norm_bwd(dyv, xv, &wv, rv, dxv, &dwv, p, ws.get(), ws.size());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const double ry_tol = rtol_of(yt), rx_tol = rtol_of(xt), rw_tol = rtol_of(wt);
  EXPECT_LE(worst_ratio(gr.fetch(), rr, 0, 1e-6), 1.0);
  // One rounding step of difference at most (fp32 sums in another order flip a rounding now and then).
  EXPECT_LE(worst_ratio(gy.fetch(), ry, ry_tol * 1e-2, ry_tol), 1.0);
  EXPECT_LE(worst_ratio(gdx.fetch(), rdx, rx_tol * 0.1, rx_tol), 1.0);
  EXPECT_LE(worst_ratio(gdw.fetch(), rdw, rw_tol, rw_tol), 1.0);

  // dw is deterministic: a second backward gives the same bits.
  HostMat first_dw = gdw.fetch();
  tigon::rms_norm_bwd(dyv, xv, &wv, rv, dxv, &dwv, p, ws.get(), ws.size());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gdw.fetch(), first_dw, 0, 0), 0.0);
}

TEST_P(RmsNormCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  check_case(GetParam());
}

TEST_P(RmsNormCudaUncached, MatchesReference) {
  SKIP_WITHOUT_GPU();
  check_case(GetParam());
}

const Case kShapes[] = {// cached kernels: aligned rows
                        Case{DType::kBFloat16, DType::kBFloat16, DType::kBFloat16, TIGON_RMS_NORM_LLAMA, 64, 4096, 0},
                        Case{DType::kBFloat16, DType::kFloat32, DType::kFloat32, TIGON_RMS_NORM_LLAMA, 33, 2048, 8},
                        Case{DType::kFloat16, DType::kFloat16, DType::kFloat16, TIGON_RMS_NORM_GEMMA, 100, 1024, 0},
                        Case{DType::kBFloat16, DType::kFloat32, DType::kBFloat16, TIGON_RMS_NORM_GEMMA, 17, 128, 0},
                        Case{DType::kFloat32, DType::kFloat32, DType::kFloat32, TIGON_RMS_NORM_NONE, 9, 4096, 4},
                        Case{DType::kBFloat16, DType::kBFloat16, DType::kBFloat16, TIGON_RMS_NORM_NONE, 1000, 8, 0},
                        Case{DType::kBFloat16, DType::kBFloat16, DType::kBFloat16, TIGON_RMS_NORM_LLAMA, 3, 5120, 0},
                        // long rows: 512 threads a row, and 12296 columns leaving threads a vector short
                        Case{DType::kBFloat16, DType::kBFloat16, DType::kBFloat16, TIGON_RMS_NORM_LLAMA, 7, 16384, 0},
                        Case{DType::kFloat16, DType::kFloat32, DType::kFloat16, TIGON_RMS_NORM_GEMMA, 5, 12296, 8},
                        // uncached kernels: odd lengths, unaligned rows, rows too long to cache
                        Case{DType::kBFloat16, DType::kBFloat16, DType::kBFloat16, TIGON_RMS_NORM_LLAMA, 5, 123, 0},
                        Case{DType::kFloat32, DType::kFloat32, DType::kFloat32, TIGON_RMS_NORM_LLAMA, 3, 65537, 0},
                        Case{DType::kFloat16, DType::kFloat32, DType::kFloat16, TIGON_RMS_NORM_LLAMA, 4, 4096, 1},
                        Case{DType::kBFloat16, DType::kBFloat16, DType::kBFloat16, TIGON_RMS_NORM_GEMMA, 6, 65536, 0},
                        Case{DType::kFloat32, DType::kFloat32, DType::kFloat32, TIGON_RMS_NORM_LLAMA, 1, 1, 0}};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(short_name(std::get<0>(c))) + "_w" + short_name(std::get<1>(c)) + "_y" +
         short_name(std::get<2>(c)) + "_" + mode_name(std::get<3>(c)) + "_" + std::to_string(std::get<4>(c)) + "x" +
         std::to_string(std::get<5>(c)) + "_pad" + std::to_string(std::get<6>(c));
}
INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormCuda, ::testing::ValuesIn(kShapes), case_name);
INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormCudaUncached, ::testing::ValuesIn(kShapes), case_name);

TEST(RmsNormCudaApi, WorkspaceTooSmallIsAnError) {
  SKIP_WITHOUT_GPU();
  HostMat x(DType::kFloat32, 8, 64), w(DType::kFloat32, 1, 64), r(DType::kFloat32, 1, 8);
  DevMat gx(x), gw(w), gr(r), gdw(w);
  auto xv = gx.view(), wv = gw.vec_view(64), rv = gr.vec_view(8), dwv = gdw.vec_view(64);
  const tigon_rms_norm_params p{1e-6f, 0.f, TIGON_RMS_NORM_LLAMA};
  size_t need = 0;
  ASSERT_EQ(tigon_rms_norm_bwd_workspace_size(xv, wv, &need), TIGON_SUCCESS);
  ASSERT_GT(need, 0u);
  EXPECT_EQ(tigon_rms_norm_bwd(xv, xv, wv, rv, xv, dwv, p, nullptr, 0, nullptr), TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("'workspace'"), std::string::npos);
}

}  // namespace
