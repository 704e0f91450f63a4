// GroupNorm on the GPU against the CPU reference through the same C API: y, mean, rstd, dx and the two sums (fp32 or
// the parameters' dtype); channels per warp and per thread, vector and element paths, no affine, dx over dy, and the
// sums' bits the same on a second run. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda_test_util.h"
#include "group_norm_test_util.h"
#include "test_util.h"
#include "tigon/group_norm.h"

using namespace tigon_test;

namespace {

class GroupNormCuda : public ::testing::TestWithParam<GroupNormCase> {};

TEST_P(GroupNormCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const GroupNormCase c = GetParam();
  const int64_t cols = c.c * c.s;
  std::mt19937 rng(unsigned(c.n * 17 + cols));
  HostMat x(c.dtype, c.n, cols), y(c.dtype, c.n, cols), dy(c.dtype, c.n, cols), dx(c.dtype, c.n, cols);
  HostMat w(c.param_dtype, 1, c.c), b(c.param_dtype, 1, c.c), dw(c.param_dtype, 1, c.c), db(c.param_dtype, 1, c.c);
  HostMat mean(DType::kFloat32, c.n, c.groups), rstd(DType::kFloat32, c.n, c.groups);
  x.fill_random(rng, 2.0, 3.0);
  dy.fill_random(rng);
  w.fill_random(rng, 0.5, 1.0);
  b.fill_random(rng, 0.3);
  for (HostMat* m : {&y, &dx, &dw, &db, &mean, &rstd}) m->poison();
  const auto prm = group_norm_params(c);
  HostMat ry = y, rdx = dx, rdw = dw, rdb = db, rmean = mean, rrstd = rstd;
  auto hw = w.view(), hb = b.view();
  ASSERT_EQ(
      tigon_group_norm_fwd(nchw(x.data(), c.dtype, c), c.affine ? hw.get() : nullptr, c.affine ? hb.get() : nullptr,
                           nchw(ry.data(), c.dtype, c), rmean.view(), rrstd.view(), prm, nullptr),
      TIGON_SUCCESS);
  // The reference backward from the GPU's statistics, so dx compares the backward alone.
  DevMat gx(x), gy(y), gdy(dy), gdx(dx), gw(w), gb(b), gdw(dw), gdb(db), gmean(mean), grstd(rstd);
  const tigon_device dev = tigon::cuda(0);
  auto gwv = gw.view(), gbv = gb.view();
  const tigon_tensor* gwp = c.affine ? gwv.get() : nullptr;
  ASSERT_EQ(tigon_group_norm_fwd(nchw(gx.ptr, c.dtype, c, dev), gwp, c.affine ? gbv.get() : nullptr,
                                 nchw(gy.ptr, c.dtype, c, dev), gmean.view(), grstd.view(), prm, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const HostMat got_mean = gmean.fetch(), got_rstd = grstd.fetch();
  EXPECT_LE(worst_ratio(got_mean, rmean, 1e-5, 1e-5), 1.0) << "mean";
  EXPECT_LE(worst_ratio(got_rstd, rrstd, 0, 1e-5), 1.0) << "rstd";
  const double tol = 2 * rtol_of(c.dtype);
  EXPECT_LE(worst_ratio(gy.fetch(), ry, tol * 1e-2, tol), 1.0) << "y";

  HostMat ref_mean = got_mean, ref_rstd = got_rstd;
  auto hwp = c.affine ? hw.get() : nullptr;
  ASSERT_EQ(tigon_group_norm_bwd(nchw(dy.data(), c.dtype, c), nchw(x.data(), c.dtype, c), hwp, ref_mean.view(),
                                 ref_rstd.view(), nchw(rdx.data(), c.dtype, c), rdw.view(), rdb.view(), prm, nullptr, 0,
                                 nullptr),
            TIGON_SUCCESS);
  size_t bytes = 0;
  ASSERT_EQ(tigon_group_norm_bwd_workspace_size(nchw(gx.ptr, c.dtype, c, dev), prm, &bytes), TIGON_SUCCESS);
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, bytes), cudaSuccess);
  auto run_bwd = [&] {
    ASSERT_EQ(tigon_group_norm_bwd(nchw(gdy.ptr, c.dtype, c, dev), nchw(gx.ptr, c.dtype, c, dev), gwp, gmean.view(),
                                   grstd.view(), nchw(gdx.ptr, c.dtype, c, dev), gdw.view(), gdb.view(), prm, ws, bytes,
                                   nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
  };
  run_bwd();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // dx: rstd times a difference of terms of the size of dy * w: rounding relative to that, not to dx.
  const double rs = max_abs(got_rstd);
  EXPECT_LE(worst_ratio(gdx.fetch(), rdx, tol * rs, tol), 1.0) << "dx";
  const double stol = c.param_dtype == DType::kFloat32 ? 1e-4 : 2 * rtol_of(c.param_dtype);
  const double scale = std::sqrt(double(std::max<int64_t>(c.n * c.s, 1)));
  EXPECT_LE(worst_ratio(gdw.fetch(), rdw, stol * scale, stol), 1.0) << "dweight";
  EXPECT_LE(worst_ratio(gdb.fetch(), rdb, stol * scale, stol), 1.0) << "dbias";

  const HostMat first_dw = gdw.fetch();  // deterministic sums
  run_bwd();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gdw.fetch(), first_dw, 0, 0), 0.0) << "dweight run to run";

  // dx alone (no workspace needed), over dy in place.
  ASSERT_EQ(
      tigon_group_norm_bwd(nchw(gdy.ptr, c.dtype, c, dev), nchw(gx.ptr, c.dtype, c, dev), gwp, gmean.view(),
                           grstd.view(), nchw(gdy.ptr, c.dtype, c, dev), nullptr, nullptr, prm, nullptr, 0, nullptr),
      TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LE(worst_ratio(gdy.fetch(), rdx, tol * rs, tol), 1.0) << "dx over dy";
  cudaFree(ws);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GroupNormCuda,
    ::testing::Values(GroupNormCase{DType::kBFloat16, DType::kFloat32, 4, 64, 8, 1024, true},  // warps, vectors
                      GroupNormCase{DType::kBFloat16, DType::kBFloat16, 3, 32, 4, 100, true},  // warps, elements
                      GroupNormCase{DType::kFloat16, DType::kFloat16, 5, 96, 32, 16, true},    // threads, vectors
                      GroupNormCase{DType::kBFloat16, DType::kFloat32, 7, 40, 5, 1, true},     // [N, C]: S = 1
                      GroupNormCase{DType::kFloat32, DType::kFloat32, 2, 6, 3, 4097, false},   // no affine
                      GroupNormCase{DType::kFloat32, DType::kFloat32, 2, 512, 1, 7, true},     // one group
                      GroupNormCase{DType::kBFloat16, DType::kFloat32, 0, 8, 2, 4, true}),     // no samples
    group_norm_case_name);

}  // namespace
