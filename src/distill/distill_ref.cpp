// Distillation CPU reference. Written for clarity, not speed: each row in fp64, the formulas of include/tigon/distill.h
// term by term, the gradient rounded once to the student's dtype.
#include <cmath>
#include <limits>
#include <vector>

#include "common/host_float.h"
#include "distill/distill.h"

namespace tigon::distill {
namespace {

bool ignored(const FwdProblem& p, int64_t r) {
  if (p.labels == nullptr) return false;
  const int64_t l = p.labels64 ? static_cast<const int64_t*>(p.labels)[r] : static_cast<const int32_t*>(p.labels)[r];
  return l == p.ignore_index;
}

// log softmax of v (in place).
void log_softmax(std::vector<double>& v) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double e : v) mx = std::max(mx, e);
  double s = 0;
  for (double e : v) s += std::exp(e - mx);
  const double lse = mx + std::log(s);
  for (double& e : v) e -= lse;
}

// w * (a - b), 0 where the weight w is 0 (whatever a - b is).
double weighted(double w, double a, double b) { return w == 0 ? 0.0 : w * (a - b); }

// One row: its loss, and its gradient (before the reduction's scale) into g.
double row_loss(const FwdProblem& p, int64_t r, std::vector<double>& g) {
  const int64_t V = p.student.cols;
  const double T = p.temperature, beta = p.beta;
  std::vector<double> x(V), y(V), q(V), pt(V);
  for (int64_t c = 0; c < V; ++c) {
    x[c] = load_elem(p.student.data, p.student.dtype, r * p.student.row_stride + c) / T;
    const double t = load_elem(p.teacher.data, p.teacher.dtype, r * p.teacher.row_stride + c);
    y[c] = p.teacher_mode == TIGON_DISTILL_TEACHER_LOGITS  ? t / T
           : p.teacher_mode == TIGON_DISTILL_TEACHER_PROBS ? std::log(t)
                                                           : t;
    pt[c] = p.teacher_mode == TIGON_DISTILL_TEACHER_PROBS ? t : 0.0;
  }
  log_softmax(x);
  if (p.teacher_mode == TIGON_DISTILL_TEACHER_LOGITS) log_softmax(y);
  for (int64_t c = 0; c < V; ++c) {
    q[c] = std::exp(x[c]);
    if (p.teacher_mode != TIGON_DISTILL_TEACHER_PROBS) pt[c] = std::exp(y[c]);
  }
  double loss = 0;
  switch (p.kind) {
    case Kind::kForwardKL: {
      double S = 0;
      for (int64_t c = 0; c < V; ++c) {
        loss += weighted(pt[c], y[c], x[c]);
        S += pt[c];
      }
      for (int64_t c = 0; c < V; ++c) g[c] = (q[c] * S - pt[c]) / T;
      break;
    }
    case Kind::kReverseKL: {
      for (int64_t c = 0; c < V; ++c) loss += weighted(q[c], x[c], y[c]);
      for (int64_t c = 0; c < V; ++c) g[c] = q[c] == 0 ? 0.0 : q[c] * (x[c] - y[c] - loss) / T;
      break;
    }
    case Kind::kJSD: {
      std::vector<double> lm(V);
      double kp = 0, kq = 0;  // KL(p || m), KL(q || m)
      for (int64_t c = 0; c < V; ++c) {
        lm[c] = std::log(beta * pt[c] + (1 - beta) * q[c]);
        kp += weighted(pt[c], y[c], lm[c]);
        kq += weighted(q[c], x[c], lm[c]);
      }
      loss = beta * kp + (1 - beta) * kq;
      for (int64_t c = 0; c < V; ++c) g[c] = q[c] == 0 ? 0.0 : (1 - beta) * q[c] * (x[c] - lm[c] - kq) / T;
      break;
    }
    case Kind::kTVD: {
      const auto sign = [](double v) { return double((v > 0) - (v < 0)); };
      double sigma = 0;
      for (int64_t c = 0; c < V; ++c) {
        loss += 0.5 * std::fabs(q[c] - pt[c]);
        sigma += q[c] * sign(q[c] - pt[c]);
      }
      for (int64_t c = 0; c < V; ++c) g[c] = 0.5 * q[c] * (sign(q[c] - pt[c]) - sigma) / T;
      break;
    }
  }
  return loss;
}

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const int64_t rows = p.student.rows, V = p.student.cols;
  double C = 0;
  for (int64_t r = 0; r < rows; ++r) C += ignored(p, r) ? 0 : 1;
  double scale = 1;
  if (p.reduction == TIGON_DISTILL_REDUCTION_BATCHMEAN) scale = 1 / C;
  if (p.reduction == TIGON_DISTILL_REDUCTION_MEAN) scale = 1 / (C * double(V));
  double total = 0;
  std::vector<double> g(V);
  for (int64_t r = 0; r < rows; ++r) {
    const bool skip = ignored(p, r);
    // Reads the whole row before any gradient is stored (grad may alias an input).
    const double loss = skip ? 0.0 : row_loss(p, r, g);
    if (p.grad.data)
      for (int64_t c = 0; c < V; ++c)
        store_elem(p.grad.data, p.grad.dtype, r * p.grad.row_stride + c, skip ? 0.0 : g[c] * scale);
    if (p.reduction == TIGON_DISTILL_REDUCTION_NONE) p.loss[r] = float(loss);
    total += loss;
  }
  if (p.reduction != TIGON_DISTILL_REDUCTION_NONE) p.loss[0] = float(total * scale);
}

}  // namespace tigon::distill
