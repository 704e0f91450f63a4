// MoE experts CPU reference. Written for clarity, not speed: each (token, choice) pair runs through its expert in
// fp64, rounded to the dtype at the points the CUDA path rounds (each GEMM's output, the gate's product, the combine
// over choices, the weight gradients once after their sum over the expert's pairs).
#include <vector>

#include "common/activation_math.h"
#include "common/host_float.h"
#include "moe/moe.h"

namespace tigon::moe {

namespace {

// Expert of pair i = t * k + j, or -1 for a sentinel outside [0, E).
int64_t expert_of(const Problem& p, int64_t i) {
  const double e = load_elem(p.ids, p.ids_dtype, i);
  return e >= 0 && e < double(p.experts) ? int64_t(e) : -1;
}

double x_at(const Problem& p, int64_t t, int64_t c) { return load_elem(p.x, p.dtype, t * p.x_stride + c); }

// The forward of one pair: gu = round(x W_gu^T) [2I] and h = round(act(gate) up) [I].
void gate_up_of(const Problem& p, int64_t t, int64_t e, std::vector<double>& gu, std::vector<double>& h) {
  const int64_t H = p.hidden, I = p.inter;
  gu.assign(2 * I, 0.0);
  h.assign(I, 0.0);
  for (int64_t n = 0; n < 2 * I; ++n) {
    double s = 0;
    for (int64_t c = 0; c < H; ++c) s += x_at(p, t, c) * load_elem(p.gate_up, p.dtype, (e * 2 * I + n) * H + c);
    gu[n] = round_to(p.dtype, s);
  }
  for (int64_t n = 0; n < I; ++n) h[n] = round_to(p.dtype, glu_activation_ref(p.activation, gu[n]).act * gu[I + n]);
}

}  // namespace

void fwd_cpu(const Fwd& f) {
  const Problem& p = f.p;
  const int64_t H = p.hidden, I = p.inter;
  std::vector<double> gu, h, acc(H);
  for (int64_t t = 0; t < p.tokens; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < p.k; ++j) {
      const int64_t e = expert_of(p, t * p.k + j);
      if (e < 0) continue;
      const double w = load_elem(p.weights, p.weights_dtype, t * p.k + j);
      gate_up_of(p, t, e, gu, h);
      for (int64_t c = 0; c < H; ++c) {
        double y = 0;
        for (int64_t n = 0; n < I; ++n) y += h[n] * load_elem(p.down, p.dtype, (e * H + c) * I + n);
        acc[c] += w * round_to(p.dtype, y);
      }
    }
    for (int64_t c = 0; c < H; ++c) store_elem(f.out, p.dtype, t * f.out_stride + c, acc[c]);
  }
}

void bwd_cpu(const Bwd& b) {
  const Problem& p = b.p;
  const int64_t H = p.hidden, I = p.inter, E = p.experts;
  // Weight gradients summed in fp64 over every pair, rounded once at the end; experts nobody chose stay 0.
  std::vector<double> dgu_w(b.dgate_up ? size_t(E * 2 * I * H) : 0), ddown_w(b.ddown ? size_t(E * H * I) : 0);
  std::vector<double> gu, h, dh(I), dgu(2 * I), dx(H);
  for (int64_t t = 0; t < p.tokens; ++t) {
    std::fill(dx.begin(), dx.end(), 0.0);
    for (int64_t j = 0; j < p.k; ++j) {
      const int64_t i = t * p.k + j, e = expert_of(p, i);
      if (e < 0) {
        if (b.dweights) store_elem(b.dweights, p.weights_dtype, i, 0.0);
        continue;
      }
      const double w = load_elem(p.weights, p.weights_dtype, i);
      gate_up_of(p, t, e, gu, h);
      double dw = 0;
      for (int64_t n = 0; n < I; ++n) {  // dh = round(g W_d), g = dout[t]
        double s = 0;
        for (int64_t c = 0; c < H; ++c)
          s += load_elem(b.dout, p.dtype, t * b.dout_stride + c) * load_elem(p.down, p.dtype, (e * H + c) * I + n);
        dh[n] = round_to(p.dtype, s);
        dw += dh[n] * h[n];
      }
      if (b.dweights) store_elem(b.dweights, p.weights_dtype, i, dw);
      for (int64_t n = 0; n < I; ++n) {
        const ActAndGrad a = glu_activation_ref(p.activation, gu[n]);
        const double u = w * dh[n];
        dgu[n] = round_to(p.dtype, u * gu[I + n] * a.grad);
        dgu[I + n] = round_to(p.dtype, u * a.act);
      }
      if (b.ddown)
        for (int64_t c = 0; c < H; ++c) {
          const double g = load_elem(b.dout, p.dtype, t * b.dout_stride + c);
          for (int64_t n = 0; n < I; ++n) ddown_w[(e * H + c) * I + n] += g * round_to(p.dtype, w * h[n]);
        }
      if (b.dgate_up)
        for (int64_t n = 0; n < 2 * I; ++n)
          for (int64_t c = 0; c < H; ++c) dgu_w[(e * 2 * I + n) * H + c] += dgu[n] * x_at(p, t, c);
      for (int64_t c = 0; c < H; ++c) {
        double s = 0;
        for (int64_t n = 0; n < 2 * I; ++n) s += dgu[n] * load_elem(p.gate_up, p.dtype, (e * 2 * I + n) * H + c);
        dx[c] += round_to(p.dtype, s);
      }
    }
    if (b.dx)
      for (int64_t c = 0; c < H; ++c) store_elem(b.dx, p.dtype, t * b.dx_stride + c, dx[c]);
  }
  for (size_t i = 0; i < dgu_w.size(); ++i) store_elem(b.dgate_up, p.dtype, int64_t(i), dgu_w[i]);
  for (size_t i = 0; i < ddown_w.size(); ++i) store_elem(b.ddown, p.dtype, int64_t(i), ddown_w[i]);
}

}  // namespace tigon::moe
