// LayerNorm CUDA kernels against the CPU reference, through the same C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "test_util.h"
#include "tigon/layer_norm.h"

using namespace tigon_test;

namespace {

// x dtype, param dtype, weight, bias, rows, cols, row pad (elements)
using Case = std::tuple<DType, DType, bool, bool, int64_t, int64_t, int64_t>;

class LayerNormCuda : public ::testing::TestWithParam<Case> {};
// The same cases on the uncached kernels (tigon_testing_norm_uncached), which the plan otherwise keeps for long,
// unaligned or odd rows.
class LayerNormCudaUncached : public UncachedNorms, public ::testing::WithParamInterface<Case> {};

void check_case(const Case& c) {
  const auto [xt, pt, has_w, has_b, rows, cols, pad] = c;
  std::mt19937 rng(77 + rows + cols);
  HostMat x(xt, rows, cols, cols + pad), w(pt, 1, cols), b(pt, 1, cols), y(xt, rows, cols, cols + pad),
      dy(xt, rows, cols, cols + pad), dx(xt, rows, cols), dw(pt, 1, cols), db(DType::kFloat32, 1, cols),
      mean(DType::kFloat32, 1, rows), rstd(DType::kFloat32, 1, rows);
  x.fill_random(rng, 1.5, 2.0);
  w.fill_random(rng, 0.3, 1.0);
  b.fill_random(rng, 0.3);
  dy.fill_random(rng);
  for (HostMat* m : {&y, &dx, &dw, &db, &mean, &rstd}) m->poison();
  const tigon_layer_norm_params p{1e-5f};

  // Reference on the host.
  HostMat ry = y, rdx = dx, rdw = dw, rdb = db, rm = mean, rr = rstd;
  {
    auto xv = x.view(), yv = ry.view(), dyv = dy.view(), dxv = rdx.view();
    tigon::TensorView wv(w.data(), {cols}, to_dl(pt)), bv(b.data(), {cols}, to_dl(pt)),
        dwv(rdw.data(), {cols}, to_dl(pt)), dbv(rdb.data(), {cols}, tigon::dtype::float32),
        mv(rm.data(), {rows}, tigon::dtype::float32), rv(rr.data(), {rows}, tigon::dtype::float32);
    ASSERT_EQ(tigon_layer_norm_fwd(xv, has_w ? wv.get() : nullptr, has_b ? bv.get() : nullptr, yv, mv, rv, p, nullptr),
              TIGON_SUCCESS);
    ASSERT_EQ(tigon_layer_norm_bwd(dyv, xv, has_w ? wv.get() : nullptr, mv, rv, dxv, has_w ? dwv.get() : nullptr, dbv,
                                   nullptr, 0, nullptr),
              TIGON_SUCCESS);
  }
  // The same on the GPU.
  DevMat gx(x), gw(w), gb(b), gy(y), gdy(dy), gdx(dx), gdw(dw), gdb(db), gm(mean), gr(rstd);
  auto xv = gx.view(), yv = gy.view(), dyv = gdy.view(), dxv = gdx.view();
  auto wv = gw.vec_view(cols), bv = gb.vec_view(cols), dwv = gdw.vec_view(cols), dbv = gdb.vec_view(cols),
       mv = gm.vec_view(rows), rv = gr.vec_view(rows);
  const tigon_tensor* wp = has_w ? wv.get() : nullptr;
  ASSERT_EQ(tigon_layer_norm_fwd(xv, wp, has_b ? bv.get() : nullptr, yv, mv, rv, p, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  size_t ws_bytes = 0;
  ASSERT_EQ(tigon_layer_norm_bwd_workspace_size(xv, &ws_bytes), TIGON_SUCCESS);
  tigon::Buffer ws(ws_bytes, tigon::cuda(0));
  ASSERT_EQ(
      tigon_layer_norm_bwd(dyv, xv, wp, mv, rv, dxv, has_w ? dwv.get() : nullptr, dbv, ws.get(), ws.size(), nullptr),
      TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const double tx = rtol_of(xt), tp = rtol_of(pt);
  EXPECT_LE(worst_ratio(gm.fetch(), rm, 1e-6, 1e-5), 1.0);
  EXPECT_LE(worst_ratio(gr.fetch(), rr, 0, 1e-5), 1.0);
  EXPECT_LE(worst_ratio(gy.fetch(), ry, tx, tx), 1.0);
  EXPECT_LE(worst_ratio(gdx.fetch(), rdx, tx, tx), 1.0);
  if (has_w) EXPECT_LE(worst_ratio(gdw.fetch(), rdw, tp, tp), 1.0);
  EXPECT_LE(worst_ratio(gdb.fetch(), rdb, 1e-3, 1e-4), 1.0);

  // dw and db are deterministic: a second backward gives the same bits.
  HostMat first_dw = gdw.fetch(), first_db = gdb.fetch();
  ASSERT_EQ(
      tigon_layer_norm_bwd(dyv, xv, wp, mv, rv, dxv, has_w ? dwv.get() : nullptr, dbv, ws.get(), ws.size(), nullptr),
      TIGON_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gdw.fetch(), first_dw, 0, 0), 0.0);
  EXPECT_EQ(worst_ratio(gdb.fetch(), first_db, 0, 0), 0.0);
}

TEST_P(LayerNormCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  check_case(GetParam());
}

TEST_P(LayerNormCudaUncached, MatchesReference) {
  SKIP_WITHOUT_GPU();
  check_case(GetParam());
}

// Which kernel each case reaches with the library's plan (forward 4 vectors per thread, backward 2 vectors of each of
// 2 rows, or 4 of one row).
const Case kShapes[] = {
    // cached kernels, one row per block (forward 128-512 threads a row, 12296 columns leaving the last threads part
    // of a vector's stride; backward 256-512)
    Case{DType::kFloat16, DType::kFloat32, true, true, 5, 12296, 0},
    Case{DType::kBFloat16, DType::kBFloat16, true, true, 64, 4096, 0},
    Case{DType::kBFloat16, DType::kFloat32, true, true, 1, 4096, 0},
    Case{DType::kFloat32, DType::kFloat32, true, true, 9, 4096, 4},
    Case{DType::kFloat32, DType::kFloat32, false, false, 257, 4096, 0},
    Case{DType::kBFloat16, DType::kBFloat16, true, true, 40, 8192, 0},
    Case{DType::kFloat16, DType::kFloat32, true, false, 3, 8192, 0},
    // cached, several warps a row and two row slots a block (forward 64 threads a row); aligned strided rows
    Case{DType::kBFloat16, DType::kFloat32, true, true, 33, 2048, 8},
    Case{DType::kBFloat16, DType::kBFloat16, true, false, 3, 2048, 8},
    // cached, short rows: a warp or less a row, several rows a block; 1000 leaves padding vectors (125 of 128)
    Case{DType::kFloat16, DType::kFloat16, false, true, 100, 1024, 0},
    Case{DType::kFloat16, DType::kFloat32, true, false, 17, 128, 0},
    Case{DType::kBFloat16, DType::kBFloat16, true, true, 1000, 8, 0},
    Case{DType::kBFloat16, DType::kBFloat16, true, true, 257, 1000, 0},
    Case{DType::kFloat32, DType::kFloat32, true, true, 3, 1000, 0},
    Case{DType::kBFloat16, DType::kBFloat16, false, false, 3, 5120, 0},
    // forward cached; backward cached with 4 vectors of one row per thread (too long for 2 vectors x 2 rows)
    Case{DType::kBFloat16, DType::kFloat32, true, true, 12, 16384, 0},
    Case{DType::kFloat32, DType::kFloat32, true, true, 3, 8192, 0},
    // forward cached at its longest (1024 threads); backward uncached
    Case{DType::kBFloat16, DType::kBFloat16, true, true, 4, 32768, 0},
    // uncached kernels: odd lengths, unaligned rows, rows too long to cache
    Case{DType::kBFloat16, DType::kBFloat16, true, true, 5, 123, 0},
    Case{DType::kFloat16, DType::kFloat32, true, true, 3, 65, 0},
    Case{DType::kBFloat16, DType::kFloat32, false, true, 257, 65, 0},
    Case{DType::kFloat32, DType::kFloat32, true, true, 3, 65537, 0},
    Case{DType::kFloat16, DType::kFloat32, true, true, 4, 4096, 1},
    Case{DType::kBFloat16, DType::kBFloat16, true, false, 6, 65536, 0},
    Case{DType::kFloat32, DType::kFloat32, true, true, 1, 1, 0},
    Case{DType::kBFloat16, DType::kBFloat16, true, true, 257, 1, 0}};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(short_name(std::get<0>(c))) + "_p" + short_name(std::get<1>(c)) + (std::get<2>(c) ? "_w" : "") +
         (std::get<3>(c) ? "_b" : "") + "_" + std::to_string(std::get<4>(c)) + "x" + std::to_string(std::get<5>(c)) +
         "_pad" + std::to_string(std::get<6>(c));
}
INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormCuda, ::testing::ValuesIn(kShapes), case_name);
INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormCudaUncached, ::testing::ValuesIn(kShapes), case_name);

TEST(LayerNormCudaApi, WorkspaceTooSmallIsAnError) {
  SKIP_WITHOUT_GPU();
  HostMat x(DType::kFloat32, 8, 64), w(DType::kFloat32, 1, 64), s(DType::kFloat32, 1, 8);
  DevMat gx(x), gw(w), gm(s), gr(s), gdb(w);
  auto xv = gx.view(), wv = gw.vec_view(64), mv = gm.vec_view(8), rv = gr.vec_view(8), dbv = gdb.vec_view(64);
  size_t need = 0;
  ASSERT_EQ(tigon_layer_norm_bwd_workspace_size(xv, &need), TIGON_SUCCESS);
  ASSERT_GT(need, 0u);
  EXPECT_EQ(tigon_layer_norm_bwd(xv, xv, wv, mv, rv, xv, nullptr, dbv, nullptr, 0, nullptr),
            TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("'workspace'"), std::string::npos);
}

}  // namespace
