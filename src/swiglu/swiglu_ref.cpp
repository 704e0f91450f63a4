// SwiGLU / GeGLU CPU reference. Written for clarity, not speed: the activation and its derivative in fp64 straight
// from their definitions, rounded to the dtype where Hugging Face's module rounds (a g, act, the product; in backward
// dc b), so the CUDA kernels, which round at the same points, can be checked against it.
#include "common/activation_math.h"
#include "common/host_float.h"
#include "swiglu/swiglu.h"

namespace tigon::swiglu {

namespace {

double elem(const RowMatrix& m, int64_t r, int64_t c) { return load_elem(m.data, m.dtype, r * m.row_stride + c); }
void put(const RowMatrix& m, int64_t r, int64_t c, double v) { store_elem(m.data, m.dtype, r * m.row_stride + c, v); }

}  // namespace

void fwd_cpu(const FwdProblem& p) {
  const DType t = p.a.dtype;
  for (int64_t r = 0; r < p.a.rows; ++r)
    for (int64_t c = 0; c < p.a.cols; ++c) {
      const double a = round_to(t, elem(p.a, r, c) * p.gate), b = elem(p.b, r, c);
      put(p.c, r, c, round_to(t, glu_activation_ref(p.activation, a).act) * b * p.down);  // c may be a or b: read first
    }
}

void bwd_cpu(const BwdProblem& p) {
  const DType t = p.a.dtype;
  for (int64_t r = 0; r < p.a.rows; ++r)
    for (int64_t c = 0; c < p.a.cols; ++c) {
      // All three reads first: da may be a or dc, db may be b or dc.
      const double a = round_to(t, elem(p.a, r, c) * p.gate), b = elem(p.b, r, c), u = elem(p.dc, r, c) * p.down;
      const ActAndGrad f = glu_activation_ref(p.activation, a);
      put(p.da, r, c, round_to(t, round_to(t, u * b) * f.grad) * p.gate);
      put(p.db, r, c, u * round_to(t, f.act));
    }
}

}  // namespace tigon::swiglu
