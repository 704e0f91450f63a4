// Fused linear + cross entropy on the GPU (cuBLASLt GEMMs, chunks, in-place gradient) against the CPU reference,
// through the same C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "test_util.h"
#include "tigon/fused_linear_cross_entropy.h"

using namespace tigon_test;

namespace {

using Params = tigon_fused_linear_cross_entropy_params;

struct Opts {
  int reduction;
  int64_t chunk_rows;
  bool bias, class_weight, per_token_go, narrow;
  float smoothing, z_scale, softcap;
};

// dtype, N, H, V, row pad of x, options
using Case = std::tuple<DType, int64_t, int64_t, int64_t, int64_t, Opts>;

// The inputs and outputs of one call, on the host; run() calls the op on copies on `dev`.
struct Problem {
  DType dt;
  int64_t N, H, V;
  Opts o;
  HostMat x, w, b, t, cw, go, loss, dx, dw, db;
  Problem(DType d, int64_t n, int64_t h, int64_t v, int64_t pad, const Opts& opts)
      : dt(d),
        N(n),
        H(h),
        V(v),
        o(opts),
        x(d, n, h, h + pad),
        w(d, v, h),
        b(d, 1, v),
        t(DType::kInt64, 1, n),
        cw(DType::kFloat32, 1, v),
        go(DType::kFloat32, 1, n),
        loss(DType::kFloat32, 1, opts.reduction ? 1 : n),
        dx(d, n, h),
        dw(DType::kFloat32, v, h),
        db(DType::kFloat32, 1, v) {
    std::mt19937 rng(unsigned(n * 7 + h + v));
    x.fill_random(rng);
    w.fill_random(rng, 2.0 / std::sqrt(double(h)));
    b.fill_random(rng, 0.5);
    cw.fill_random(rng, 0.2, 1.0);
    go.fill_random(rng, 0.5, 1.0);
    for (int64_t i = 0; i < n; ++i) t.set(0, i, i % 7 == 3 ? -100 : double(rng() % uint32_t(v)));
    loss.poison();
    dx.poison();
    dw.poison();
    db.poison();
  }

  Params params() const {
    Params p{};
    p.ce = {-100, o.smoothing, o.z_scale, o.softcap, o.reduction};
    p.chunk_rows = o.chunk_rows;
    p.narrow_dw = o.narrow ? 1 : 0;
    return p;
  }

  void run(bool gpu) {
    const tigon_device dev = gpu ? tigon::cuda(0) : tigon::cpu();
    HostMat* mats[] = {&x, &w, &b, &t, &cw, &go, &loss, &dx, &dw, &db};
    std::vector<std::unique_ptr<DevMat>> d;
    std::vector<void*> ptr;
    for (HostMat* m : mats) {
      if (gpu) d.push_back(std::make_unique<DevMat>(*m));
      ptr.push_back(gpu ? d.back()->ptr : m->data());
    }
    auto vec = [&](int i, int64_t n) { return tigon::TensorView(ptr[i], {n}, to_dl(mats[i]->dtype), dev); };
    auto xv = x.view(dev, ptr[0]), wv = w.view(dev, ptr[1]), dxv = dx.view(dev, ptr[7]);
    auto bv = vec(2, V), tv = vec(3, N), cwv = vec(4, V), gov = vec(5, N), lv = vec(6, loss.cols), dbv = vec(9, V);
    tigon::TensorView dwv(ptr[8], {V, H}, tigon::dtype::float32, dev);
    size_t bytes = 0;
    ASSERT_EQ(tigon_fused_linear_cross_entropy_workspace_size(xv, wv, params(), &bytes, nullptr), TIGON_SUCCESS);
    tigon::Buffer ws(bytes, dev);
    ASSERT_EQ(tigon_fused_linear_cross_entropy_fwd(
                  xv, wv, o.bias ? bv.get() : nullptr, tv, o.class_weight ? cwv.get() : nullptr,
                  o.per_token_go ? gov.get() : nullptr, lv, nullptr, nullptr, nullptr, dxv, dwv,
                  o.bias ? dbv.get() : nullptr, params(), ws.get(), ws.size(), nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
    if (!gpu) return;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int i : {6, 7, 8, 9}) *mats[i] = d[size_t(i)]->fetch();
  }
};

std::string case_name(const Case& c) {
  const auto& [dt, N, H, V, pad, o] = c;
  return std::string(short_name(dt)) + "_" + std::to_string(N) + "x" + std::to_string(H) + "x" + std::to_string(V) +
         "_pad" + std::to_string(pad) + "_red" + std::to_string(o.reduction) + "_chunk" + std::to_string(o.chunk_rows) +
         (o.bias ? "_bias" : "") + (o.class_weight ? "_cw" : "") + (o.per_token_go ? "_go" : "") +
         (o.narrow ? "_narrow" : "");
}

class FusedLinearCrossEntropyCuda : public ::testing::TestWithParam<Case> {};

TEST_P(FusedLinearCrossEntropyCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, N, H, V, pad, o] = GetParam();
  Problem gpu(dt, N, H, V, pad, o), ref(dt, N, H, V, pad, o);
  ref.run(false);
  gpu.run(true);

  // The logits are rounded to the dtype on both sides from fp32 (GPU) or fp64 (CPU) sums: a unit in the last place
  // apart now and then, which moves the gradients by about that much.
  const double rt = 2 * rtol_of(dt);
  for (int64_t i = 0; i < ref.loss.cols; ++i)
    EXPECT_NEAR(gpu.loss.at(0, i), ref.loss.at(0, i), rt * (1 + std::fabs(ref.loss.at(0, i)))) << "loss " << i;
  EXPECT_LE(worst_ratio(gpu.dx, ref.dx, rt * max_abs(ref.dx), rt), 1.0) << "dx";
  if (o.bias) EXPECT_LE(worst_ratio(gpu.db, ref.db, rt * max_abs(ref.db), rt), 1.0) << "db";
  if (!o.narrow || dt == DType::kFloat32) {
    EXPECT_LE(worst_ratio(gpu.dw, ref.dw, rt * max_abs(ref.dw), rt), 1.0) << "dw";
    return;
  }
  HostMat g16(dt, V, H), r16(dt, V, H);  // narrowed: dW in the dtype at the front of the fp32 buffer
  std::memcpy(g16.data(), gpu.dw.data(), size_t(V * H * 2));
  std::memcpy(r16.data(), ref.dw.data(), size_t(V * H * 2));
  EXPECT_LE(worst_ratio(g16, r16, rt * max_abs(r16), rt), 1.0) << "dw narrowed";
}

constexpr int kNone = TIGON_REDUCTION_NONE, kMean = TIGON_REDUCTION_MEAN, kSum = TIGON_REDUCTION_SUM;

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedLinearCrossEntropyCuda,
    ::testing::Values(
        // reduction, chunk rows, bias, class weight, per-token grad_output, narrow, smoothing, z, softcap
        Case{DType::kBFloat16, 257, 128, 32003, 0, Opts{kMean, 0, true, true, false, false, 0.1f, 1e-4f, 0.f}},
        Case{DType::kBFloat16, 257, 128, 32003, 0, Opts{kMean, 50, true, false, false, true, 0.f, 0.f, 0.f}},
        Case{DType::kFloat16, 64, 64, 5003, 8, Opts{kSum, 10, false, false, false, true, 0.f, 0.f, 20.f}},
        Case{DType::kFloat32, 33, 64, 1001, 0, Opts{kNone, 7, true, true, true, false, 0.2f, 1e-3f, 0.f}},
        Case{DType::kBFloat16, 1, 128, 32003, 0, Opts{kNone, 0, false, false, true, false, 0.f, 0.f, 0.f}},
        Case{DType::kBFloat16, 300, 256, 4096, 16, Opts{kMean, 128, true, true, false, true, 0.1f, 0.f, 30.f}},
        Case{DType::kFloat16, 16, 4096, 2048, 0, Opts{kMean, 0, false, false, false, false, 0.f, 0.f, 0.f}},
        // hidden sizes that are not a multiple of 8: unaligned rows for the GEMMs, V x H odd for the narrowing
        Case{DType::kBFloat16, 37, 31, 1031, 3, Opts{kMean, 8, true, false, false, true, 0.1f, 1e-4f, 0.f}},
        Case{DType::kFloat16, 20, 341, 515, 0, Opts{kNone, 6, true, true, true, false, 0.f, 0.f, 0.f}},
        Case{DType::kFloat32, 9, 4097, 67, 1, Opts{kSum, 4, true, false, false, false, 0.f, 0.f, 0.f}},
        Case{DType::kBFloat16, 11, 4097, 301, 0, Opts{kMean, 3, false, false, false, true, 0.f, 0.f, 30.f}}),
    [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

TEST(FusedLinearCrossEntropyCudaApi, WorkspaceIsCheckedAtAnyHiddenSize) {
  SKIP_WITHOUT_GPU();
  for (int64_t h : {12, 16}) {  // 12: rows that are not 16-byte multiples are accepted (unaligned GEMMs)
    HostMat x(DType::kBFloat16, 4, h), w(DType::kBFloat16, 5, h), t(DType::kInt64, 1, 4), loss(DType::kFloat32, 1, 1);
    DevMat gx(x), gw(w), gt(t), gl(loss);
    auto xv = gx.view(), wv = gw.view(), tv = gt.vec_view(4);
    tigon::TensorView lv(gl.ptr, {}, tigon::dtype::float32, tigon::cuda(0));
    Params p{};
    p.ce = {-100, 0.f, 0.f, 0.f, kMean};
    EXPECT_EQ(tigon_fused_linear_cross_entropy_fwd(xv, wv, nullptr, tv, nullptr, nullptr, lv, nullptr, nullptr, nullptr,
                                                   nullptr, nullptr, nullptr, p, nullptr, 0, nullptr),
              TIGON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tigon_last_error()).find("'workspace'"), std::string::npos) << tigon_last_error();
  }
}

}  // namespace
