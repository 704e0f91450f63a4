// DyT on the GPU against the CPU reference through the same C API: y, dx and the three sums (fp32 or the
// parameters' dtype), vector and scalar paths, in place, no beta, gradients one at a time, and the sums' bits the same
// on a second run. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "dyt_test_util.h"
#include "test_util.h"
#include "tigon/dyt.h"

using namespace tigon_test;

namespace {

using Case = DytCase;

class DytCuda : public ::testing::TestWithParam<Case> {};

TEST_P(DytCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, pdt, rows, cols, pad, has_beta] = GetParam();
  std::mt19937 rng(unsigned(rows * 3 + cols));
  HostMat x(dt, rows, cols, cols + pad), y(dt, rows, cols), dy(dt, rows, cols, cols + pad), dx(dt, rows, cols);
  HostMat alpha(DType::kFloat32, 1, 1), gamma(pdt, 1, cols), beta(pdt, 1, cols), dalpha(DType::kFloat32, 1, 1);
  HostMat dgamma(pdt, 1, cols), dbeta(pdt, 1, cols);
  x.fill_random(rng, 2.0);
  dy.fill_random(rng);
  gamma.fill_random(rng, 0.5, 1.0);
  beta.fill_random(rng, 0.3);
  alpha.fill_random(rng, 0.1, 0.7);
  for (HostMat* m : {&y, &dx, &dalpha, &dgamma, &dbeta}) m->poison();
  HostMat ry = y, rdx = dx, rda = dalpha, rdg = dgamma, rdb = dbeta;
  auto hb = beta.view();
  ASSERT_EQ(tigon_dyt_fwd(x.view(), alpha.view(), gamma.view(), has_beta ? hb.get() : nullptr, ry.view(), nullptr),
            TIGON_SUCCESS);
  ASSERT_EQ(tigon_dyt_bwd(dy.view(), x.view(), alpha.view(), gamma.view(), rdx.view(), rda.view(), rdg.view(),
                          rdb.view(), nullptr, 0, nullptr),
            TIGON_SUCCESS);

  DevMat gx(x), gy(y), gdy(dy), gdx(dx), ga(alpha), gg(gamma), gb(beta), gda(dalpha), gdg(dgamma), gdb(dbeta);
  size_t bytes = 0;
  ASSERT_EQ(tigon_dyt_bwd_workspace_size(gx.view(), &bytes), TIGON_SUCCESS);
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, bytes), cudaSuccess);
  auto gbv = gb.view();
  ASSERT_EQ(tigon_dyt_fwd(gx.view(), ga.view(), gg.view(), has_beta ? gbv.get() : nullptr, gy.view(), nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  auto run_bwd = [&] {
    ASSERT_EQ(tigon_dyt_bwd(gdy.view(), gx.view(), ga.view(), gg.view(), gdx.view(), gda.view(), gdg.view(), gdb.view(),
                            ws, bytes, nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
  };
  run_bwd();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double tol = 2 * rtol_of(dt);
  EXPECT_LE(worst_ratio(gy.fetch(), ry, tol * 1e-2, tol), 1.0) << "y";
  EXPECT_LE(worst_ratio(gdx.fetch(), rdx, tol * 1e-2, tol), 1.0) << "dx";
  // Sums over rows: fp32 in another order; the parameters' dtype adds a rounding.
  const double stol = pdt == DType::kFloat32 ? 1e-4 : 2 * rtol_of(pdt);
  const double scale = std::sqrt(double(std::max<int64_t>(rows, 1)));
  EXPECT_LE(worst_ratio(gdg.fetch(), rdg, stol * scale, stol), 1.0) << "dgamma";
  EXPECT_LE(worst_ratio(gdb.fetch(), rdb, stol * scale, stol), 1.0) << "dbeta";
  EXPECT_LE(worst_ratio(gda.fetch(), rda, 1e-4 * scale * std::sqrt(double(cols)), 1e-4), 1.0) << "dalpha";

  const HostMat first_dg = gdg.fetch(), first_da = gda.fetch();  // deterministic sums
  run_bwd();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gdg.fetch(), first_dg, 0, 0), 0.0) << "dgamma run to run";
  EXPECT_EQ(worst_ratio(gda.fetch(), first_da, 0, 0), 0.0) << "dalpha run to run";

  // dx alone (no workspace needed), over dy in place.
  ASSERT_EQ(tigon_dyt_bwd(gdy.view(), gx.view(), ga.view(), gg.view(), gdy.view(), nullptr, nullptr, nullptr, nullptr,
                          0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LE(worst_ratio(gdy.fetch(), rdx, tol * 1e-2, tol), 1.0) << "dx over dy";
  cudaFree(ws);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DytCuda,
                         ::testing::Values(Case{DType::kBFloat16, DType::kFloat32, 64, 4096, 0, true},
                                           Case{DType::kBFloat16, DType::kBFloat16, 5000, 256, 0, true},
                                           Case{DType::kFloat16, DType::kFloat16, 33, 100, 3, false},
                                           Case{DType::kFloat32, DType::kFloat32, 17, 1001, 0, true},
                                           Case{DType::kBFloat16, DType::kFloat32, 0, 64, 0, true}),
                         dyt_case_name);

}  // namespace
