// Decode attention CUDA kernels against the naive attention of each sequence, and the cache append against direct
// indexing, through the C API. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "decode_attention_test_util.h"

using namespace tigon_test;

namespace {

// A device copy of a host buffer, fetched back on demand.
template <class T>
struct DevBuf {
  void* ptr = nullptr;
  size_t bytes;
  explicit DevBuf(const T* src, size_t n) : bytes(n * sizeof(T)) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DevBuf() { cudaFree(ptr); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void fetch(T* dst) const { EXPECT_EQ(cudaMemcpy(dst, ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess); }
};

class DecodeAttentionCuda : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeAttentionCuda, MatchesNaive) {
  SKIP_WITHOUT_GPU();
  const DecodeCase& c = GetParam();
  std::mt19937 rng(21);
  DecodeHost t(c);
  t.fill(rng);
  DevBuf<uint8_t> q(t.q.bytes.data(), t.q.bytes.size()), k(t.k.bytes.data(), t.k.bytes.size()),
      v(t.v.bytes.data(), t.v.bytes.size()), out(t.out.bytes.data(), t.out.bytes.size());
  DevBuf<float> lse(t.lse.data(), t.lse.size());
  DevBuf<int32_t> lens(c.lens.data(), c.lens.size());
  std::vector<int32_t> starts_host = c.starts.empty() ? std::vector<int32_t>{0} : c.starts;
  DevBuf<int32_t> starts_dev(starts_host.data(), starts_host.size());
  std::optional<tigon::TensorView> starts_view;
  const auto dev = tigon::cuda(0);
  auto qv = t.q.view(q.ptr, dev), kv = t.k.view(k.ptr, dev), vv = t.v.view(v.ptr, dev), ov = t.out.view(out.ptr, dev);
  auto lv = t.lse_view(lse.ptr, dev), sv = t.lens_view(lens.ptr, dev);
  const tigon_tensor* st = t.starts_arg(starts_view, starts_dev.ptr, dev);
  size_t bytes = 0;
  tigon::check(tigon_decode_attention_workspace_size(qv, kv, vv, c.params(), &bytes));
  tigon::Buffer ws(bytes, dev);
  tigon::check(tigon_decode_attention(qv, kv, vv, sv, st, ov, lv, c.params(), ws.get(), ws.size(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.fetch(t.out.bytes.data());
  lse.fetch(t.lse.data());
  Dense want(0, 0, 0, 0);
  std::vector<double> want_lse;
  t.expected(&want, &want_lse);
  // The output's rounding plus fp32 sums and exp2 approximations: the flash-attention tolerance (2 ulp-ish).
  EXPECT_LE(worst_attn(t.out, want, 1.5 * rtol_of(c.dtype)), 1.0) << "workspace " << bytes;
  EXPECT_LE(worst_lse(t.lse, want_lse), 2e-5);

  // Deterministic: the same bits again.
  const std::vector<uint8_t> first = t.out.bytes;
  tigon::check(tigon_decode_attention(qv, kv, vv, sv, st, ov, lv, c.params(), ws.get(), ws.size(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.fetch(t.out.bytes.data());
  EXPECT_EQ(first, t.out.bytes);
}

DecodeCase make(std::string name, DType dt, int64_t tq, int64_t hq, int64_t hkv, int64_t d, int64_t s_max,
                std::vector<int32_t> lens, int32_t window = -1, float softcap = 0.f, bool bhsd = false) {
  DecodeCase c;
  c.name = std::move(name);
  c.dtype = dt, c.tq = tq, c.heads_q = hq, c.heads_kv = hkv, c.head_dim = d, c.s_max = s_max, c.lens = std::move(lens);
  c.window_left = window, c.softcap = softcap, c.bhsd = bhsd;
  return c;
}

DecodeCase left_padded(DecodeCase c, std::vector<int32_t> starts) {
  c.starts = std::move(starts);
  return c;
}

std::vector<int32_t> many(int n, int32_t s_max) {  // n lengths from 1 to s_max
  std::vector<int32_t> l(n);
  for (int i = 0; i < n; ++i) l[i] = 1 + int32_t((int64_t(i) * 7919) % s_max);
  l[0] = s_max;
  return l;
}

const DecodeCase kCases[] = {
    make("bf16_D128_gqa4_split", DType::kBFloat16, 1, 32, 8, 128, 3000, {3000, 1, 1777}),
    make("f16_D128_gqa8", DType::kFloat16, 1, 8, 1, 128, 1000, {1000, 513}),
    make("bf16_D64_mha", DType::kBFloat16, 1, 4, 4, 64, 700, {1, 700, 64, 65}),
    make("bf16_D256_gqa2_softcap", DType::kBFloat16, 1, 8, 4, 256, 600, {600, 300}, -1, 50.f),
    make("f16_D96_window", DType::kFloat16, 1, 4, 2, 96, 900, {900, 100, 5}, 255),
    make("bf16_D80", DType::kBFloat16, 1, 2, 1, 80, 333, {333, 2}),
    make("bf16_D128_tq4_gqa4", DType::kBFloat16, 4, 16, 4, 128, 520, {520, 3, 260}),  // 16 rows: 2 row blocks
    make("f16_D64_tq16_window_softcap", DType::kFloat16, 16, 4, 4, 64, 300, {300, 10, 17}, 31, 30.f),
    make("bf16_D128_tq3_gqa8_bhsd", DType::kBFloat16, 3, 8, 1, 128, 1500, {1500, 2, 999}, 100, 0.f, true),
    make("bf16_D128_many_sequences", DType::kBFloat16, 1, 32, 8, 128, 64, many(80, 64)),  // one chunk each
    make("f16_D256_gqa1_tq2_empty", DType::kFloat16, 2, 2, 2, 256, 50, {0, 1, 50}),       // L < tq: lse -inf
    left_padded(make("bf16_D128_gqa4_left_padded", DType::kBFloat16, 1, 32, 8, 128, 2000, {2000, 700, 1500}),
                {1500, 0, 1499}),  // split chunks wholly before a start
};
INSTANTIATE_TEST_SUITE_P(Cases, DecodeAttentionCuda, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<DecodeCase>& info) { return info.param.name; });

TEST(DecodeAttentionCudaApi, CudaOnlyChecksNameTheArgument) {
  SKIP_WITHOUT_GPU();
  DecodeCase c = make("api", DType::kBFloat16, 1, 4, 1, 48, 16, {16});
  DecodeHost t(c);
  DevBuf<uint8_t> buf(t.k.bytes.data(), t.k.bytes.size());
  const auto dev = tigon::cuda(0);
  tigon::TensorView q(buf.ptr, {1, 1, 4, 48}, tigon::dtype::bfloat16, dev),
      k(buf.ptr, {1, 16, 1, 48}, tigon::dtype::bfloat16, dev);
  size_t bytes = 0;
  EXPECT_EQ(tigon_decode_attention_workspace_size(q, k, k, c.params(), &bytes), TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("'q': head_dim 48"), std::string::npos) << tigon_last_error();
  tigon::TensorView q2(buf.ptr, {1, 1, 4, 64}, tigon::dtype::bfloat16, dev),
      k_odd(static_cast<char*>(buf.ptr) + 2, {1, 2, 1, 64}, tigon::dtype::bfloat16, dev);
  EXPECT_EQ(tigon_decode_attention_workspace_size(q2, k_odd, k_odd, c.params(), &bytes), TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find("'k_cache'"), std::string::npos) << tigon_last_error();
}

// The append on the device: new rows [B, tq, H, D] into [B, H, S, D] caches (seen through strides) at
// cache_seqlens[b] - tq + t, bit for bit; 16-byte copies (bf16 D 128, fp32 D 8) and element copies (bf16 D 12).
template <class T>
void check_append(tigon_dtype dt, int64_t D) {
  const int64_t B = 3, tq = 2, H = 4, S = 9;
  std::vector<T> kn(B * tq * H * D), vn(kn.size()), kc(B * H * S * D), vc(kc.size());
  std::mt19937 rng(5);
  for (auto* buf : {&kn, &vn, &kc, &vc})
    for (auto& x : *buf) {
      const uint32_t r = rng();
      std::memcpy(&x, &r, sizeof(T));
    }
  const std::vector<int32_t> lens = {9, 1, 5};  // sequence 1's first new token would sit at -1: not written
  DevBuf<T> dkn(kn.data(), kn.size()), dvn(vn.data(), vn.size()), dkc(kc.data(), kc.size()), dvc(vc.data(), vc.size());
  DevBuf<int32_t> dlens(lens.data(), lens.size());
  const std::vector<int64_t> cache_strides = {H * S * D, D, S * D, 1};
  const auto gpu = tigon::cuda(0);
  tigon::TensorView k_new(dkn.ptr, {B, tq, H, D}, dt, gpu), v_new(dvn.ptr, {B, tq, H, D}, dt, gpu),
      k_cache(dkc.ptr, {B, S, H, D}, dt, gpu, cache_strides), v_cache(dvc.ptr, {B, S, H, D}, dt, gpu, cache_strides),
      seqlens(dlens.ptr, {B}, tigon::dtype::int32, gpu);
  ASSERT_EQ(tigon_decode_attention_append(k_new, v_new, k_cache, v_cache, seqlens, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<T> got_k(kc.size()), got_v(vc.size());
  dkc.fetch(got_k.data());
  dvc.fetch(got_v.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t t = s - (lens[b] - tq), at = ((b * H + h) * S + s) * D + d;
          const int64_t from = ((b * tq + t) * H + h) * D + d;
          const bool written = t >= 0 && t < tq;
          ASSERT_EQ(std::memcmp(&got_k[at], written ? &kn[from] : &kc[at], sizeof(T)), 0) << b << " " << s << " " << d;
          ASSERT_EQ(std::memcmp(&got_v[at], written ? &vn[from] : &vc[at], sizeof(T)), 0) << b << " " << s << " " << d;
        }
}

TEST(DecodeAttentionAppendCuda, WritesEachRowAtItsPosition) {
  SKIP_WITHOUT_GPU();
  check_append<uint16_t>(tigon::dtype::bfloat16, 128);
  check_append<uint16_t>(tigon::dtype::bfloat16, 12);
  check_append<float>(tigon::dtype::float32, 8);
}

}  // namespace
