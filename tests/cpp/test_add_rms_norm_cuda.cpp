// The fused residual add + RMSNorm's CUDA kernels (cached and uncached) against the CPU reference, through the same
// C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>

#include "add_rms_norm_test_util.h"
#include "cuda_test_util.h"

using namespace tigon_test;

namespace {

class AddRmsNormCuda : public ::testing::TestWithParam<AddNormCase> {};

TEST_P(AddRmsNormCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const AddNormCase c = GetParam();
  std::mt19937 rng(11 + c.rows + c.cols);
  Tensors ref(c, rng);
  Tensors gpu = ref;
  run_host(ref, c.dh);

  DevMat gx(gpu.x), gres(gpu.res), gw(gpu.w), gh(gpu.h), gy(gpu.y), gr(gpu.rstd), gdy(gpu.dy), gdh(gpu.dh), gdx(gpu.dx),
      gdw(gpu.dw);
  auto wv = gw.vec_view(c.cols), rv = gr.vec_view(c.rows), dwv = gdw.vec_view(c.cols);
  auto hv = gh.view(), dhv = gdh.view();
  tigon::add_rms_norm_fwd(gx.view(), gres.view(), &wv, gy.view(), hv, &rv, kParams);
  const size_t ws_bytes = tigon::rms_norm_bwd_workspace_size(hv, &wv);
  tigon::Buffer ws(ws_bytes, tigon::cuda(0));
  tigon::add_rms_norm_bwd(gdy.view(), c.dh ? &dhv : nullptr, hv, &wv, rv, gdx.view(), &dwv, kParams, ws.get(),
                          ws.size());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const double tol = rtol_of(c.xt);
  EXPECT_LE(worst_ratio(gh.fetch(), ref.h, 0, tol), 1.0) << "h";
  EXPECT_LE(worst_ratio(gr.fetch(), ref.rstd, 0, 1e-6), 1.0) << "rstd";
  EXPECT_LE(worst_ratio(gy.fetch(), ref.y, tol * 1e-2, tol), 1.0) << "y";
  EXPECT_LE(worst_ratio(gdx.fetch(), ref.dx, tol * 0.1, tol), 1.0) << "dx";
  EXPECT_LE(worst_ratio(gdw.fetch(), ref.dw, 1e-5, 1e-5), 1.0) << "dw";
}

// Cached kernels (aligned rows that fit, up to 12296 columns: a thread's last vector past the row's end), then the
// uncached ones (a padded row stride, an odd length, a long row).
const AddNormCase kGpuCases[] = {{DType::kBFloat16, 64, 4096, 0, true}, {DType::kFloat16, 33, 2048, 0, false},
                                 {DType::kFloat32, 9, 1024, 0, true},   {DType::kBFloat16, 7, 8192, 0, true},
                                 {DType::kFloat16, 5, 12296, 0, false}, {DType::kBFloat16, 5, 4096, 1, true},
                                 {DType::kBFloat16, 6, 123, 0, true},   {DType::kFloat32, 3, 65537, 0, true}};
INSTANTIATE_TEST_SUITE_P(Shapes, AddRmsNormCuda, ::testing::ValuesIn(kGpuCases), case_name);

}  // namespace
