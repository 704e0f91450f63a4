// Fused linear + cross entropy CPU reference. Chunk-free and written for clarity: all N x V logits at once in fp64,
// rounded to x's dtype where the CUDA path stores them, then cross entropy's own reference (gradient over them), then
// dX, dW and db summed in fp64 and rounded once to their dtypes.
#include <vector>

#include "common/host_float.h"
#include "fused_linear_cross_entropy/fused_linear_cross_entropy.h"

namespace tigon::fused_linear_cross_entropy {
namespace {

std::vector<double> load_rows(const RowMatrix& m) {
  std::vector<double> out(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) out[size_t(r * m.cols + c)] = load_elem(m.data, m.dtype, r * m.row_stride + c);
  return out;
}

}  // namespace

void fwd_cpu(const Problem& p) {
  const int64_t N = p.x.rows, H = p.x.cols, V = p.w.rows;
  const DType dt = p.x.dtype;
  const std::vector<double> x = load_rows(p.x), w = load_rows(p.w);

  // logits = x · Wᵀ + b, stored in x's dtype as the GEMM writes them
  std::vector<unsigned char> logits(size_t(N * V * dtype_bytes(dt)));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t v = 0; v < V; ++v) {
      double s = p.bias ? load_elem(p.bias, dt, v) : 0.0;
      for (int64_t h = 0; h < H; ++h) s += x[size_t(i * H + h)] * w[size_t(v * H + h)];
      store_elem(logits.data(), dt, i * V + v, s);
    }

  cross_entropy::FwdProblem ce = p.ce;
  ce.logits = RowMatrix{logits.data(), dt, N, V, V};
  if (p.wants_grad()) ce.grad = ce.logits;  // written over the logits, as on the GPU
  cross_entropy::fwd_cpu(ce);
  if (!p.wants_grad()) return;
  if (p.grad_output) {  // times grad_output, rounded to the dtype like the GPU's scale kernel
    cross_entropy::BwdProblem scale;
    scale.grad = ce.grad;
    scale.grad_output = p.grad_output;
    scale.go_stride = p.go_stride;
    scale.per_row = p.go_stride != 0;
    cross_entropy::bwd_cpu(scale);
  }
  const std::vector<double> g = load_rows(ce.grad);  // dL, [N, V]

  if (p.dx.data)
    for (int64_t i = 0; i < N; ++i) {
      std::vector<double> acc(size_t(H), 0.0);
      for (int64_t v = 0; v < V; ++v) {
        const double gv = g[size_t(i * V + v)];
        if (gv != 0.0)
          for (int64_t h = 0; h < H; ++h) acc[size_t(h)] += gv * w[size_t(v * H + h)];
      }
      for (int64_t h = 0; h < H; ++h) store_elem(p.dx.data, dt, i * p.dx.row_stride + h, acc[size_t(h)]);
    }
  if (p.dw) {
    // narrow_dw: the result in w's dtype at the front of the fp32 buffer; all of dW is summed before any store.
    const DType out = p.narrow_dw ? dt : p.dw_dtype;
    std::vector<double> dw(size_t(V * H), 0.0);
    for (int64_t v = 0; v < V; ++v)
      for (int64_t i = 0; i < N; ++i) {
        const double gv = g[size_t(i * V + v)];
        if (gv != 0.0)
          for (int64_t h = 0; h < H; ++h) dw[size_t(v * H + h)] += gv * x[size_t(i * H + h)];
      }
    for (int64_t e = 0; e < V * H; ++e) store_elem(p.dw, out, e, dw[size_t(e)]);
  }
  if (p.db)
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t i = 0; i < N; ++i) s += g[size_t(i * V + v)];
      store_elem(p.db, p.db_dtype, v, s);
    }
}

}  // namespace tigon::fused_linear_cross_entropy
