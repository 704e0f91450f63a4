// SwiGLU / GeGLU CUDA kernels against the CPU reference, through the same C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "test_util.h"
#include "tigon/swiglu.h"

using namespace tigon_test;

namespace {

// The same columns of a host matrix as a CPU view.
tigon::TensorView host_cols(HostMat& m, int64_t first, int64_t cols) {
  return tigon::TensorView(static_cast<char*>(m.data()) + first * tigon::dtype_bytes(m.dtype), {m.rows, cols},
                           to_dl(m.dtype), tigon::cpu(), {m.stride, 1});
}

// A rounding or two apart: the kernels' fp32 library functions against the fp64 reference. atol = rtol because the
// derivatives are differences of unit-sized terms (gelu-tanh's 1 - tanh^2): measured on the H200, fp32 tanh 'da'
// reached 1.18x an atol of rtol/10.
void expect_close(const HostMat& got, const HostMat& ref, const char* what) {
  const double tol = rtol_of(got.dtype);
  EXPECT_LE(worst_ratio(got, ref, tol, tol), 1.0) << what;
}

using Case = std::tuple<DType, int, int64_t, int64_t, int64_t>;  // dtype, activation, rows, cols, row padding

class SwigluCuda : public ::testing::TestWithParam<Case> {};

TEST_P(SwigluCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, act, rows, cols, pad] = GetParam();
  std::mt19937 rng(7 + rows + cols + act);
  HostMat a(dt, rows, cols, cols + pad), b(dt, rows, cols, cols + 2 * pad), dc(dt, rows, cols, cols + pad),
      c(dt, rows, cols, cols + pad), da(dt, rows, cols), db(dt, rows, cols, cols + pad);
  a.fill_random(rng, 3.0);
  b.fill_random(rng);
  dc.fill_random(rng);
  c.poison();
  da.poison();
  db.poison();
  const tigon_swiglu_params p{act};
  HostMat rc = c, rda = da, rdb = db;
  ASSERT_EQ(tigon_swiglu_fwd(a.view(), b.view(), rc.view(), p, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(tigon_swiglu_bwd(dc.view(), a.view(), b.view(), rda.view(), rdb.view(), p, nullptr), TIGON_SUCCESS);

  DevMat ga(a), gb(b), gdc(dc), gc(c), gda(da), gdb(db);
  ASSERT_EQ(tigon_swiglu_fwd(ga.view(), gb.view(), gc.view(), p, nullptr), TIGON_SUCCESS) << tigon_last_error();
  ASSERT_EQ(tigon_swiglu_bwd(gdc.view(), ga.view(), gb.view(), gda.view(), gdb.view(), p, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close(gc.fetch(), rc, "c");
  expect_close(gda.fetch(), rda, "da");
  expect_close(gdb.fetch(), rdb, "db");

  // In place: da over a, db over b, then c over a (the forward's exact alias) gives the same values.
  ASSERT_EQ(tigon_swiglu_bwd(gdc.view(), ga.view(), gb.view(), ga.view(), gb.view(), p, nullptr), TIGON_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(ga.fetch(), gda.fetch(), 0, 0), 0.0) << "da written over a";
  EXPECT_EQ(worst_ratio(gb.fetch(), gdb.fetch(), 0, 0), 0.0) << "db written over b";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SwigluCuda,
    ::testing::Values(
        // 16-byte vectors: aligned rows, with and without padding
        Case{DType::kBFloat16, TIGON_GLU_SILU, 64, 4096, 0}, Case{DType::kBFloat16, TIGON_GLU_GELU_TANH, 33, 2048, 8},
        Case{DType::kBFloat16, TIGON_GLU_GELU_ERF, 17, 1024, 16}, Case{DType::kFloat16, TIGON_GLU_SILU, 100, 512, 0},
        Case{DType::kFloat16, TIGON_GLU_GELU_TANH, 9, 14336, 0}, Case{DType::kFloat16, TIGON_GLU_GELU_ERF, 5, 8, 8},
        Case{DType::kFloat32, TIGON_GLU_SILU, 1000, 4, 0}, Case{DType::kFloat32, TIGON_GLU_GELU_TANH, 7, 3000, 4},
        Case{DType::kFloat32, TIGON_GLU_GELU_ERF, 3, 65536, 0},
        // one element per thread: odd lengths, unaligned row strides, tiny rows
        Case{DType::kBFloat16, TIGON_GLU_SILU, 3, 1001, 0}, Case{DType::kBFloat16, TIGON_GLU_GELU_TANH, 35, 33, 0},
        Case{DType::kBFloat16, TIGON_GLU_GELU_ERF, 6, 4096, 1}, Case{DType::kFloat16, TIGON_GLU_SILU, 1, 1, 0},
        Case{DType::kFloat16, TIGON_GLU_GELU_TANH, 4, 100, 3}, Case{DType::kFloat32, TIGON_GLU_GELU_ERF, 2, 7, 5},
        Case{DType::kFloat32, TIGON_GLU_SILU, 1, 1, 0},
        // more rows than the grid's y dimension covers (65535 blocks x 256 rows of one element): the row loop
        Case{DType::kFloat16, TIGON_GLU_SILU, 65535 * 256 + 77, 1, 0}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      const int act = std::get<1>(c);
      return std::string(short_name(std::get<0>(c))) + "_" +
             (act == 0   ? "silu"
              : act == 1 ? "tanh"
                         : "erf") +
             "_" + std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_pad" +
             std::to_string(std::get<4>(c));
    });

// Falcon-H1's multipliers, every dtype and activation, vector (4096) and scalar (1001) rows.
TEST(SwigluCudaMultipliers, MatchReference) {
  SKIP_WITHOUT_GPU();
  for (const DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32})
    for (int act = 0; act < 3; ++act)
      for (const int64_t cols : {int64_t(4096), int64_t(1001)}) {
        const int64_t rows = 5;
        std::mt19937 rng(3 + act + cols);
        HostMat a(dt, rows, cols), b(dt, rows, cols), dc(dt, rows, cols), c(dt, rows, cols), da(dt, rows, cols),
            db(dt, rows, cols);
        a.fill_random(rng, 3.0);
        b.fill_random(rng);
        dc.fill_random(rng);
        const tigon_swiglu_params p{act, 0.75f, 1.625f};
        HostMat rc = c, rda = da, rdb = db;
        ASSERT_EQ(tigon_swiglu_fwd(a.view(), b.view(), rc.view(), p, nullptr), TIGON_SUCCESS);
        ASSERT_EQ(tigon_swiglu_bwd(dc.view(), a.view(), b.view(), rda.view(), rdb.view(), p, nullptr), TIGON_SUCCESS);
        DevMat ga(a), gb(b), gdc(dc), gc(c), gda(da), gdb(db);
        ASSERT_EQ(tigon_swiglu_fwd(ga.view(), gb.view(), gc.view(), p, nullptr), TIGON_SUCCESS) << tigon_last_error();
        ASSERT_EQ(tigon_swiglu_bwd(gdc.view(), ga.view(), gb.view(), gda.view(), gdb.view(), p, nullptr),
                  TIGON_SUCCESS);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::string where =
            std::string(short_name(dt)) + " act=" + std::to_string(act) + " cols=" + std::to_string(cols);
        expect_close(gc.fetch(), rc, ("c " + where).c_str());
        expect_close(gda.fetch(), rda, ("da " + where).c_str());
        expect_close(gdb.fetch(), rdb, ("db " + where).c_str());
      }
}

// a and b as the two halves of one [rows, 2I] gate_up buffer (Phi-3's fused projection), vector and scalar paths.
TEST(SwigluCudaFused, HalvesOfGateUpMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const int64_t I : {int64_t(4096), int64_t(1001), int64_t(8)}) {
    for (int act = 0; act < 3; ++act) {
      const int64_t rows = 13;
      std::mt19937 rng(I + act);
      HostMat gu(DType::kBFloat16, rows, 2 * I), dc(DType::kBFloat16, rows, I), c(DType::kBFloat16, rows, I),
          dgu(DType::kBFloat16, rows, 2 * I);
      gu.fill_random(rng, 2.0);
      dc.fill_random(rng);
      c.poison();
      dgu.poison();
      const tigon_swiglu_params p{act};
      HostMat rc = c, rdgu = dgu;
      ASSERT_EQ(tigon_swiglu_fwd(host_cols(gu, 0, I), host_cols(gu, I, I), rc.view(), p, nullptr), TIGON_SUCCESS);
      ASSERT_EQ(tigon_swiglu_bwd(dc.view(), host_cols(gu, 0, I), host_cols(gu, I, I), host_cols(rdgu, 0, I),
                                 host_cols(rdgu, I, I), p, nullptr),
                TIGON_SUCCESS);
      DevMat g(gu), gdc(dc), gc(c), gd(dgu);
      ASSERT_EQ(tigon_swiglu_fwd(g.cols_view(0, I), g.cols_view(I, I), gc.view(), p, nullptr), TIGON_SUCCESS);
      ASSERT_EQ(tigon_swiglu_bwd(gdc.view(), g.cols_view(0, I), g.cols_view(I, I), gd.cols_view(0, I),
                                 gd.cols_view(I, I), p, nullptr),
                TIGON_SUCCESS);
      // in place over gate_up itself
      ASSERT_EQ(tigon_swiglu_bwd(gdc.view(), g.cols_view(0, I), g.cols_view(I, I), g.cols_view(0, I), g.cols_view(I, I),
                                 p, nullptr),
                TIGON_SUCCESS);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::string where = "I=" + std::to_string(I) + " act=" + std::to_string(act);
      expect_close(gc.fetch(), rc, ("c " + where).c_str());
      expect_close(gd.fetch(), rdgu, ("dgate_up " + where).c_str());
      EXPECT_EQ(worst_ratio(g.fetch(), gd.fetch(), 0, 0), 0.0) << "in place " << where;
    }
  }
}

}  // namespace
