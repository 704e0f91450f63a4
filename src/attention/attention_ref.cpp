// Attention CPU reference. Written to be read, not to be fast: one query row at a time, scores and sums in fp64, each
// output element rounded once to its dtype. The backward reads o and lse as the forward stored them (o in its dtype,
// lse in fp32), as the CUDA kernels do.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/attention.h"
#include "common/host_float.h"

namespace tigon::attention {
namespace {

// One sequence of one batch entry: where its rows start in q/o (and k/v) and how many there are.
struct Seq {
  int64_t b, q_start, q_len, k_start, k_len;
};

Seq sequence(const Shape& s, int64_t b) {
  if (!s.varlen()) return {b, 0, s.seqlen_q, 0, s.seqlen_k};
  const int64_t q0 = s.cu_seqlens_q[b], k0 = s.cu_seqlens_k[b];
  // Rows past the bound are not computed (the C API refuses such lengths on the CPU; the kernels cannot see them).
  return {b, q0, std::min<int64_t>(s.cu_seqlens_q[b + 1] - q0, s.seqlen_q), k0,
          std::min<int64_t>(s.cu_seqlens_k[b + 1] - k0, s.seqlen_k)};
}

int64_t index(const Tensor4& t, int64_t b, int64_t row, int64_t h) {
  return b * t.batch_stride + row * t.seq_stride + h * t.head_stride;
}

// Head vector `h` of packed row `row` (sequence-local rows are offset by the caller), widened to fp64.
std::vector<double> load_row(const Tensor4& t, DType dt, int64_t b, int64_t row, int64_t h, int64_t dim) {
  std::vector<double> out(dim);
  const int64_t base = index(t, b, row, h);
  for (int64_t d = 0; d < dim; ++d) out[d] = load_elem(t.data, dt, base + d);
  return out;
}

void store_row(const Tensor4& t, DType dt, int64_t b, int64_t row, int64_t h, const std::vector<double>& v) {
  const int64_t base = index(t, b, row, h);
  for (size_t d = 0; d < v.size(); ++d) store_elem(t.data, dt, base + int64_t(d), v[d]);
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double acc = 0;
  for (size_t d = 0; d < a.size(); ++d) acc += a[d] * b[d];
  return acc;
}

// The keys row i sees: [first, last] (empty when first > last), the causal diagonal aligned bottom-right.
void visible_keys(const Shape& s, const Seq& q, int64_t i, int64_t* first, int64_t* last) {
  const int64_t diag = i + q.k_len - q.q_len;
  *first = s.window_left >= 0 ? std::max<int64_t>(0, diag - s.window_left) : 0;
  *last = s.window_right >= 0 ? std::min<int64_t>(q.k_len - 1, diag + s.window_right) : q.k_len - 1;
}

// scale * q.k, through the softcap when there is one.
double score(const Shape& s, const std::vector<double>& q, const std::vector<double>& k) {
  const double x = double(s.scale) * dot(q, k);
  return s.softcap > 0.f ? double(s.softcap) * std::tanh(x / double(s.softcap)) : x;
}

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const Shape& s = p.s;
  const int64_t D = s.head_dim;
  for (int64_t b = 0; b < s.batch; ++b) {
    const Seq sq = sequence(s, b);
    const int64_t qb = s.varlen() ? 0 : b;  // the batch index into the tensors (packed: one "batch")
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / s.group();
      std::vector<std::vector<double>> keys(sq.k_len), values(sq.k_len);
      for (int64_t j = 0; j < sq.k_len; ++j) {
        keys[j] = load_row(p.k, s.dtype, qb, sq.k_start + j, hk, D);
        values[j] = load_row(p.v, s.dtype, qb, sq.k_start + j, hk, D);
      }
      for (int64_t i = 0; i < sq.q_len; ++i) {
        int64_t first, last;
        visible_keys(s, sq, i, &first, &last);
        std::vector<double> out(D, 0.0);
        double lse = -std::numeric_limits<double>::infinity();
        if (first <= last) {
          const std::vector<double> q = load_row(p.q, s.dtype, qb, sq.q_start + i, h, D);
          std::vector<double> sc(last - first + 1);
          for (int64_t j = first; j <= last; ++j) sc[j - first] = score(s, q, keys[j]);
          const double mx = *std::max_element(sc.begin(), sc.end());
          double sum = 0;
          for (double x : sc) sum += std::exp(x - mx);
          lse = mx + std::log(sum);
          for (int64_t j = first; j <= last; ++j) {
            const double pj = std::exp(sc[j - first] - lse);
            for (int64_t d = 0; d < D; ++d) out[d] += pj * values[j][d];
          }
        }
        store_row(p.o, s.dtype, qb, sq.q_start + i, h, out);
        if (p.lse) p.lse[lse_offset(s, b, h, i, sq.q_start)] = float(lse);
      }
    }
  }
}

void bwd_cpu(const BwdProblem& p) {
  const Shape& s = p.s;
  const int64_t D = s.head_dim;
  for (int64_t b = 0; b < s.batch; ++b) {
    const Seq sq = sequence(s, b);
    const int64_t qb = s.varlen() ? 0 : b;
    for (int64_t hk = 0; hk < s.heads_kv; ++hk) {
      std::vector<std::vector<double>> keys(sq.k_len), values(sq.k_len);
      std::vector<std::vector<double>> dk(sq.k_len, std::vector<double>(D, 0.0)), dv = dk;
      for (int64_t j = 0; j < sq.k_len; ++j) {
        keys[j] = load_row(p.k, s.dtype, qb, sq.k_start + j, hk, D);
        values[j] = load_row(p.v, s.dtype, qb, sq.k_start + j, hk, D);
      }
      // dk and dv sum over every query head of the group, so they are stored once the group is done.
      for (int64_t h = hk * s.group(); h < (hk + 1) * s.group(); ++h) {
        for (int64_t i = 0; i < sq.q_len; ++i) {
          const int64_t row = sq.q_start + i;
          std::vector<double> dq(D, 0.0);
          const double lse = p.lse[lse_offset(s, b, h, i, sq.q_start)];
          int64_t first, last;
          visible_keys(s, sq, i, &first, &last);
          if (first <= last && std::isfinite(lse)) {
            const std::vector<double> q = load_row(p.q, s.dtype, qb, row, h, D);
            const std::vector<double> dout = load_row(p.dout, s.dtype, qb, row, h, D);
            const double Di = dot(dout, load_row(p.o, s.dtype, qb, row, h, D));  // o as stored
            for (int64_t j = first; j <= last; ++j) {
              const double sc = score(s, q, keys[j]);
              const double pij = std::exp(sc - lse);
              double ds = pij * (dot(dout, values[j]) - Di);
              if (s.softcap > 0.f) ds *= 1.0 - (sc / s.softcap) * (sc / s.softcap);  // d(c tanh(x/c))/dx
              for (int64_t d = 0; d < D; ++d) {
                dv[j][d] += pij * dout[d];
                dq[d] += double(s.scale) * ds * keys[j][d];
                dk[j][d] += double(s.scale) * ds * q[d];
              }
            }
          }
          store_row(p.dq, s.dtype, qb, row, h, dq);
        }
      }
      for (int64_t j = 0; j < sq.k_len; ++j) {
        store_row(p.dk, s.dtype, qb, sq.k_start + j, hk, dk[j]);
        store_row(p.dv, s.dtype, qb, sq.k_start + j, hk, dv[j]);
      }
    }
  }
}

}  // namespace tigon::attention
