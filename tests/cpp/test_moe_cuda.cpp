// MoE experts on the GPU against the CPU reference: forward and every gradient in bf16 and fp16, int32 and int64 ids,
// fp32 and 16-bit routing weights, sentinel ids, experts nobody chose, a strided x, several routing blocks; the same
// bits on a second run (the routing sort is stable, no atomics order a sum).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <vector>

#include "cuda_test_util.h"
#include "moe_test_util.h"

using namespace tigon_test;

namespace {

struct DevBuf {
  void* ptr = nullptr;
  explicit DevBuf(size_t bytes, const void* host = nullptr) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 1), cudaSuccess);
    if (host) EXPECT_EQ(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DevBuf() { cudaFree(ptr); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

void expect_close(const HostMat& got, const HostMat& want, const char* what) {
  const double rtol = 2 * rtol_of(want.dtype == DType::kFloat32 ? DType::kBFloat16 : want.dtype);
  EXPECT_LE(worst_ratio(got, want, rtol * (max_abs(want) + 1e-6), rtol), 1.0) << what;
}

struct Run {
  HostMat out;
  MoeCase::Grads g;
};

// The case on the GPU; ids as int32 when asked, routing weights in the case's dtype when asked.
Run run_gpu(MoeCase& c, bool ids32, bool w16) {
  auto dev = tigon::cuda(0);
  DevMat x(c.x), gu(c.gate_up), dn(c.down), dout(c.dout);
  std::vector<int32_t> i32(c.ids.begin(), c.ids.end());
  DevBuf ids(ids32 ? i32.size() * 4 : c.ids.size() * 8, ids32 ? static_cast<const void*>(i32.data()) : c.ids.data());
  HostMat w = c.w;
  if (w16) {
    w = HostMat(c.dtype, c.T, c.k);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < c.k; ++j) w.set(t, j, c.w.at(t, j));
  }
  DevMat wd(w);
  const tigon::TensorView ids_v(ids.ptr, {c.T, c.k}, ids32 ? tigon::dtype::int32 : tigon::dtype::int64, dev);
  const tigon::TensorView w_v(wd.ptr, {c.T, c.k}, to_dl(w.dtype), dev);
  const auto gu_v = c.gate_up_view(dev, gu.ptr), dn_v = c.down_view(dev, dn.ptr);
  Run r{HostMat(c.dtype, c.T, c.H), c.new_grads()};
  r.out.poison();
  HostMat dw(w.dtype, c.T, c.k);
  dw.poison();
  DevMat out(r.out), dx(r.g.dx), dwd(dw), dgu(r.g.dgate_up), ddn(r.g.ddown);
  size_t fb = 0, bb = 0;
  EXPECT_EQ(tigon_moe_workspace_size(x.view(), ids_v, gu_v, dn_v, 0, &fb), TIGON_SUCCESS) << tigon_last_error();
  EXPECT_EQ(tigon_moe_workspace_size(x.view(), ids_v, gu_v, dn_v, 1, &bb), TIGON_SUCCESS) << tigon_last_error();
  DevBuf ws(std::max(fb, bb));
  EXPECT_EQ(tigon_moe_fwd(x.view(), ids_v, w_v, gu_v, dn_v, out.view(), {0}, ws.ptr, fb, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  const tigon::TensorView dw_v(dwd.ptr, {c.T, c.k}, to_dl(w.dtype), dev);
  EXPECT_EQ(tigon_moe_bwd(x.view(), ids_v, w_v, gu_v, dn_v, dout.view(), dx.view(), dw_v,
                          MoeCase::experts_view(r.g.dgate_up, c.E, 2 * c.I, c.H, dev, dgu.ptr),
                          MoeCase::experts_view(r.g.ddown, c.E, c.H, c.I, dev, ddn.ptr), {0}, ws.ptr, bb, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  r.out = out.fetch(), r.g.dx = dx.fetch(), r.g.dgate_up = dgu.fetch(), r.g.ddown = ddn.fetch();
  const HostMat dwh = dwd.fetch();
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t j = 0; j < c.k; ++j) r.g.dw.set(t, j, dwh.at(t, j));
  return r;
}

void check(MoeCase& c, bool ids32 = false, bool w16 = false) {
  const HostMat out = c.reference_out();
  const MoeCase::Grads g = c.reference_grads();
  const Run r = run_gpu(c, ids32, w16);
  expect_close(r.out, out, "out");
  expect_close(r.g.dx, g.dx, "dx");
  expect_close(r.g.dw, g.dw, "dweights");
  expect_close(r.g.dgate_up, g.dgate_up, "dgate_up_weight");
  expect_close(r.g.ddown, g.ddown, "ddown_weight");
  const Run again = run_gpu(c, ids32, w16);
  EXPECT_EQ(again.out.bytes, r.out.bytes) << "a second run differs";
  EXPECT_EQ(again.g.dgate_up.bytes, r.g.dgate_up.bytes) << "a second run differs";
}

TEST(MoeCuda, Bf16SentinelsEmptyExpertsStridedX) {
  SKIP_WITHOUT_GPU();
  MoeCase c(37, 4, 8, 64, 48, DType::kBFloat16, /*used=*/6, /*sentinel_every=*/7, /*x_stride=*/72);
  check(c);
}

TEST(MoeCuda, Fp16Int32IdsHalfWeights) {
  SKIP_WITHOUT_GPU();
  MoeCase c(29, 2, 5, 32, 16, DType::kFloat16, 5);
  check(c, /*ids32=*/true, /*w16=*/true);
}

TEST(MoeCuda, SeveralRoutingBlocks) {
  SKIP_WITHOUT_GPU();
  MoeCase c(300, 8, 64, 128, 64, DType::kBFloat16, 60, 0, -1, 5);  // 2400 pairs: three routing blocks
  check(c);
}

TEST(MoeCuda, RejectsFloat32) {
  SKIP_WITHOUT_GPU();
  MoeCase c(4, 2, 3, 8, 8, DType::kFloat32, 3);
  DevMat x(c.x);
  size_t bytes = 0;
  DevBuf ids(c.ids.size() * 8, c.ids.data()), gu(c.gate_up.span_bytes()), dn(c.down.span_bytes());
  auto dev = tigon::cuda(0);
  EXPECT_EQ(tigon_moe_workspace_size(x.view(), c.ids_view(dev, ids.ptr), c.gate_up_view(dev, gu.ptr),
                                     c.down_view(dev, dn.ptr), 0, &bytes),
            TIGON_SUCCESS);
  HostMat out(DType::kFloat32, 4, 8);
  DevMat o(out), w(c.w);
  EXPECT_EQ(tigon_moe_fwd(x.view(), c.ids_view(dev, ids.ptr), c.w_view(dev, w.ptr), c.gate_up_view(dev, gu.ptr),
                          c.down_view(dev, dn.ptr), o.view(), {0}, nullptr, 0, nullptr),
            TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("float32"), std::string::npos) << tigon_last_error();
}

}  // namespace
