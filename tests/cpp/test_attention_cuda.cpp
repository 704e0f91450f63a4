// Attention CUDA kernels against the CPU reference, through the same C API: every CUDA head dim and 16-bit dtype with
// full, causal, windowed, softcapped, grouped-query, variable-length, Sq != Sk and (B, H, S, D)-strided inputs, forward
// and backward; the deterministic backward gives the same bits twice. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention_test_util.h"
#include "cuda_test_util.h"

using namespace tigon_test;

namespace {

// A device copy of a host buffer, fetched back on demand.
struct DevCopy {
  void* ptr = nullptr;
  size_t bytes;
  DevCopy(const void* host, size_t n) : bytes(n) {
    EXPECT_EQ(cudaMalloc(&ptr, n > 0 ? n : 1), cudaSuccess);
    if (n > 0) EXPECT_EQ(cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit DevCopy(const HostAttn& h) : DevCopy(h.bytes.data(), h.bytes.size()) {}
  ~DevCopy() { cudaFree(ptr); }
  DevCopy(const DevCopy&) = delete;
  DevCopy& operator=(const DevCopy&) = delete;
  void upload(const void* host) { EXPECT_EQ(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), cudaSuccess); }
  void fetch(void* host) const { EXPECT_EQ(cudaMemcpy(host, ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess); }
};

struct Workspace {
  void* ptr = nullptr;
  explicit Workspace(size_t n) {
    if (n > 0) EXPECT_EQ(cudaMalloc(&ptr, n), cudaSuccess);
  }
  ~Workspace() { cudaFree(ptr); }
};

// GPU result against the reference's: |got - ref| <= tol * (max|ref| + |ref|).
double worst_vs(const HostAttn& got, const HostAttn& ref, double tol) {
  Dense r = dense_of(ref);
  return worst_attn(got, r, tol);
}

// The reference rounds once from fp64; a kernel also rounds P (and dS) to the 16-bit type before its matrix products.
double fwd_tol(DType t) { return t == DType::kBFloat16 ? 1.6e-2 : 3e-3; }
double bwd_tol(DType t) { return t == DType::kBFloat16 ? 3.2e-2 : 6e-3; }

AttnCase gpu_case(const std::string& kind, DType dt, int64_t D) {
  AttnCase c;
  c.name = kind + "_" + short_name(dt) + "_D" + std::to_string(D);
  c.dtype = dt;
  c.head_dim = D;
  c.batch = 2;
  c.seqlen_q = c.seqlen_k = 133;  // more than one tile, a partial last one
  c.heads_q = c.heads_kv = 2;
  if (kind == "causal") {
    c.causal = true;
    c.seqlen_q = c.seqlen_k = 190;
  } else if (kind == "window") {
    c.seqlen_q = c.seqlen_k = 200;
    c.window_left = 37;
    c.window_right = 11;
    c.scale = 0.08f;
  } else if (kind == "softcap") {
    c.causal = true;
    c.softcap = 2.f;  // small enough that the cap bends typical scores
  } else if (kind == "gqa") {
    c.causal = true;
    c.heads_q = 8;
    c.heads_kv = 2;
  } else if (kind == "varlen") {
    c.causal = true;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.lens_q = {1, 77, 130, 0, 64};
    c.lens_k = {1, 77, 150, 5, 64};
  } else if (kind == "sq_lt_sk") {  // a query block that continues a KV prefix
    c.causal = true;
    c.seqlen_q = 45;
    c.seqlen_k = 170;
  } else if (kind == "sq_gt_sk") {  // causal with more queries than keys: the first rows see nothing
    c.causal = true;
    c.seqlen_q = 150;
    c.seqlen_k = 40;
  } else if (kind == "bhsd") {
    c.bhsd = true;
    c.causal = true;
    c.window_left = 50;
    c.heads_q = 4;
    c.heads_kv = 1;
  }
  return c;
}

std::vector<AttnCase> gpu_cases() {
  std::vector<AttnCase> cs;
  for (int64_t D : {64, 96, 128, 256})
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (const char* kind : {"full", "causal", "window", "softcap", "gqa", "varlen", "sq_lt_sk", "sq_gt_sk", "bhsd"})
        cs.push_back(gpu_case(kind, dt, D));
  return cs;
}

class AttentionCuda : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionCuda, MatchesReferenceForwardBackwardDeterministic) {
  SKIP_WITHOUT_GPU();
  const AttnCase& c = GetParam();
  std::mt19937 rng(std::hash<std::string>{}(c.name) % 10000);
  AttnHost host(c, c.bhsd ? 3 : 1);
  host.fill(rng);
  AttnHost ref = host;
  ref.run_cpu();

  const tigon_device dev = tigon::cuda(0);
  DevCopy q(host.q), k(host.k), v(host.v), o(host.o), dout(host.dout), dq(host.dq), dk(host.dk), dv(host.dv);
  DevCopy lse(host.lse.data(), host.lse.size() * sizeof(float));
  DevCopy cu_q(host.cu_q.data(), host.cu_q.size() * 4), cu_k(host.cu_k.data(), host.cu_k.size() * 4);
  auto qv = host.q.view(q.ptr, dev), kv = host.k.view(k.ptr, dev), vv = host.v.view(v.ptr, dev),
       ov = host.o.view(o.ptr, dev), dov = host.dout.view(dout.ptr, dev), dqv = host.dq.view(dq.ptr, dev),
       dkv = host.dk.view(dk.ptr, dev), dvv = host.dv.view(dv.ptr, dev), lv = host.lse_view(lse.ptr, dev);
  auto cqv = host.cu_view(host.cu_q, cu_q.ptr, dev), ckv = host.cu_view(host.cu_k, cu_k.ptr, dev);
  const tigon_tensor* cq = c.varlen() ? cqv.get() : nullptr;
  const tigon_tensor* ck = c.varlen() ? ckv.get() : nullptr;

  // forward
  const tigon_attention_params p = c.params(1);
  size_t fwd_bytes = 0;
  ASSERT_EQ(tigon_attention_fwd_workspace_size(qv, kv, vv, cq, ck, p, &fwd_bytes), TIGON_SUCCESS) << tigon_last_error();
  Workspace fwd_ws(fwd_bytes);
  ASSERT_EQ(tigon_attention_fwd(qv, kv, vv, cq, ck, ov, lv, p, fwd_ws.ptr, fwd_bytes, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  AttnHost got = host;
  o.fetch(got.o.bytes.data());
  lse.fetch(got.lse.data());
  EXPECT_LE(worst_vs(got.o, ref.o, fwd_tol(c.dtype)), 1.0) << "o";
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      ASSERT_TRUE(std::isinf(got.lse[i]) && got.lse[i] < 0) << "lse " << i << " of a fully masked row: " << got.lse[i];
      continue;
    }
    ASSERT_NEAR(got.lse[i], ref.lse[i], 1e-3 * (1 + std::fabs(ref.lse[i]))) << "lse " << i;
  }
  ref.o.each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
    if (ref.o.at(b, s, h, d) == 0.0) ASSERT_EQ(got.o.at(b, s, h, d), 0.0) << "o of a fully masked row";
  });

  // backward, from the reference's o and lse so both sides differentiate the same forward
  o.upload(ref.o.bytes.data());
  lse.upload(ref.lse.data());
  std::vector<std::vector<uint8_t>> first;
  for (int32_t det : {1, 1, 0}) {
    const tigon_attention_params pb = c.params(det);
    size_t bwd_bytes = 0;
    ASSERT_EQ(tigon_attention_bwd_workspace_size(qv, kv, vv, cq, ck, pb, &bwd_bytes), TIGON_SUCCESS)
        << tigon_last_error();
    Workspace bwd_ws(bwd_bytes);
    dq.upload(host.dq.bytes.data());  // poisoned: an element left unwritten fails
    dk.upload(host.dk.bytes.data());
    dv.upload(host.dv.bytes.data());
    ASSERT_EQ(tigon_attention_bwd(dov, qv, kv, vv, ov, lv, cq, ck, dqv, dkv, dvv, pb, bwd_ws.ptr, bwd_bytes, nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dq.fetch(got.dq.bytes.data());
    dk.fetch(got.dk.bytes.data());
    dv.fetch(got.dv.bytes.data());
    const std::string run = det ? "deterministic" : "non-deterministic";
    EXPECT_LE(worst_vs(got.dq, ref.dq, bwd_tol(c.dtype)), 1.0) << "dq, " << run;
    EXPECT_LE(worst_vs(got.dk, ref.dk, bwd_tol(c.dtype)), 1.0) << "dk, " << run;
    EXPECT_LE(worst_vs(got.dv, ref.dv, bwd_tol(c.dtype)), 1.0) << "dv, " << run;
    if (!det) continue;
    std::vector<std::vector<uint8_t>> bits = {got.dq.bytes, got.dk.bytes, got.dv.bytes};
    if (first.empty()) {
      first = bits;
    } else {
      EXPECT_TRUE(bits[0] == first[0]) << "dq differs between two deterministic runs";
      EXPECT_TRUE(bits[1] == first[1]) << "dk differs between two deterministic runs";
      EXPECT_TRUE(bits[2] == first[2]) << "dv differs between two deterministic runs";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionCuda, ::testing::ValuesIn(gpu_cases()),
                         [](const ::testing::TestParamInfo<AttnCase>& info) { return info.param.name; });

// CUDA-only argument checks: the head dims the kernels carry, 16-bit dtypes, the workspace.
TEST(AttentionCudaApi, UnsupportedHeadDimDtypeAndShortWorkspaceAreNamed) {
  SKIP_WITHOUT_GPU();
  AttnCase c = gpu_case("causal", DType::kBFloat16, 80);
  std::mt19937 rng(1);
  AttnHost h80(c);
  h80.fill(rng);
  DevCopy q(h80.q), k(h80.k), v(h80.v), o(h80.o);
  const tigon_device dev = tigon::cuda(0);
  auto qv = h80.q.view(q.ptr, dev), kv = h80.k.view(k.ptr, dev), vv = h80.v.view(v.ptr, dev),
       ov = h80.o.view(o.ptr, dev);
  EXPECT_EQ(tigon_attention_fwd(qv, kv, vv, nullptr, nullptr, ov, nullptr, c.params(), nullptr, 0, nullptr),
            TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("argument 'q': head_dim 80"), std::string::npos) << tigon_last_error();

  AttnCase f = gpu_case("full", DType::kFloat32, 64);
  AttnHost h32(f);
  h32.fill(rng);
  DevCopy q32(h32.q), k32(h32.k), v32(h32.v), o32(h32.o);
  auto q32v = h32.q.view(q32.ptr, dev), k32v = h32.k.view(k32.ptr, dev), v32v = h32.v.view(v32.ptr, dev),
       o32v = h32.o.view(o32.ptr, dev);
  EXPECT_EQ(tigon_attention_fwd(q32v, k32v, v32v, nullptr, nullptr, o32v, nullptr, f.params(), nullptr, 0, nullptr),
            TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("argument 'q': dtype float32"), std::string::npos)
      << tigon_last_error();

  // A workspace one byte short of what the size query reports (when the kernels want one at all).
  AttnCase g = gpu_case("gqa", DType::kBFloat16, 128);
  AttnHost hg(g);
  hg.fill(rng);
  DevCopy gq(hg.q), gk(hg.k), gv(hg.v), go(hg.o), gdo(hg.dout), gdq(hg.dq), gdk(hg.dk), gdv(hg.dv);
  DevCopy glse(hg.lse.data(), hg.lse.size() * sizeof(float));
  auto a = hg.q.view(gq.ptr, dev), b = hg.k.view(gk.ptr, dev), cc = hg.v.view(gv.ptr, dev), d = hg.o.view(go.ptr, dev),
       e = hg.dout.view(gdo.ptr, dev), dqv = hg.dq.view(gdq.ptr, dev), dkv = hg.dk.view(gdk.ptr, dev),
       dvv = hg.dv.view(gdv.ptr, dev), l = hg.lse_view(glse.ptr, dev);
  size_t need = 0;
  ASSERT_EQ(tigon_attention_bwd_workspace_size(a, b, cc, nullptr, nullptr, g.params(), &need), TIGON_SUCCESS);
  if (need > 0) {
    Workspace ws(need);
    EXPECT_EQ(
        tigon_attention_bwd(e, a, b, cc, d, l, nullptr, nullptr, dqv, dkv, dvv, g.params(), ws.ptr, need - 1, nullptr),
        TIGON_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tigon_last_error()).find("argument 'workspace'"), std::string::npos) << tigon_last_error();
  }
}

}  // namespace
