// Decode attention test cases, their host tensors, and the expected output from the naive materialised attention of
// attention_test_util.h run on each sequence's valid cache rows (causal, aligned bottom-right).
#pragma once

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "tigon/decode_attention.h"

namespace tigon_test {

struct DecodeCase {
  std::string name;
  DType dtype = DType::kBFloat16;
  int64_t tq = 1, s_max = 40, heads_q = 4, heads_kv = 1, head_dim = 64;
  std::vector<int32_t> lens = {40, 1, 17};  // cache_seqlens: the batch is its size
  std::vector<int32_t> starts;              // cache_starts (left padding), empty: none
  int32_t window_left = -1;
  float softcap = 0.f;
  bool bhsd = false;  // cache stored (B, H, S, D), passed permuted
  int64_t batch() const { return int64_t(lens.size()); }
  int64_t start(int64_t b) const { return starts.empty() ? 0 : starts[size_t(b)]; }
  float scale() const { return float(1.0 / std::sqrt(double(head_dim))); }
  tigon_decode_attention_params params() const { return {scale(), softcap, window_left}; }
};

inline void PrintTo(const DecodeCase& c, std::ostream* os) { *os << c.name; }

struct DecodeHost {
  DecodeCase c;
  HostAttn q, k, v, out;
  std::vector<float> lse;
  explicit DecodeHost(const DecodeCase& cs)
      : c(cs),
        q(cs.dtype, cs.batch(), cs.tq, cs.heads_q, cs.head_dim, false, false, 1),
        k(cs.dtype, cs.batch(), cs.s_max, cs.heads_kv, cs.head_dim, cs.bhsd, false, 1),
        v(cs.dtype, cs.batch(), cs.s_max, cs.heads_kv, cs.head_dim, cs.bhsd, false, 0),
        out(cs.dtype, cs.batch(), cs.tq, cs.heads_q, cs.head_dim, false, false, 0),
        lse(size_t(cs.batch() * cs.heads_q * cs.tq), NAN) {}
  void fill(std::mt19937& rng) {
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
    out.poison();
    // Cache rows before each sequence's start and past its length hold NaN: a kernel that reads one fails.
    for (int64_t b = 0; b < c.batch(); ++b)
      for (int64_t s = 0; s < c.s_max; ++s)
        if (s < c.start(b) || s >= c.lens[b])
          for (int64_t h = 0; h < c.heads_kv; ++h)
            for (int64_t d = 0; d < c.head_dim; ++d) k.set(b, s, h, d, std::nan("")), v.set(b, s, h, d, std::nan(""));
  }
  // cache_starts' view, or NULL for a case without starts.
  const tigon_tensor* starts_arg(std::optional<tigon::TensorView>& holder, void* ptr = nullptr,
                                 tigon_device dev = tigon::cpu()) {
    if (c.starts.empty()) return nullptr;
    holder.emplace(ptr ? ptr : c.starts.data(), std::vector<int64_t>{c.batch()}, tigon::dtype::int32, dev);
    return holder->get();
  }
  tigon::TensorView lens_view(void* ptr = nullptr, tigon_device dev = tigon::cpu()) {
    return tigon::TensorView(ptr ? ptr : c.lens.data(), {c.batch()}, tigon::dtype::int32, dev);
  }
  tigon::TensorView lse_view(void* ptr = nullptr, tigon_device dev = tigon::cpu()) {
    return tigon::TensorView(ptr ? ptr : lse.data(), {c.batch(), c.heads_q, c.tq}, tigon::dtype::float32, dev);
  }

  // Expected out ([B, tq, Hq, D] fp64) and lse ([B, Hq, tq]): naive attention on each sequence's valid rows
  // [start, L), the new tokens aligned to L.
  void expected(Dense* o, std::vector<double>* l) const {
    *o = Dense(c.batch(), c.tq, c.heads_q, c.head_dim);
    l->assign(size_t(c.batch() * c.heads_q * c.tq), 0.0);
    for (int64_t b = 0; b < c.batch(); ++b) {
      const int64_t S = c.start(b), L = c.lens[b] - S;
      AttnCase a;
      a.batch = 1, a.seqlen_q = c.tq, a.seqlen_k = L, a.heads_q = c.heads_q, a.heads_kv = c.heads_kv;
      a.head_dim = c.head_dim, a.causal = true, a.window_left = c.window_left, a.softcap = c.softcap;
      Dense qd(1, c.tq, c.heads_q, c.head_dim), kd(1, L, c.heads_kv, c.head_dim), vd = kd;
      q.each([&](int64_t bb, int64_t s, int64_t h, int64_t d) {
        if (bb == b) qd.at(0, s, h, d) = q.at(bb, s, h, d);
      });
      for (int64_t s = 0; s < L; ++s)
        for (int64_t h = 0; h < c.heads_kv; ++h)
          for (int64_t d = 0; d < c.head_dim; ++d)
            kd.at(0, s, h, d) = k.at(b, S + s, h, d), vd.at(0, s, h, d) = v.at(b, S + s, h, d);
      const NaiveResult r = naive_attention(a, qd, kd, vd, nullptr);
      for (int64_t t = 0; t < c.tq; ++t)
        for (int64_t h = 0; h < c.heads_q; ++h) {
          for (int64_t d = 0; d < c.head_dim; ++d)
            o->at(b, t, h, d) = r.o.v[size_t((t * c.heads_q + h) * c.head_dim + d)];
          (*l)[size_t((b * c.heads_q + h) * c.tq + t)] = r.lse[size_t(h * c.tq + t)];
        }
    }
  }
};

// Largest lse difference relative to 1 + |lse|; -inf must match exactly.
inline double worst_lse(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      if (!(std::isinf(got[i]) && got[i] < 0)) return INFINITY;
      continue;
    }
    worst = std::isnan(got[i]) ? INFINITY : std::max(worst, std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i])));
  }
  return worst;
}

}  // namespace tigon_test
