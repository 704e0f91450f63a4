// Linear + activation on the GPU (cuBLASLt epilogues, the two-pass path, the dZ kernel with the bias column sums)
// against the CPU reference, through the same C API.
// Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "linear_act_test_util.h"
#include "test_util.h"
#include "tigon/linear_act.h"

using namespace tigon_test;

namespace {

// The GEMM's fp32 sums in another order than the reference's fp64 ones, and act applied to the fp32 z (epilogue)
// rather than the rounded one: a rounding or two of the output, relative to the largest value (atol scaled). The
// fp32 weight and bias gradients sum dZ, which both sides round to the inputs' dtype from their own z: where the two
// z differ by a rounding, dZ does too, so those sums are held to the inputs' dtype (`rounding`), not to fp32's.
void expect_close(const HostMat& got, const HostMat& ref, const char* what, DType rounding) {
  const double tol = 2 * rtol_of(rounding);
  const double atol = tol * std::max(1.0, max_abs(ref));
  if (worst_ratio(got, ref, atol, tol) <= 1.0) return;
  // Where it fails, and how widely: the worst element and the count past the tolerance.
  int64_t wr = 0, wc = 0, bad = 0;
  double worst = -1;
  for (int64_t r = 0; r < ref.rows; ++r)
    for (int64_t c = 0; c < ref.cols; ++c) {
      const double e = std::fabs(got.at(r, c) - ref.at(r, c)) / (atol + tol * std::fabs(ref.at(r, c)));
      bad += e > 1.0;
      if (e > worst) worst = e, wr = r, wc = c;
    }
  ADD_FAILURE() << what << ": worst " << worst << "x the tolerance at [" << wr << ", " << wc << "] (got "
                << got.at(wr, wc) << ", want " << ref.at(wr, wc) << "); " << bad << " of " << ref.rows * ref.cols
                << " elements past it";
}

// Device copies of every matrix of a problem; views of them by host matrix.
struct DeviceCopies {
  std::map<const HostMat*, std::unique_ptr<DevMat>> dev;
  explicit DeviceCopies(LinearActProblem& p) {
    for (HostMat* m : {&p.x, &p.w, &p.b, &p.res, &p.out, &p.z, &p.dy, &p.dz, &p.dx, &p.dw, &p.db})
      dev[m] = std::make_unique<DevMat>(*m);
  }
  DevMat& operator[](const HostMat& m) { return *dev.at(&m); }
};

struct Workspaces {
  void* fwd = nullptr;
  void* bwd = nullptr;
  size_t fwd_bytes = 0, bwd_bytes = 0;
  Workspaces(DeviceCopies& d, LinearActProblem& p) {
    auto xv = d[p.x].view(), wv = d[p.w].view();
    EXPECT_EQ(tigon_linear_act_fwd_workspace_size(xv, wv, p.params(), &fwd_bytes), TIGON_SUCCESS);
    EXPECT_EQ(tigon_linear_act_bwd_workspace_size(xv, wv, p.params(), &bwd_bytes), TIGON_SUCCESS);
    EXPECT_EQ(cudaMalloc(&fwd, fwd_bytes), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&bwd, bwd_bytes), cudaSuccess);
  }
  ~Workspaces() {
    cudaFree(fwd);
    cudaFree(bwd);
  }
};

class LinearActCuda : public ::testing::TestWithParam<LinearActCase> {};

TEST_P(LinearActCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  LinearActProblem ref(GetParam()), gpu(GetParam());
  run_linear_act(ref, [](HostMat& m) { return m.view(); }, nullptr, 0, nullptr, 0);
  if (HasFatalFailure()) return;
  DeviceCopies d(gpu);
  Workspaces ws(d, gpu);
  run_linear_act(gpu, [&](HostMat& m) { return d[m].view(); }, ws.fwd, ws.fwd_bytes, ws.bwd, ws.bwd_bytes);
  if (HasFatalFailure()) return;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close(d[gpu.out].fetch(), ref.out, "out", gpu.c.dt);
  if (gpu.wants_z()) expect_close(d[gpu.z].fetch(), ref.z, "z", gpu.c.dt);
  expect_close(d[gpu.dx].fetch(), ref.dx, "dx", gpu.c.dt);
  expect_close(d[gpu.dw].fetch(), ref.dw, "dw", gpu.c.dt);
  if (gpu.c.bias) expect_close(d[gpu.db].fetch(), ref.db, "db", gpu.c.dt);

  // Inference (no z): the fused epilogues without aux, or the two-pass path through out; the same output.
  HostMat out2 = ref.out;
  out2.poison();
  DevMat o2(out2);
  auto bv = d[gpu.b].view(), rv = d[gpu.res].view();
  ASSERT_EQ(tigon_linear_act_fwd(d[gpu.x].view(), d[gpu.w].view(), gpu.c.bias ? bv.get() : nullptr,
                                 gpu.c.residual ? rv.get() : nullptr, o2.view(), nullptr, gpu.params(), ws.fwd,
                                 ws.fwd_bytes, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close(o2.fetch(), ref.out, "out without z", gpu.c.dt);

  // The bias gradient is deterministic: a second backward gives the same bits.
  if (gpu.c.bias) {
    HostMat db_first = d[gpu.db].fetch();
    run_linear_act(gpu, [&](HostMat& m) { return d[m].view(); }, ws.fwd, ws.fwd_bytes, ws.bwd, ws.bwd_bytes);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(worst_ratio(d[gpu.db].fetch(), db_first, 0, 0), 0.0) << "db run to run";
  }
}

std::vector<LinearActCase> cuda_cases() {
  std::vector<LinearActCase> cases;
  for (int act = TIGON_ACT_NONE; act <= TIGON_ACT_SILU; ++act) {
    cases.push_back({DType::kBFloat16, act, 128, 256, 512, true, false, 0});  // aligned: the epilogues with aux
    cases.push_back({DType::kBFloat16, act, 64, 128, 256, true, true, 8});    // residual, padded rows
    cases.push_back({DType::kFloat16, act, 33, 72, 40, false, false, 0});
    cases.push_back({DType::kFloat32, act, 17, 64, 96, true, true, 0});
    cases.push_back({DType::kBFloat16, act, 3, 33, 17, true, false, 1});  // K, N not multiples of 8: unaligned GEMMs
    cases.push_back({DType::kBFloat16, act, 1, 64, 1000, true, false, 0});
  }
  // Larger products with partial tiles at both edges, padded rows of x, and no bias
  for (int act : {TIGON_ACT_GELU_ERF, TIGON_ACT_SILU}) {
    cases.push_back({DType::kBFloat16, act, 1000, 72, 8200, true, false, 8});
    cases.push_back({DType::kFloat16, act, 300, 64, 520, false, false, 0});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearActCuda, ::testing::ValuesIn(cuda_cases()),
                         [](const ::testing::TestParamInfo<LinearActCase>& info) { return case_name(info.param); });

// ReLU's backward from its output on the GPU equals the one from z.
TEST(LinearActCudaRelu, BackwardFromTheOutput) {
  SKIP_WITHOUT_GPU();
  LinearActProblem p({DType::kBFloat16, TIGON_ACT_RELU, 64, 128, 256, true, false, 0});
  DeviceCopies d(p);
  Workspaces ws(d, p);
  run_linear_act(p, [&](HostMat& m) { return d[m].view(); }, ws.fwd, ws.fwd_bytes, ws.bwd, ws.bwd_bytes);
  HostMat dx2 = p.dx, dw2 = p.dw, db2 = p.db, dz2 = p.dz;
  DevMat gdx(dx2), gdw(dw2), gdb(db2), gdz(dz2);
  ASSERT_EQ(tigon_linear_act_bwd(d[p.dy].view(), d[p.x].view(), d[p.w].view(), nullptr, d[p.out].view(), gdz.view(),
                                 gdx.view(), gdw.view(), gdb.view(), p.params(), ws.bwd, ws.bwd_bytes, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gdx.fetch(), d[p.dx].fetch(), 0, 0), 0.0);
  EXPECT_EQ(worst_ratio(gdw.fetch(), d[p.dw].fetch(), 0, 0), 0.0);
  EXPECT_EQ(worst_ratio(gdb.fetch(), d[p.db].fetch(), 0, 0), 0.0);
}

}  // namespace
