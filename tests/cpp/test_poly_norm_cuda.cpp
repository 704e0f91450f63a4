// PolyNorm on the GPU against the CPU reference through the same C API: y, rstd, dx and the parameter sums, the
// vector and scalar paths, dx over dy, and the sums' bits the same on a second run. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "test_util.h"
#include "tigon/poly_norm.h"

using namespace tigon_test;

namespace {

using Case = std::tuple<DType, int64_t, int64_t, int64_t>;  // dtype, rows, cols, row padding

class PolyNormCuda : public ::testing::TestWithParam<Case> {};

TEST_P(PolyNormCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, rows, cols, pad] = GetParam();
  std::mt19937 rng(unsigned(rows + cols));
  HostMat x(dt, rows, cols, cols + pad), y(dt, rows, cols), dy(dt, rows, cols, cols + pad), dx(dt, rows, cols);
  HostMat w(DType::kFloat32, 1, 3), b(DType::kFloat32, 1, 1), rstd(DType::kFloat32, rows, 3);
  HostMat dw(DType::kFloat32, 1, 3), db(DType::kFloat32, 1, 1);
  x.fill_random(rng);
  dy.fill_random(rng);
  w.fill_random(rng, 0.5);
  b.fill_random(rng);
  for (HostMat* m : {&y, &dx, &rstd, &dw, &db}) m->poison();
  HostMat ry = y, rdx = dx, rrs = rstd, rdw = dw, rdb = db;
  ASSERT_EQ(tigon_poly_norm_fwd(x.view(), w.view(), b.view(), ry.view(), rrs.view(), {1e-6f}, nullptr), TIGON_SUCCESS);
  ASSERT_EQ(tigon_poly_norm_bwd(dy.view(), x.view(), w.view(), rrs.view(), rdx.view(), rdw.view(), rdb.view(), nullptr,
                                0, nullptr),
            TIGON_SUCCESS);
  DevMat gx(x), gy(y), gdy(dy), gdx(dx), gw(w), gb(b), grs(rstd), gdw(dw), gdb(db);
  size_t bytes = 0;
  ASSERT_EQ(tigon_poly_norm_bwd_workspace_size(gx.view(), &bytes), TIGON_SUCCESS);
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, bytes), cudaSuccess);
  ASSERT_EQ(tigon_poly_norm_fwd(gx.view(), gw.view(), gb.view(), gy.view(), grs.view(), {1e-6f}, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  auto bwd = [&] {
    ASSERT_EQ(tigon_poly_norm_bwd(gdy.view(), gx.view(), gw.view(), grs.view(), gdx.view(), gdw.view(), gdb.view(), ws,
                                  bytes, nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
  };
  bwd();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double tol = 2 * rtol_of(dt), big = 4 * std::max<double>(1.0, max_abs(ry));
  EXPECT_LE(worst_ratio(gy.fetch(), ry, tol * big, tol), 1.0) << "y";
  EXPECT_LE(worst_ratio(grs.fetch(), rrs, 0, 1e-5), 1.0) << "rstd";
  EXPECT_LE(worst_ratio(gdx.fetch(), rdx, tol * std::max(1.0, max_abs(rdx)), tol), 1.0) << "dx";
  EXPECT_LE(worst_ratio(gdw.fetch(), rdw, 1e-4 * std::max(1.0, max_abs(rdw)), 1e-4), 1.0) << "dweight";
  EXPECT_LE(worst_ratio(gdb.fetch(), rdb, 1e-4 * std::max(1.0, max_abs(rdb)), 1e-4), 1.0) << "dbias";
  const HostMat first = gdw.fetch();
  bwd();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gdw.fetch(), first, 0, 0), 0.0) << "dweight run to run";
  cudaFree(ws);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PolyNormCuda,
                         ::testing::Values(Case{DType::kBFloat16, 4096, 4096, 0}, Case{DType::kFloat32, 33, 1001, 0},
                                           Case{DType::kFloat16, 7, 128, 8}, Case{DType::kBFloat16, 1000, 24, 0}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + "_" + std::to_string(std::get<1>(c)) + "x" +
                                  std::to_string(std::get<2>(c)) + "_pad" + std::to_string(std::get<3>(c));
                         });

}  // namespace
