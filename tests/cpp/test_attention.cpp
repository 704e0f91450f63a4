// The attention CPU reference (through the C API) against a naive fp64 attention that materialises the score matrix,
// finite differences of that naive forward, variable length against per-sequence dense calls, both layouts; and the
// C API's argument checks, each naming its argument.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "attention_test_util.h"

using namespace tigon_test;

namespace {

AttnCase make(std::string name, DType dt, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D) {
  AttnCase c;
  c.name = std::move(name);
  c.dtype = dt;
  c.batch = B;
  c.seqlen_q = Sq;
  c.seqlen_k = Sk;
  c.heads_q = Hq;
  c.heads_kv = Hkv;
  c.head_dim = D;
  return c;
}

std::vector<AttnCase> reference_cases() {
  std::vector<AttnCase> cs;
  cs.push_back(make("full_f32", DType::kFloat32, 2, 5, 5, 2, 2, 8));
  AttnCase c = make("causal_gqa_f32", DType::kFloat32, 2, 6, 6, 4, 2, 8);
  c.causal = true;
  cs.push_back(c);
  c = make("causal_sq_lt_sk_f32", DType::kFloat32, 1, 3, 7, 2, 1, 5);  // bottom-right: a query block after a prefix
  c.causal = true;
  cs.push_back(c);
  c = make("causal_sq_gt_sk_masked_rows_f32", DType::kFloat32, 1, 7, 4, 2, 2, 4);  // first rows see nothing
  c.causal = true;
  cs.push_back(c);
  c = make("window_f32", DType::kFloat32, 2, 9, 9, 2, 1, 8);
  c.window_left = 2;
  c.window_right = 1;
  cs.push_back(c);
  c = make("causal_window_sq_ne_sk_f32", DType::kFloat32, 1, 5, 8, 3, 1, 6);
  c.causal = true;
  c.window_left = 3;
  cs.push_back(c);
  c = make("right_window_only_f32", DType::kFloat32, 1, 6, 6, 2, 2, 4);
  c.window_right = 0;  // causal by another name
  cs.push_back(c);
  c = make("softcap_scale_f32", DType::kFloat32, 2, 4, 6, 2, 1, 8);
  c.softcap = 2.f;
  c.scale = 0.7f;
  cs.push_back(c);
  c = make("empty_window_rows_f32", DType::kFloat32, 1, 6, 3, 2, 1, 4);  // window entirely right of the keys
  c.window_left = 0;
  c.window_right = 0;
  cs.push_back(c);
  c = make("bhsd_causal_softcap_f32", DType::kFloat32, 2, 5, 7, 4, 1, 8);
  c.bhsd = true;
  c.causal = true;
  c.softcap = 5.f;
  cs.push_back(c);
  c = make("varlen_causal_gqa_f32", DType::kFloat32, 0, 0, 0, 4, 2, 8);
  c.lens_q = {3, 1, 5, 0};
  c.lens_k = {5, 1, 5, 2};
  c.causal = true;
  cs.push_back(c);
  c = make("varlen_window_softcap_bhsd_f32", DType::kFloat32, 0, 0, 0, 2, 1, 6);
  c.lens_q = {4, 6};
  c.lens_k = {7, 3};
  c.window_left = 2;
  c.softcap = 3.f;
  c.bhsd = true;
  cs.push_back(c);
  c = make("bf16_causal_gqa", DType::kBFloat16, 2, 7, 9, 4, 2, 16);
  c.causal = true;
  cs.push_back(c);
  c = make("f16_window_softcap", DType::kFloat16, 1, 8, 8, 3, 3, 12);
  c.window_left = 3;
  c.window_right = 2;
  c.softcap = 4.f;
  cs.push_back(c);
  c = make("bf16_varlen", DType::kBFloat16, 0, 0, 0, 2, 2, 8);
  c.lens_q = {2, 7};
  c.lens_k = {2, 9};
  c.causal = true;
  cs.push_back(c);
  return cs;
}

class AttentionReference : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionReference, MatchesNaiveMaterialisedScores) {
  const AttnCase& c = GetParam();
  std::mt19937 rng(std::hash<std::string>{}(c.name) % 1000);
  AttnHost t(c, 1);
  t.fill(rng);
  t.run_cpu();
  Dense q = dense_of(t.q), k = dense_of(t.k), v = dense_of(t.v), dout = dense_of(t.dout);
  NaiveResult r = naive_attention(c, q, k, v, &dout);
  const double tol = c.dtype == DType::kFloat32 ? 1e-5 : rtol_of(c.dtype);
  EXPECT_LE(worst_attn(t.o, r.o, tol), 1.0) << "o";
  EXPECT_LE(worst_attn(t.dq, r.dq, tol), 1.0) << "dq";
  EXPECT_LE(worst_attn(t.dk, r.dk, tol), 1.0) << "dk";
  EXPECT_LE(worst_attn(t.dv, r.dv, tol), 1.0) << "dv";
  for (size_t i = 0; i < r.lse.size(); ++i) {
    if (std::isinf(r.lse[i])) {  // a row with no visible key: lse -inf, o and dq exactly 0 (checked below)
      EXPECT_TRUE(std::isinf(t.lse[i]) && t.lse[i] < 0) << "lse " << i << " = " << t.lse[i];
      continue;
    }
    EXPECT_NEAR(t.lse[i], r.lse[i], 1e-6 * (1 + std::fabs(r.lse[i]))) << "lse " << i;
  }
  t.o.each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
    if (r.o.at(b, s, h, d) == 0.0 && r.dq.at(b, s, h, d) == 0.0) {
      EXPECT_EQ(t.o.at(b, s, h, d), 0.0);
      EXPECT_EQ(t.dq.at(b, s, h, d), 0.0);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionReference, ::testing::ValuesIn(reference_cases()),
                         [](const ::testing::TestParamInfo<AttnCase>& info) { return info.param.name; });

// The reference's gradients are the derivatives of its forward: central differences of the naive fp64 forward of
// L = sum(o * dout) at a spread of elements of q, k and v.
TEST(AttentionReference, GradientsMatchFiniteDifferences) {
  AttnCase c = make("fd", DType::kFloat32, 1, 5, 7, 4, 2, 6);
  c.causal = true;
  c.window_left = 4;
  c.softcap = 1.5f;
  std::mt19937 rng(3);
  AttnHost t(c);
  t.fill(rng);
  t.run_cpu();
  Dense q = dense_of(t.q), k = dense_of(t.k), v = dense_of(t.v), dout = dense_of(t.dout);
  auto loss = [&] {
    NaiveResult r = naive_attention(c, q, k, v, nullptr);
    double l = 0;
    for (size_t i = 0; i < r.o.v.size(); ++i) l += r.o.v[i] * dout.v[i];
    return l;
  };
  const double eps = 1e-5;
  int checked = 0;
  using Grad = std::tuple<Dense*, HostAttn*, const char*>;
  for (auto [x, g, name] : std::vector<Grad>{{&q, &t.dq, "dq"}, {&k, &t.dk, "dk"}, {&v, &t.dv, "dv"}}) {
    for (size_t i = 0; i < x->v.size(); i += 7) {
      const double keep = x->v[i];
      x->v[i] = keep + eps;
      const double up = loss();
      x->v[i] = keep - eps;
      const double down = loss();
      x->v[i] = keep;
      const int64_t D = x->D, H = x->H, S = x->S;
      const int64_t d = int64_t(i) % D, h = int64_t(i) / D % H, s = int64_t(i) / (D * H) % S,
                    b = int64_t(i) / (D * H * S);
      const double fd = (up - down) / (2 * eps), got = g->at(b, s, h, d);
      EXPECT_NEAR(got, fd, 1e-5 * (1 + std::fabs(fd))) << name << " element " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

// Packed sequences give, bit for bit, what one dense call per sequence gives.
TEST(AttentionReference, VariableLengthEqualsDensePerSequence) {
  for (const bool causal : {false, true}) {
    AttnCase c = make("varlen", DType::kBFloat16, 0, 0, 0, 4, 2, 8);
    c.lens_q = {3, 6, 1};
    c.lens_k = {5, 6, 4};
    c.causal = causal;
    c.window_left = causal ? 2 : -1;
    c.softcap = 3.f;
    std::mt19937 rng(11);
    AttnHost packed(c);
    packed.fill(rng);
    packed.run_cpu();
    for (size_t b = 0; b < c.lens_q.size(); ++b) {
      AttnCase d = c;
      d.lens_q.clear();
      d.lens_k.clear();
      d.batch = 1;
      d.seqlen_q = c.lens_q[b];
      d.seqlen_k = c.lens_k[b];
      AttnHost one(d);
      one.fill(rng);
      const int64_t q0 = packed.cu_q[b], k0 = packed.cu_k[b];
      one.q.each(
          [&](int64_t, int64_t s, int64_t h, int64_t e) { one.q.set(0, s, h, e, packed.q.at(0, q0 + s, h, e)); });
      one.dout.each(
          [&](int64_t, int64_t s, int64_t h, int64_t e) { one.dout.set(0, s, h, e, packed.dout.at(0, q0 + s, h, e)); });
      one.k.each([&](int64_t, int64_t s, int64_t h, int64_t e) {
        one.k.set(0, s, h, e, packed.k.at(0, k0 + s, h, e));
        one.v.set(0, s, h, e, packed.v.at(0, k0 + s, h, e));
      });
      one.run_cpu();
      one.o.each([&](int64_t, int64_t s, int64_t h, int64_t e) {
        ASSERT_EQ(one.o.at(0, s, h, e), packed.o.at(0, q0 + s, h, e));
        ASSERT_EQ(one.dq.at(0, s, h, e), packed.dq.at(0, q0 + s, h, e));
      });
      one.dk.each([&](int64_t, int64_t s, int64_t h, int64_t e) {
        ASSERT_EQ(one.dk.at(0, s, h, e), packed.dk.at(0, k0 + s, h, e));
        ASSERT_EQ(one.dv.at(0, s, h, e), packed.dv.at(0, k0 + s, h, e));
      });
      for (int64_t h = 0; h < c.heads_q; ++h)
        for (int64_t s = 0; s < d.seqlen_q; ++s)
          ASSERT_EQ(one.lse[size_t(h * d.seqlen_q + s)], packed.lse[size_t(h * c.rows_q() + q0 + s)]);
    }
  }
}

// (B, H, S, D) storage passed permuted gives the bits (B, S, H, D) storage gives.
TEST(AttentionReference, BhsdStridesEqualBshd) {
  AttnCase c = make("layout", DType::kFloat16, 2, 5, 6, 4, 2, 8);
  c.causal = true;
  AttnCase h = c;
  h.bhsd = true;
  std::mt19937 rng(5);
  AttnHost a(c), b(h, 2);
  a.fill(rng);
  b.fill(rng);
  using Pairs = std::vector<std::pair<HostAttn*, HostAttn*>>;
  for (auto [src, dst] : Pairs{{&a.q, &b.q}, {&a.k, &b.k}, {&a.v, &b.v}, {&a.dout, &b.dout}})
    src->each([&](int64_t i, int64_t s, int64_t hh, int64_t d) { dst->set(i, s, hh, d, src->at(i, s, hh, d)); });
  a.run_cpu();
  b.run_cpu();
  for (auto [x, y] : Pairs{{&a.o, &b.o}, {&a.dq, &b.dq}, {&a.dk, &b.dk}, {&a.dv, &b.dv}})
    x->each([&](int64_t i, int64_t s, int64_t hh, int64_t d) { ASSERT_EQ(x->at(i, s, hh, d), y->at(i, s, hh, d)); });
  EXPECT_EQ(a.lse, b.lse);
}

TEST(AttentionApi, CpuWorkspaceIsZeroAndInferenceNeedsNoLse) {
  AttnCase c = make("ws", DType::kBFloat16, 1, 4, 4, 2, 1, 8);
  std::mt19937 rng(1);
  AttnHost t(c);
  t.fill(rng);
  auto qv = t.q.view(), kv = t.k.view(), vv = t.v.view(), ov = t.o.view();
  size_t bytes = 123;
  ASSERT_EQ(tigon_attention_fwd_workspace_size(qv, kv, vv, nullptr, nullptr, c.params(), &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);
  bytes = 123;
  ASSERT_EQ(tigon_attention_bwd_workspace_size(qv, kv, vv, nullptr, nullptr, c.params(), &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);
  ASSERT_EQ(tigon_attention_fwd(qv, kv, vv, nullptr, nullptr, ov, nullptr, c.params(), nullptr, 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  EXPECT_FALSE(std::isnan(t.o.at(0, 3, 1, 7)));
}

// ---- argument checks -----------------------------------------------------------------------------------------------

struct Bad {
  std::string arg;
  std::function<tigon_status_t()> call;
};

TEST(AttentionApi, EveryBadArgumentIsNamed) {
  AttnCase c = make("api", DType::kBFloat16, 2, 4, 6, 4, 2, 8);
  std::mt19937 rng(2);
  AttnHost t(c);
  t.fill(rng);
  AttnCase vc = make("api_varlen", DType::kBFloat16, 0, 0, 0, 4, 2, 8);
  vc.lens_q = {3, 2};
  vc.lens_k = {4, 5};
  AttnHost u(vc);
  u.fill(rng);
  const tigon_attention_params ok = c.params(), vok = vc.params();
  auto qv = t.q.view(), kv = t.k.view(), vv = t.v.view(), ov = t.o.view(), lv = t.lse_view(), dov = t.dout.view();
  auto dqv = t.dq.view(), dkv = t.dk.view(), dvv = t.dv.view();
  auto uq = u.q.view(), uk = u.k.view(), uv = u.v.view(), uo = u.o.view(), ul = u.lse_view();
  auto ucq = u.cu_view(u.cu_q), uck = u.cu_view(u.cu_k);
  const auto bf = tigon::dtype::bfloat16;
  char* qd = static_cast<char*>(t.q.view().get()->data);
  // Shapes and layouts that are wrong in one way each.
  tigon::TensorView q3(qd, {2, 4, 32}, bf), q_f16(qd, {2, 4, 4, 8}, tigon::dtype::float16),
      q_i32(qd, {2, 4, 4, 8}, tigon::dtype::int32), q_d_strided(qd, {2, 4, 4, 4}, bf, tigon::cpu(), {128, 32, 8, 2}),
      q_neg(qd, {2, 4, 4, 8}, bf, tigon::cpu(), {128, -32, 8, 1}), q_gpu(qd, {2, 4, 4, 8}, bf, tigon::cuda(0)),
      q_d0(qd, {2, 4, 4, 0}, bf), q_h0(qd, {2, 4, 0, 8}, bf);
  std::vector<uint8_t> other(4096);
  tigon::TensorView k_d(other.data(), {2, 6, 2, 16}, bf), k_b(other.data(), {3, 6, 2, 8}, bf),
      k_h3(other.data(), {2, 6, 3, 8}, bf), v_s(other.data(), {2, 5, 2, 8}, bf),
      v_f16(other.data(), {2, 6, 2, 8}, tigon::dtype::float16), o_s(other.data(), {2, 4, 4, 9}, bf),
      o_stride0(other.data(), {2, 4, 4, 8}, bf, tigon::cpu(), {0, 32, 8, 1}),
      lse_shape(other.data(), {2, 4, 5}, tigon::dtype::float32), lse_bf(other.data(), {2, 4, 4}, bf),
      lse_strided(other.data(), {2, 4, 4}, tigon::dtype::float32, tigon::cpu(), {32, 8, 1}),
      dk_s(other.data(), {2, 6, 1, 8}, bf), dv_f16(other.data(), {2, 6, 2, 8}, tigon::dtype::float16),
      dout_s(other.data(), {2, 3, 4, 8}, bf);
  // q seen again, shifted by one element (overlaps q) and o over k's memory.
  tigon::TensorView o_over_q(qd + 2, {2, 4, 4, 8}, bf), o_is_q = qv;
  // variable length pieces
  // valid: cu_q = {0, 3, 5} (max_seqlen_q 3), cu_k = {0, 4, 9} (max_seqlen_k 5)
  std::vector<int32_t> cu_bad_start = {1, 3, 5}, cu_dec = {0, 3, 2}, cu_short = {0, 3, 4}, cu_long = {0, 1, 5},
                       cu_two = {0, 5}, cu_long_k = {0, 2, 9};
  std::vector<int64_t> cu64 = {0, 3, 5};
  tigon::TensorView cu_i64(cu64.data(), {3}, tigon::dtype::int64), cu_2d(u.cu_q.data(), {1, 3}, tigon::dtype::int32);
  auto cv = [&](std::vector<int32_t>& x) { return u.cu_view(x); };
  auto fwd = [&](const tigon_tensor* q, const tigon_tensor* k, const tigon_tensor* v, const tigon_tensor* o,
                 const tigon_tensor* l) {
    return tigon_attention_fwd(q, k, v, nullptr, nullptr, o, l, ok, nullptr, 0, nullptr);
  };
  auto with = [&](auto change) {  // the good call with one param changed
    tigon_attention_params r = ok;
    change(r);
    return tigon_attention_fwd(qv, kv, vv, nullptr, nullptr, ov, lv, r, nullptr, 0, nullptr);
  };
  auto vfwd = [&](const tigon_tensor* cq, const tigon_tensor* ck, tigon_attention_params pp) {
    return tigon_attention_fwd(uq, uk, uv, cq, ck, uo, ul, pp, nullptr, 0, nullptr);
  };
  auto bwd = [&](const tigon_tensor* dout, const tigon_tensor* o, const tigon_tensor* l, const tigon_tensor* dq,
                 const tigon_tensor* dk, const tigon_tensor* dv) {
    return tigon_attention_bwd(dout, qv, kv, vv, o, l, nullptr, nullptr, dq, dk, dv, ok, nullptr, 0, nullptr);
  };
  size_t bytes = 0;
  const std::vector<Bad> cases = {
      // params
      {"'scale'", [&] { return with([](auto& r) { r.scale = 0.f; }); }},
      {"'scale'", [&] { return with([](auto& r) { r.scale = INFINITY; }); }},
      {"'scale'", [&] { return with([](auto& r) { r.scale = NAN; }); }},
      {"'softcap'", [&] { return with([](auto& r) { r.softcap = -1.f; }); }},
      {"'softcap'", [&] { return with([](auto& r) { r.softcap = INFINITY; }); }},
      {"'causal'", [&] { return with([](auto& r) { r.causal = 2; }); }},
      {"'window_left'", [&] { return with([](auto& r) { r.window_left = -2; }); }},
      {"'window_right'", [&] { return with([](auto& r) { r.window_right = -5; }); }},
      {"'window_right'", [&] { return with([](auto& r) { r.causal = 1, r.window_right = 2; }); }},
      {"'deterministic'", [&] { return with([](auto& r) { r.deterministic = -1; }); }},
      // q, k, v
      {"'q'", [&] { return fwd(nullptr, kv, vv, ov, lv); }},
      {"'q'", [&] { return fwd(q3, kv, vv, ov, lv); }},
      {"'q'", [&] { return fwd(q_i32, kv, vv, ov, lv); }},
      {"'q'", [&] { return fwd(q_d_strided, kv, vv, ov, lv); }},
      {"'q'", [&] { return fwd(q_neg, kv, vv, ov, lv); }},
      {"'q'", [&] { return fwd(q_d0, kv, vv, ov, lv); }},
      {"'q'", [&] { return fwd(q_h0, kv, vv, ov, lv); }},
      {"'k'", [&] { return fwd(qv, nullptr, vv, ov, lv); }},
      {"'k'", [&] { return fwd(q_f16, kv, vv, ov, lv); }},  // k's dtype differs from q's
      {"'k'", [&] { return fwd(qv, k_d, vv, ov, lv); }},
      {"'k'", [&] { return fwd(qv, k_b, vv, ov, lv); }},
      {"'k'", [&] { return fwd(qv, k_h3, vv, ov, lv); }},   // 3 does not divide 4
      {"'k'", [&] { return fwd(q_gpu, kv, vv, ov, lv); }},  // device mismatch names the second tensor
      {"'v'", [&] { return fwd(qv, kv, nullptr, ov, lv); }},
      {"'v'", [&] { return fwd(qv, kv, v_s, ov, lv); }},
      {"'v'", [&] { return fwd(qv, kv, v_f16, ov, lv); }},
      // o, lse
      {"'o'", [&] { return fwd(qv, kv, vv, nullptr, lv); }},
      {"'o'", [&] { return fwd(qv, kv, vv, o_s, lv); }},
      {"'o'", [&] { return fwd(qv, kv, vv, o_is_q, lv); }},
      {"'o'", [&] { return fwd(qv, kv, vv, o_over_q, lv); }},
      {"'o'", [&] { return fwd(qv, kv, vv, o_stride0, lv); }},
      {"'lse'", [&] { return fwd(qv, kv, vv, ov, lse_shape); }},
      {"'lse'", [&] { return fwd(qv, kv, vv, ov, lse_bf); }},
      {"'lse'", [&] { return fwd(qv, kv, vv, ov, lse_strided); }},
      {"'lse'", [&] { return fwd(qv, kv, vv, ov, qv); }},  // also the wrong dtype: named before the overlap
      // variable length
      {"'cu_seqlens_k'", [&] { return vfwd(ucq, nullptr, vok); }},
      {"'cu_seqlens_q'", [&] { return vfwd(nullptr, uck, vok); }},
      {"'q'", [&] { return tigon_attention_fwd(qv, kv, vv, ucq, uck, ov, lv, vok, nullptr, 0, nullptr); }},
      {"'cu_seqlens_q'", [&] { return vfwd(cu_i64, uck, vok); }},
      {"'cu_seqlens_q'", [&] { return vfwd(cu_2d, uck, vok); }},
      {"'cu_seqlens_k'", [&] { return vfwd(ucq, cv(cu_two), vok); }},
      {"'cu_seqlens_q'", [&] { return vfwd(cv(cu_bad_start), uck, vok); }},
      {"'cu_seqlens_q'", [&] { return vfwd(cv(cu_dec), uck, vok); }},
      {"'cu_seqlens_q'", [&] { return vfwd(cv(cu_short), uck, vok); }},   // ends before the packed rows
      {"'cu_seqlens_q'", [&] { return vfwd(cv(cu_long), uck, vok); }},    // a length past max_seqlen_q = 3
      {"'cu_seqlens_k'", [&] { return vfwd(ucq, cv(cu_long_k), vok); }},  // a length past max_seqlen_k = 5
      {"'max_seqlen_q'",
       [&] {
         tigon_attention_params r = vok;
         r.max_seqlen_q = 0;
         return vfwd(ucq, uck, r);
       }},
      {"'max_seqlen_k'",
       [&] {
         tigon_attention_params r = vok;
         r.max_seqlen_k = -1;
         return vfwd(ucq, uck, r);
       }},
      {"'lse'", [&] { return tigon_attention_fwd(uq, uk, uv, ucq, uck, uo, lv, vok, nullptr, 0, nullptr); }},
      // backward
      {"'dout'", [&] { return bwd(dout_s, ov, lv, dqv, dkv, dvv); }},
      {"'dout'", [&] { return bwd(nullptr, ov, lv, dqv, dkv, dvv); }},
      {"'o'", [&] { return bwd(dov, o_s, lv, dqv, dkv, dvv); }},
      {"'lse'", [&] { return bwd(dov, ov, nullptr, dqv, dkv, dvv); }},
      {"'lse'", [&] { return bwd(dov, ov, lse_shape, dqv, dkv, dvv); }},
      {"'dq'", [&] { return bwd(dov, ov, lv, nullptr, dkv, dvv); }},
      {"'dq'", [&] { return bwd(dov, ov, lv, dov, dkv, dvv); }},  // over an input
      {"'dk'", [&] { return bwd(dov, ov, lv, dqv, dk_s, dvv); }},
      {"'dk'", [&] { return bwd(dov, ov, lv, dqv, kv, dvv); }},
      {"'dv'", [&] { return bwd(dov, ov, lv, dqv, dkv, dv_f16); }},
      {"'dv'", [&] { return bwd(dov, ov, lv, dqv, dkv, dkv); }},  // over another output
      {"'deterministic'",
       [&] {
         tigon_attention_params r = ok;
         r.deterministic = 2;
         return tigon_attention_bwd(dov, qv, kv, vv, ov, lv, nullptr, nullptr, dqv, dkv, dvv, r, nullptr, 0, nullptr);
       }},
      // workspace size queries
      {"'bytes'", [&] { return tigon_attention_fwd_workspace_size(qv, kv, vv, nullptr, nullptr, ok, nullptr); }},
      {"'k'", [&] { return tigon_attention_bwd_workspace_size(qv, k_d, vv, nullptr, nullptr, ok, &bytes); }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].call(), TIGON_ERROR_INVALID_ARGUMENT) << "case " << i << ": " << tigon_last_error();
    EXPECT_NE(std::string(tigon_last_error()).find("argument " + cases[i].arg), std::string::npos)
        << "case " << i << ": " << tigon_last_error();
  }
}

// Views that share a buffer without sharing elements are not overlaps: q, k, v and dq, dk, dv sliced out of one
// fused (B, S, 3, H, D) buffer each.
TEST(AttentionApi, SlicesOfOneFusedBufferAreNotOverlaps) {
  const int64_t B = 2, S = 5, H = 2, D = 8;
  std::mt19937 rng(9);
  std::normal_distribution<double> n;
  std::vector<float> qkv(size_t(B * S * 3 * H * D)), grads(qkv.size(), NAN), o(size_t(B * S * H * D)), dout(o.size()),
      lse(size_t(B * H * S));
  for (float& x : qkv) x = float(n(rng));
  for (float& x : dout) x = float(n(rng));
  auto slice = [&](std::vector<float>& buf, int which) {
    return tigon::TensorView(buf.data() + which * H * D, {B, S, H, D}, tigon::dtype::float32, tigon::cpu(),
                             {S * 3 * H * D, 3 * H * D, D, 1});
  };
  tigon::TensorView ov(o.data(), {B, S, H, D}, tigon::dtype::float32),
      dov(dout.data(), {B, S, H, D}, tigon::dtype::float32), lv(lse.data(), {B, H, S}, tigon::dtype::float32);
  auto q = slice(qkv, 0), k = slice(qkv, 1), v = slice(qkv, 2), dq = slice(grads, 0), dk = slice(grads, 1),
       dv = slice(grads, 2);
  const tigon_attention_params p{0.35f, 0.f, 1, -1, -1, 0, 0, 1};
  ASSERT_EQ(tigon_attention_fwd(q, k, v, nullptr, nullptr, ov, lv, p, nullptr, 0, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(tigon_attention_bwd(dov, q, k, v, ov, lv, nullptr, nullptr, dq, dk, dv, p, nullptr, 0, nullptr),
            TIGON_SUCCESS)
      << tigon_last_error();
  for (float x : grads) ASSERT_FALSE(std::isnan(x));
}

}  // namespace
