// Cross entropy CPU reference. Written for clarity, not speed: each row in fp64, the formulas of
// include/tigon/cross_entropy.h term by term, the gradient rounded once to the logits' dtype.
#include <cmath>
#include <limits>
#include <vector>

#include "common/host_float.h"
#include "cross_entropy/cross_entropy.h"

namespace tigon::cross_entropy {
namespace {

int64_t target_of(const FwdProblem& p, int64_t row) {
  return p.target64 ? static_cast<const int64_t*>(p.target)[row] : static_cast<const int32_t*>(p.target)[row];
}

double class_weight(const FwdProblem& p, int64_t c) { return p.weight ? double(p.weight[c]) : 1.0; }

// One row after soft-capping, with its log-sum-exp and the index of the first maximum of the raw logits.
struct Row {
  std::vector<double> x;     // x'_c (soft-capped when softcap > 0)
  std::vector<double> dcap;  // d x'_c / d x_c
  double lse = 0;
  int64_t argmax = 0;
};

Row read_row(const FwdProblem& p, int64_t r) {
  const RowMatrix& m = p.logits;
  Row row;
  row.x.resize(m.cols);
  row.dcap.assign(m.cols, 1.0);
  double best = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < m.cols; ++c) {
    const double raw = load_elem(m.data, m.dtype, r * m.row_stride + c);
    if (c == 0 || raw > best) {  // strictly greater: the first maximum wins, as torch.argmax
      best = raw;
      row.argmax = c;
    }
    row.x[c] = raw;
    if (p.softcap > 0) {
      const double t = std::tanh(raw / p.softcap);
      row.x[c] = p.softcap * t;
      row.dcap[c] = 1.0 - t * t;
    }
  }
  double mx = -std::numeric_limits<double>::infinity();
  for (double v : row.x) mx = std::max(mx, v);
  double s = 0;
  for (double v : row.x) s += std::exp(v - mx);
  row.lse = mx + std::log(s);
  return row;
}

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const int64_t rows = p.logits.rows, V = p.logits.cols;
  const double eps = p.smoothing;
  double weight_all = 0;  // sum over every class of w[c]
  for (int64_t c = 0; c < V; ++c) weight_all += class_weight(p, c);

  // Denominators first: the gradient of MEAN needs them.
  double W = 0, C = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = target_of(p, r);
    if (t == p.ignore_index) continue;
    W += class_weight(p, t);
    C += 1;
  }
  const bool mean = p.reduction == TIGON_REDUCTION_MEAN, none = p.reduction == TIGON_REDUCTION_NONE;
  const double ce_scale = mean ? 1.0 / W : 1.0, z_scale = mean ? 1.0 / C : 1.0;

  double ce_sum = 0, z_sum = 0, correct_sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = target_of(p, r);
    double ce = 0, z = 0, correct = 0;
    if (p.predicted) p.predicted[r] = -1;  // ignored rows keep it
    if (t == p.ignore_index) {
      if (p.grad.data)
        for (int64_t c = 0; c < V; ++c) store_elem(p.grad.data, p.grad.dtype, r * p.grad.row_stride + c, 0.0);
    } else {
      // Read every logit before writing any gradient: grad may be the logits themselves.
      const Row row = read_row(p, r);
      const double wt = class_weight(p, t);
      ce = (1 - eps) * wt * (row.lse - row.x[t]);
      if (eps > 0) {        // only then: a masked (-inf) logit makes the sum infinite, and 0 * inf would be NaN
        double smooth = 0;  // sum_c w[c] * (lse - x'_c)
        for (int64_t c = 0; c < V; ++c) smooth += class_weight(p, c) * (row.lse - row.x[c]);
        ce += eps / double(V) * smooth;
      }
      z = double(p.z_scale) * row.lse * row.lse;
      correct = row.argmax == t ? 1.0 : 0.0;
      if (p.predicted) p.predicted[r] = row.argmax;
      // token scaling: the row's terms and gradient times the target's probability, a constant to the gradient
      const double s = p.token_scaling ? std::exp(row.x[t] - row.lse) : 1.0;
      ce *= s;
      z *= s;
      if (p.grad.data) {
        for (int64_t c = 0; c < V; ++c) {
          const double prob = std::exp(row.x[c] - row.lse);
          double g = ce_scale * ((1 - eps) * wt * (prob - (c == t ? 1.0 : 0.0)) +
                                 eps / double(V) * (weight_all * prob - class_weight(p, c)));
          g += z_scale * 2.0 * double(p.z_scale) * row.lse * prob;
          store_elem(p.grad.data, p.grad.dtype, r * p.grad.row_stride + c, s * g * row.dcap[c]);
        }
      }
    }
    if (none) {
      p.loss[r] = float(ce + z);
      if (p.z_loss) p.z_loss[r] = float(z);
      if (p.accuracy) p.accuracy[r] = float(correct);
    }
    ce_sum += ce;
    z_sum += z;
    correct_sum += correct;
  }
  if (none) return;
  p.loss[0] = float(ce_sum * ce_scale + z_sum * z_scale);
  if (p.z_loss) p.z_loss[0] = float(z_sum * z_scale);
  if (p.accuracy) p.accuracy[0] = float(correct_sum / C);
}

void bwd_cpu(const BwdProblem& p) {
  const RowMatrix& g = p.grad;
  for (int64_t r = 0; r < g.rows; ++r) {
    const double s = p.grad_output[p.per_row ? r * p.go_stride : 0];
    for (int64_t c = 0; c < g.cols; ++c) {
      const int64_t i = r * g.row_stride + c;
      store_elem(g.data, g.dtype, i, load_elem(g.data, g.dtype, i) * s);
    }
  }
}

}  // namespace tigon::cross_entropy
