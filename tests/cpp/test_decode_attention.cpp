// Decode attention: the CPU reference (through the C API) against the naive materialised attention of each sequence,
// the cache append against direct indexing, and every bad argument named.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "decode_attention_test_util.h"

using namespace tigon_test;

namespace {

DecodeCase make(std::string name, DType dt, int64_t tq, int64_t hq, int64_t hkv, int64_t d) {
  DecodeCase c;
  c.name = std::move(name);
  c.dtype = dt, c.tq = tq, c.heads_q = hq, c.heads_kv = hkv, c.head_dim = d;
  return c;
}

class DecodeAttentionReference : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeAttentionReference, MatchesNaivePerSequence) {
  const DecodeCase& c = GetParam();
  std::mt19937 rng(11);
  DecodeHost t(c);
  t.fill(rng);
  auto qv = t.q.view(), kv = t.k.view(), vv = t.v.view(), ov = t.out.view(), lv = t.lse_view(), sv = t.lens_view();
  size_t bytes = 1;
  tigon::check(tigon_decode_attention_workspace_size(qv, kv, vv, c.params(), &bytes));
  EXPECT_EQ(bytes, 0u);
  std::optional<tigon::TensorView> starts;
  tigon::check(tigon_decode_attention(qv, kv, vv, sv, t.starts_arg(starts), ov, lv, c.params(), nullptr, 0, nullptr));
  Dense want(0, 0, 0, 0);
  std::vector<double> want_lse;
  t.expected(&want, &want_lse);
  EXPECT_LE(worst_attn(t.out, want, rtol_of(c.dtype)), 1.0);
  EXPECT_LE(worst_lse(t.lse, want_lse), 1e-5);
}

DecodeCase with(DecodeCase c, int32_t window, float softcap, bool bhsd, std::vector<int32_t> lens,
                std::vector<int32_t> starts = {}) {
  c.window_left = window, c.softcap = softcap, c.bhsd = bhsd, c.starts = std::move(starts);
  if (!lens.empty()) c.lens = std::move(lens), c.s_max = *std::max_element(c.lens.begin(), c.lens.end()) + 3;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DecodeAttentionReference,
    ::testing::Values(make("f32_decode_gqa4", DType::kFloat32, 1, 4, 1, 16),
                      make("bf16_tq3_gqa2", DType::kBFloat16, 3, 4, 2, 8),
                      with(make("f16_window_softcap", DType::kFloat16, 2, 2, 2, 8), 5, 20.f, false, {}),
                      with(make("f32_bhsd_short", DType::kFloat32, 4, 8, 1, 12), -1, 0.f, true, {2, 0, 9}),
                      with(make("f32_window0", DType::kFloat32, 3, 2, 1, 4), 0, 0.f, false, {7, 3}),
                      with(make("bf16_left_padded", DType::kBFloat16, 1, 4, 2, 8), -1, 0.f, false, {30, 12, 9},
                           {5, 0, 9}),
                      with(make("f32_starts_window", DType::kFloat32, 2, 2, 1, 8), 4, 0.f, true, {20, 6}, {3, 5})),
    [](const ::testing::TestParamInfo<DecodeCase>& info) { return info.param.name; });

// ---- argument checks -----------------------------------------------------------------------------------------------

TEST(DecodeAttentionApi, EveryBadArgumentIsNamed) {
  DecodeCase c = make("api", DType::kBFloat16, 2, 4, 2, 8);
  c.lens = {5, 6};
  c.s_max = 6;
  std::mt19937 rng(2);
  DecodeHost t(c);
  t.fill(rng);
  const tigon_decode_attention_params ok = c.params();
  auto qv = t.q.view(), kv = t.k.view(), vv = t.v.view(), ov = t.out.view(), lv = t.lse_view(), sv = t.lens_view();
  const auto bf = tigon::dtype::bfloat16;
  std::vector<uint8_t> other(8192);
  void* o = other.data();
  char* qd = static_cast<char*>(qv.get()->data);
  std::vector<int32_t> too_long = {5, 7}, negative = {-1, 3}, past_len = {6, 0};
  std::vector<int64_t> lens64 = {5, 6};
  tigon::TensorView q3(o, {2, 2, 32}, bf), q_i32(o, {2, 2, 4, 8}, tigon::dtype::int32),
      q_f16(o, {2, 2, 4, 8}, tigon::dtype::float16), q_d0(o, {2, 2, 4, 0}, bf), q_h0(o, {2, 2, 0, 8}, bf),
      q_strided(o, {2, 2, 4, 4}, bf, tigon::cpu(), {64, 32, 8, 2}), k_b(o, {3, 6, 2, 8}, bf), k_h3(o, {2, 6, 3, 8}, bf),
      k_d(o, {2, 6, 2, 16}, bf), k_neg(o, {2, 6, 2, 8}, bf, tigon::cpu(), {96, -16, 8, 1}), v_s(o, {2, 5, 2, 8}, bf),
      v_f16(o, {2, 6, 2, 8}, tigon::dtype::float16), o_s(o, {2, 2, 4, 9}, bf),
      o_f16(o, {2, 2, 4, 8}, tigon::dtype::float16), o_over_q(qd + 2, {2, 2, 4, 8}, bf),
      l_s(o, {2, 4, 3}, tigon::dtype::float32), l_bf(o, {2, 4, 2}, bf),
      l_strided(o, {2, 4, 2}, tigon::dtype::float32, tigon::cpu(), {16, 4, 1}),
      s_long(too_long.data(), {2}, tigon::dtype::int32), s_neg(negative.data(), {2}, tigon::dtype::int32),
      s_i64(lens64.data(), {2}, tigon::dtype::int64), s_b(too_long.data(), {1}, tigon::dtype::int32),
      s_gpu(too_long.data(), {2}, tigon::dtype::int32, tigon::cuda(0)),
      start_past(past_len.data(), {2}, tigon::dtype::int32), start_neg(negative.data(), {2}, tigon::dtype::int32);
  auto run = [&](const tigon_tensor* q, const tigon_tensor* k, const tigon_tensor* v, const tigon_tensor* s,
                 const tigon_tensor* out, const tigon_tensor* l) {
    return tigon_decode_attention(q, k, v, s, nullptr, out, l, ok, nullptr, 0, nullptr);
  };
  auto param = [&](auto change) {
    tigon_decode_attention_params r = ok;
    change(r);
    return tigon_decode_attention(qv, kv, vv, sv, nullptr, ov, lv, r, nullptr, 0, nullptr);
  };
  auto starts = [&](const tigon_tensor* st) {
    return tigon_decode_attention(qv, kv, vv, sv, st, ov, lv, ok, nullptr, 0, nullptr);
  };
  size_t bytes = 0;
  struct Bad {
    std::string arg;
    std::function<tigon_status_t()> call;
  };
  const std::vector<Bad> cases = {
      {"'scale'", [&] { return param([](auto& r) { r.scale = 0.f; }); }},
      {"'scale'", [&] { return param([](auto& r) { r.scale = NAN; }); }},
      {"'softcap'", [&] { return param([](auto& r) { r.softcap = -1.f; }); }},
      {"'window_left'", [&] { return param([](auto& r) { r.window_left = -2; }); }},
      {"'q'", [&] { return run(nullptr, kv, vv, sv, ov, lv); }},
      {"'q'", [&] { return run(q3, kv, vv, sv, ov, lv); }},
      {"'q'", [&] { return run(q_i32, kv, vv, sv, ov, lv); }},
      {"'q'", [&] { return run(q_d0, kv, vv, sv, ov, lv); }},
      {"'q'", [&] { return run(q_h0, kv, vv, sv, ov, lv); }},
      {"'q'", [&] { return run(q_strided, kv, vv, sv, ov, lv); }},
      {"'k_cache'", [&] { return run(qv, nullptr, vv, sv, ov, lv); }},
      {"'k_cache'", [&] { return run(q_f16, kv, vv, sv, ov, lv); }},
      {"'k_cache'", [&] { return run(qv, k_b, vv, sv, ov, lv); }},
      {"'k_cache'", [&] { return run(qv, k_h3, vv, sv, ov, lv); }},  // 3 heads do not divide 4
      {"'k_cache'", [&] { return run(qv, k_d, vv, sv, ov, lv); }},
      {"'k_cache'", [&] { return run(qv, k_neg, vv, sv, ov, lv); }},
      {"'v_cache'", [&] { return run(qv, kv, nullptr, sv, ov, lv); }},
      {"'v_cache'", [&] { return run(qv, kv, v_s, sv, ov, lv); }},
      {"'v_cache'", [&] { return run(qv, kv, v_f16, sv, ov, lv); }},
      {"'cache_seqlens'", [&] { return run(qv, kv, vv, nullptr, ov, lv); }},
      {"'cache_seqlens'", [&] { return run(qv, kv, vv, s_long, ov, lv); }},
      {"'cache_seqlens'", [&] { return run(qv, kv, vv, s_neg, ov, lv); }},
      {"'cache_seqlens'", [&] { return run(qv, kv, vv, s_i64, ov, lv); }},
      {"'cache_seqlens'", [&] { return run(qv, kv, vv, s_b, ov, lv); }},
      {"'cache_seqlens'", [&] { return run(qv, kv, vv, s_gpu, ov, lv); }},  // device mismatch names it
      {"'cache_starts'", [&] { return starts(start_past); }},               // 6 > cache_seqlens[0] = 5
      {"'cache_starts'", [&] { return starts(start_neg); }},
      {"'cache_starts'", [&] { return starts(s_i64); }},
      {"'cache_starts'", [&] { return starts(s_b); }},
      {"'out'", [&] { return run(qv, kv, vv, sv, nullptr, lv); }},
      {"'out'", [&] { return run(qv, kv, vv, sv, o_s, lv); }},
      {"'out'", [&] { return run(qv, kv, vv, sv, o_f16, lv); }},
      {"'out'", [&] { return run(qv, kv, vv, sv, qv, lv); }},
      {"'out'", [&] { return run(qv, kv, vv, sv, o_over_q, lv); }},
      {"'lse'", [&] { return run(qv, kv, vv, sv, ov, l_s); }},
      {"'lse'", [&] { return run(qv, kv, vv, sv, ov, l_bf); }},
      {"'lse'", [&] { return run(qv, kv, vv, sv, ov, l_strided); }},
      {"'bytes'", [&] { return tigon_decode_attention_workspace_size(qv, kv, vv, ok, nullptr); }},
      {"'k_cache'", [&] { return tigon_decode_attention_workspace_size(qv, k_d, vv, ok, &bytes); }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].call(), TIGON_ERROR_INVALID_ARGUMENT) << "case " << i << ": " << tigon_last_error();
    EXPECT_NE(std::string(tigon_last_error()).find("argument " + cases[i].arg), std::string::npos)
        << "case " << i << ": " << tigon_last_error();
  }
  EXPECT_EQ(run(qv, kv, vv, sv, ov, nullptr), TIGON_SUCCESS) << tigon_last_error();  // lse is optional
}

// ---- the cache append
// -------------------------------------------------------------------------------------------------

// k_new / v_new [B, tq, H, D] (dense) into caches stored [B, H, S, D] (seen through strides, as a decode loop keeps
// them): each new row lands at cache_seqlens[b] - tq + t, rows whose position falls outside [0, S) nowhere, and
// nothing else in the caches changes.
TEST(DecodeAttentionAppend, WritesEachRowAtItsPosition) {
  const int64_t B = 3, tq = 2, H = 2, D = 4, S = 6;
  std::vector<float> kn(B * tq * H * D), vn(kn.size()), kc(B * H * S * D, -7.f), vc(kc.size(), -9.f);
  for (size_t i = 0; i < kn.size(); ++i) kn[i] = float(i) + 0.5f, vn[i] = -float(i) - 0.25f;
  std::vector<int32_t> lens = {4, 1, 6};  // sequence 1's first new token would sit at -1: not written
  const auto f32 = tigon::dtype::float32;
  const std::vector<int64_t> cache_strides = {H * S * D, D, S * D, 1};  // [B, S, H, D] view of [B, H, S, D]
  tigon::TensorView k_new(kn.data(), {B, tq, H, D}, f32), v_new(vn.data(), {B, tq, H, D}, f32),
      k_cache(kc.data(), {B, S, H, D}, f32, tigon::cpu(), cache_strides),
      v_cache(vc.data(), {B, S, H, D}, f32, tigon::cpu(), cache_strides),
      seqlens(lens.data(), {B}, tigon::dtype::int32);
  tigon::check(tigon_decode_attention_append(k_new, v_new, k_cache, v_cache, seqlens, nullptr));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t t = s - (lens[b] - tq), at = ((b * H + h) * S + s) * D + d;
          const bool written = t >= 0 && t < tq;
          const int64_t from = ((b * tq + t) * H + h) * D + d;
          EXPECT_EQ(kc[at], written ? kn[from] : -7.f) << b << " " << s << " " << h << " " << d;
          EXPECT_EQ(vc[at], written ? vn[from] : -9.f) << b << " " << s << " " << h << " " << d;
        }
}

TEST(DecodeAttentionAppend, EveryBadArgumentIsNamed) {
  const auto bf = tigon::dtype::bfloat16;
  std::vector<uint16_t> kn(2 * 1 * 2 * 8), vn(kn.size()), kc(2 * 5 * 2 * 8), vc(kc.size()), other(4096);
  std::vector<int32_t> lens = {3, 5}, too_long = {6, 1};
  std::vector<int64_t> lens64 = {3, 5};
  void* o = other.data();
  tigon::TensorView k_new(kn.data(), {2, 1, 2, 8}, bf), v_new(vn.data(), {2, 1, 2, 8}, bf),
      k_cache(kc.data(), {2, 5, 2, 8}, bf), v_cache(vc.data(), {2, 5, 2, 8}, bf),
      seqlens(lens.data(), {2}, tigon::dtype::int32), s_long(too_long.data(), {2}, tigon::dtype::int32),
      s_i64(lens64.data(), {2}, tigon::dtype::int64), s_b(lens.data(), {1}, tigon::dtype::int32),
      s_gpu(lens.data(), {2}, tigon::dtype::int32, tigon::cuda(0)), n3(o, {2, 2, 16}, bf), n_heads(o, {2, 1, 1, 8}, bf),
      n_f16(o, {2, 1, 2, 8}, tigon::dtype::float16), n_tq(o, {2, 2, 2, 8}, bf),
      c_i32(o, {2, 5, 2, 8}, tigon::dtype::int32), c_s(o, {2, 4, 2, 8}, bf), n_over(kc.data(), {2, 1, 2, 8}, bf);
  auto run = [&](const tigon_tensor* kn_, const tigon_tensor* vn_, const tigon_tensor* kc_, const tigon_tensor* vc_,
                 const tigon_tensor* s_) { return tigon_decode_attention_append(kn_, vn_, kc_, vc_, s_, nullptr); };
  struct Bad {
    std::string arg;
    std::function<tigon_status_t()> call;
  };
  const std::vector<Bad> cases = {
      {"'k_new'", [&] { return run(nullptr, v_new, k_cache, v_cache, seqlens); }},
      {"'k_new'", [&] { return run(n3, v_new, k_cache, v_cache, seqlens); }},
      {"'k_new'", [&] { return run(n_heads, v_new, k_cache, v_cache, seqlens); }},
      {"'k_new'", [&] { return run(n_f16, v_new, k_cache, v_cache, seqlens); }},
      {"'v_new'", [&] { return run(k_new, n_tq, k_cache, v_cache, seqlens); }},
      {"'k_cache'", [&] { return run(k_new, v_new, c_i32, v_cache, seqlens); }},
      {"'v_cache'", [&] { return run(k_new, v_new, k_cache, c_s, seqlens); }},
      {"'cache_seqlens'", [&] { return run(k_new, v_new, k_cache, v_cache, nullptr); }},
      {"'cache_seqlens'", [&] { return run(k_new, v_new, k_cache, v_cache, s_long); }},  // 6 > s_max = 5
      {"'cache_seqlens'", [&] { return run(k_new, v_new, k_cache, v_cache, s_i64); }},
      {"'cache_seqlens'", [&] { return run(k_new, v_new, k_cache, v_cache, s_b); }},
      {"'cache_seqlens'", [&] { return run(k_new, v_new, k_cache, v_cache, s_gpu); }},
      {"'k_cache'", [&] { return run(n_over, v_new, k_cache, v_cache, seqlens); }},  // k_new inside the cache
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].call(), TIGON_ERROR_INVALID_ARGUMENT) << "case " << i << ": " << tigon_last_error();
    EXPECT_NE(std::string(tigon_last_error()).find("argument " + cases[i].arg), std::string::npos)
        << "case " << i << ": " << tigon_last_error();
  }
  EXPECT_EQ(run(k_new, v_new, k_cache, v_cache, seqlens), TIGON_SUCCESS) << tigon_last_error();
}

}  // namespace
