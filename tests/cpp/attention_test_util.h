// Attention test cases, host tensors in either layout (dense or packed), and the naive fp64 attention both attention
// test files check against: the full score matrix materialised, the mask built from key and query positions.
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tigon/attention.h"

namespace tigon_test {

struct AttnCase {
  std::string name;
  DType dtype = DType::kFloat32;
  int64_t batch = 1, seqlen_q = 5, seqlen_k = 5, heads_q = 2, heads_kv = 1, head_dim = 8;
  bool causal = false;
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  float scale = 0.f;                    // 0: 1/sqrt(head_dim)
  bool bhsd = false;                    // tensors stored (B, H, S, D), passed permuted to (B, S, H, D)
  std::vector<int32_t> lens_q, lens_k;  // variable length when non-empty (batch = their size)

  bool varlen() const { return !lens_q.empty(); }
  int64_t total(const std::vector<int32_t>& lens) const {
    int64_t t = 0;
    for (int32_t l : lens) t += l;
    return t;
  }
  int64_t rows_q() const { return varlen() ? total(lens_q) : seqlen_q; }  // per tensor batch entry
  int64_t rows_k() const { return varlen() ? total(lens_k) : seqlen_k; }
  int64_t batches() const { return varlen() ? int64_t(lens_q.size()) : batch; }
  int64_t tensor_batch() const { return varlen() ? 1 : batch; }
  float scale_value() const { return scale > 0.f ? scale : float(1.0 / std::sqrt(double(head_dim))); }
  int32_t max_len(const std::vector<int32_t>& lens) const {
    int32_t m = 1;
    for (int32_t l : lens) m = std::max(m, l);
    return m;
  }
  tigon_attention_params params(int32_t deterministic = 1) const {
    return {scale_value(),
            softcap,
            causal ? 1 : 0,
            window_left,
            window_right,
            varlen() ? max_len(lens_q) : 0,
            varlen() ? max_len(lens_k) : 0,
            deterministic};
  }
  std::vector<int32_t> cu(const std::vector<int32_t>& lens) const {
    std::vector<int32_t> c(1, 0);
    for (int32_t l : lens) c.push_back(c.back() + l);
    return c;
  }
};

inline void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name; }  // gtest's name for a case

// Logical [B, S, H, D] (packed: B = 1, S = total rows), stored (B, S, H, D) or (B, H, S, D) with `pad` spare heads
// (rows for BHSD) between neighbours, so strides are not the contiguous ones.
struct HostAttn {
  DType dtype;
  int64_t B, S, H, D;
  bool packed;
  std::array<int64_t, 4> stride;  // logical order b, s, h, d
  std::vector<uint8_t> bytes;
  HostAttn(DType t, int64_t b, int64_t s, int64_t h, int64_t d, bool bhsd, bool packed_, int64_t pad = 0)
      : dtype(t), B(b), S(s), H(h), D(d), packed(packed_) {
    stride[3] = 1;
    if (bhsd) {
      stride[1] = D;
      stride[2] = (S + pad) * D;
      stride[0] = H * stride[2];
    } else {
      stride[2] = D;
      stride[1] = (H + pad) * D;
      stride[0] = S * stride[1];
    }
    bytes.resize(size_t(std::max<int64_t>(1, B * stride[0]) * tigon::dtype_bytes(t)) + 16);
  }
  int64_t index(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return b * stride[0] + s * stride[1] + h * stride[2] + d;
  }
  double at(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return tigon::load_elem(bytes.data(), dtype, index(b, s, h, d));
  }
  void set(int64_t b, int64_t s, int64_t h, int64_t d, double v) {
    tigon::store_elem(bytes.data(), dtype, index(b, s, h, d), v);
  }
  template <class F>
  void each(F f) const {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) f(b, s, h, d);
  }
  void fill_random(std::mt19937& rng, double sigma = 1.0) {
    std::normal_distribution<double> n(0.0, sigma);
    each([&](int64_t b, int64_t s, int64_t h, int64_t d) { set(b, s, h, d, n(rng)); });
  }
  void poison() {
    each([&](int64_t b, int64_t s, int64_t h, int64_t d) { set(b, s, h, d, std::nan("")); });
  }
  // Values in logical order, fp64.
  std::vector<double> values() const {
    std::vector<double> out;
    each([&](int64_t b, int64_t s, int64_t h, int64_t d) { out.push_back(at(b, s, h, d)); });
    return out;
  }
  tigon::TensorView view(void* ptr = nullptr, tigon_device dev = tigon::cpu()) const {
    void* p = ptr ? ptr : const_cast<uint8_t*>(bytes.data());
    if (packed) return tigon::TensorView(p, {S, H, D}, to_dl(dtype), dev, {stride[1], stride[2], 1});
    return tigon::TensorView(p, {B, S, H, D}, to_dl(dtype), dev, {stride[0], stride[1], stride[2], 1});
  }
};

// Logical [B, S, H, D] fp64 arrays, and the naive attention over them.
struct Dense {
  int64_t B, S, H, D;
  std::vector<double> v;
  Dense(int64_t b, int64_t s, int64_t h, int64_t d) : B(b), S(s), H(h), D(d), v(size_t(b * s * h * d), 0.0) {}
  double& at(int64_t b, int64_t s, int64_t h, int64_t d) { return v[size_t(((b * S + s) * H + h) * D + d)]; }
};

inline Dense dense_of(const HostAttn& t) {
  Dense out(t.B, t.S, t.H, t.D);
  out.v = t.values();
  return out;
}

struct NaiveResult {
  Dense o, dq, dk, dv;
  std::vector<double> lse;  // the library's layout: [B, Hq, Sq] or [Hq, total_q]
};

// Per sequence and query head: S = scale q k^T (capped), a visibility matrix from absolute positions (query i sits at
// key position i + Lk - Lq), P = softmax over visible keys, O = P V; backward by the matrix formulas with
// D = rowsum(P * dP), which equals rowsum(dO * O) in exact arithmetic.
inline NaiveResult naive_attention(const AttnCase& c, Dense& q, Dense& k, Dense& v, Dense* dout) {
  NaiveResult r{
      Dense(q.B, q.S, q.H, q.D), Dense(q.B, q.S, q.H, q.D), Dense(k.B, k.S, k.H, k.D), Dense(k.B, k.S, k.H, k.D), {}};
  const int64_t Hq = c.heads_q, group = c.heads_q / c.heads_kv, D = c.head_dim;
  r.lse.assign(size_t(Hq * c.tensor_batch() * c.rows_q()), 0.0);
  const double scale = c.scale_value(), cap = c.softcap;
  const std::vector<int32_t> cq = c.cu(c.lens_q), ck = c.cu(c.lens_k);
  for (int64_t b = 0; b < c.batches(); ++b) {
    const int64_t tb = c.varlen() ? 0 : b;
    const int64_t q0 = c.varlen() ? cq[b] : 0, k0 = c.varlen() ? ck[b] : 0;
    const int64_t Lq = c.varlen() ? c.lens_q[b] : c.seqlen_q, Lk = c.varlen() ? c.lens_k[b] : c.seqlen_k;
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      std::vector<std::vector<double>> S(Lq, std::vector<double>(Lk)), P = S;
      std::vector<std::vector<bool>> vis(Lq, std::vector<bool>(Lk));
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t j = 0; j < Lk; ++j) {
          const int64_t pos = i + Lk - Lq;
          bool ok = true;
          if (c.causal && j > pos) ok = false;
          if (!c.causal && c.window_right >= 0 && j - pos > c.window_right) ok = false;
          if (c.window_left >= 0 && pos - j > c.window_left) ok = false;
          vis[i][j] = ok;
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += q.at(tb, q0 + i, h, d) * k.at(tb, k0 + j, hk, d);
          x *= scale;
          S[i][j] = cap > 0 ? cap * std::tanh(x / cap) : x;
        }
      for (int64_t i = 0; i < Lq; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < Lk; ++j)
          if (vis[i][j]) mx = std::max(mx, S[i][j]);
        for (int64_t j = 0; j < Lk; ++j)
          if (vis[i][j]) sum += std::exp(S[i][j] - mx);
        const double lse = sum > 0 ? mx + std::log(sum) : -INFINITY;
        const size_t li = c.varlen() ? size_t(h * c.rows_q() + q0 + i) : size_t((b * Hq + h) * c.seqlen_q + i);
        r.lse[li] = lse;
        for (int64_t j = 0; j < Lk; ++j) P[i][j] = vis[i][j] ? std::exp(S[i][j] - lse) : 0.0;
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < Lk; ++j) o += P[i][j] * v.at(tb, k0 + j, hk, d);
          r.o.at(tb, q0 + i, h, d) = o;
        }
      }
      if (!dout) continue;
      for (int64_t i = 0; i < Lq; ++i) {
        std::vector<double> dP(Lk, 0.0);
        double Di = 0;
        for (int64_t j = 0; j < Lk; ++j) {
          for (int64_t d = 0; d < D; ++d) dP[j] += dout->at(tb, q0 + i, h, d) * v.at(tb, k0 + j, hk, d);
          Di += P[i][j] * dP[j];
        }
        for (int64_t j = 0; j < Lk; ++j) {
          double dS = P[i][j] * (dP[j] - Di);
          if (cap > 0) dS *= 1.0 - std::pow(S[i][j] / cap, 2);
          for (int64_t d = 0; d < D; ++d) {
            r.dq.at(tb, q0 + i, h, d) += scale * dS * k.at(tb, k0 + j, hk, d);
            r.dk.at(tb, k0 + j, hk, d) += scale * dS * q.at(tb, q0 + i, h, d);
            r.dv.at(tb, k0 + j, hk, d) += P[i][j] * dout->at(tb, q0 + i, h, d);
          }
        }
      }
    }
  }
  return r;
}

// The tensors of one attention problem on the host, laid out as the case says.
struct AttnHost {
  AttnCase c;
  HostAttn q, k, v, o, dout, dq, dk, dv;
  std::vector<float> lse;
  std::vector<int32_t> cu_q, cu_k;
  explicit AttnHost(const AttnCase& cs, int64_t pad = 0)
      : c(cs),
        q(make(cs.heads_q, true, pad)),
        k(make(cs.heads_kv, false, pad)),
        v(make(cs.heads_kv, false, 0)),
        o(make(cs.heads_q, true, 0)),
        dout(make(cs.heads_q, true, pad)),
        dq(make(cs.heads_q, true, pad)),
        dk(make(cs.heads_kv, false, 0)),
        dv(make(cs.heads_kv, false, pad)),
        lse(size_t(cs.heads_q * cs.tensor_batch() * cs.rows_q()), NAN),
        cu_q(cs.cu(cs.lens_q)),
        cu_k(cs.cu(cs.lens_k)) {}
  HostAttn make(int64_t heads, bool is_q, int64_t pad) const {
    return HostAttn(c.dtype, c.tensor_batch(), is_q ? c.rows_q() : c.rows_k(), heads, c.head_dim, c.bhsd, c.varlen(),
                    pad);
  }
  void fill(std::mt19937& rng) {
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
    dout.fill_random(rng);
    for (HostAttn* t : {&o, &dq, &dk, &dv}) t->poison();
  }
  std::vector<int64_t> lse_shape() const {
    return c.varlen() ? std::vector<int64_t>{c.heads_q, c.rows_q()}
                      : std::vector<int64_t>{c.batch, c.heads_q, c.seqlen_q};
  }
  tigon::TensorView lse_view(void* ptr = nullptr, tigon_device dev = tigon::cpu()) {
    return tigon::TensorView(ptr ? ptr : lse.data(), lse_shape(), tigon::dtype::float32, dev);
  }
  tigon::TensorView cu_view(std::vector<int32_t>& cu, void* ptr = nullptr, tigon_device dev = tigon::cpu()) {
    return tigon::TensorView(ptr ? ptr : cu.data(), {int64_t(cu.size())}, tigon::dtype::int32, dev);
  }
  // Runs forward then backward on the host through the C API.
  void run_cpu(int32_t deterministic = 1) {
    auto qv = q.view(), kv = k.view(), vv = v.view(), ov = o.view(), lv = lse_view();
    auto cq = cu_view(cu_q), ck = cu_view(cu_k), dov = dout.view(), dqv = dq.view(), dkv = dk.view(), dvv = dv.view();
    const tigon_tensor* cqp = c.varlen() ? cq.get() : nullptr;
    const tigon_tensor* ckp = c.varlen() ? ck.get() : nullptr;
    const tigon_attention_params p = c.params(deterministic);
    tigon::check(tigon_attention_fwd(qv, kv, vv, cqp, ckp, ov, lv, p, nullptr, 0, nullptr));
    tigon::check(tigon_attention_bwd(dov, qv, kv, vv, ov, lv, cqp, ckp, dqv, dkv, dvv, p, nullptr, 0, nullptr));
  }
};

// Largest |got - want| / (tol * (max|want| + |want|)) over a tensor; <= 1 passes. NaN in got fails.
inline double worst_attn(const HostAttn& got, Dense& want, double tol) {
  double mx = 0;
  for (double x : want.v) mx = std::max(mx, std::fabs(x));
  double worst = 0;
  got.each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
    const double g = got.at(b, s, h, d), w = want.at(b, s, h, d);
    worst = std::isnan(g) ? INFINITY : std::max(worst, std::fabs(g - w) / (tol * (mx + std::fabs(w)) + 1e-300));
  });
  return worst;
}

}  // namespace tigon_test
