// Linear + activation CPU reference. Written for clarity, not speed: the GEMMs as plain fp64 sums over the stored
// inputs, z rounded to the dtype where the CUDA path stores it, then the pointwise family's reference for the
// activation (+ residual) and for dZ; dX, dW and db summed in fp64 from the stored dZ and rounded once.
#include <vector>

#include "activation/activation.h"
#include "common/host_float.h"
#include "linear_act/linear_act.h"

namespace tigon::linear_act {
namespace {

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const int64_t M = p.x.rows, N = p.w.rows, K = p.x.cols;
  const DType dt = p.x.dtype;
  // z in the given buffer, else in a scratch matrix of the dtype (as the CUDA path writes it into out)
  std::vector<unsigned char> scratch;
  RowMatrix z = p.z;
  if (!z.data) {
    scratch.resize(size_t(M * N * dtype_bytes(dt)));
    z = RowMatrix{scratch.data(), dt, M, N, N};
  }
  for (int64_t i = 0; i < M; ++i)
    for (int64_t n = 0; n < N; ++n) {
      double s = p.bias ? load_elem(p.bias, dt, n) : 0.0;
      for (int64_t k = 0; k < K; ++k) s += elem(p.x, i, k) * elem(p.w, n, k);
      store_elem(z.data, dt, i * z.row_stride + n, s);
    }
  activation::FwdProblem a;
  a.x = z;
  a.y = p.out;
  a.residual = p.residual;
  a.activation = p.activation;
  activation::fwd_cpu(a);
}

void bwd_cpu(const BwdProblem& p) {
  const int64_t M = p.x.rows, N = p.w.rows, K = p.x.cols;
  const DType dt = p.x.dtype;
  if (p.activation != TIGON_ACT_NONE) {
    activation::BwdProblem a;
    a.dy = p.dy;
    a.saved = p.saved;
    a.dx = p.dz;
    a.activation = p.activation;
    activation::bwd_cpu(a);
  }
  const RowMatrix& g = p.dz;  // dZ as stored
  if (p.dx.data)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n) s += elem(g, i, n) * elem(p.w, n, k);
        store_elem(p.dx.data, dt, i * p.dx.row_stride + k, s);
      }
  if (p.dw)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        double s = 0;
        for (int64_t i = 0; i < M; ++i) s += elem(g, i, n) * elem(p.x, i, k);
        store_elem(p.dw, p.dw_dtype, n * K + k, s);
      }
  if (p.db)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t i = 0; i < M; ++i) s += elem(g, i, n);
      store_elem(p.db, p.db_dtype, n, s);
    }
}

}  // namespace tigon::linear_act
