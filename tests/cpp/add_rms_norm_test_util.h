// Shared by the fused residual add + RMSNorm tests (CPU and CUDA): a case, its tensors with random contents, and the
// op on the host through the C++ layer.
#pragma once

#include <random>
#include <string>

#include "test_util.h"

namespace tigon_test {

struct AddNormCase {
  DType xt;
  int64_t rows, cols, pad;
  bool dh;  // a gradient reaches h from elsewhere
};

// The tensors of one problem and their random contents; y and rstd in fp32 so the comparison sees every bit.
struct Tensors {
  HostMat x, res, w, h, y, rstd, dy, dh, dx, dw;
  explicit Tensors(const AddNormCase& c, std::mt19937& rng)
      : x(c.xt, c.rows, c.cols, c.cols + c.pad),
        res(c.xt, c.rows, c.cols),
        w(DType::kFloat32, 1, c.cols),
        h(c.xt, c.rows, c.cols),
        y(DType::kFloat32, c.rows, c.cols),
        rstd(DType::kFloat32, 1, c.rows),
        dy(DType::kFloat32, c.rows, c.cols),
        dh(c.xt, c.rows, c.cols),
        dx(c.xt, c.rows, c.cols),
        dw(DType::kFloat32, 1, c.cols) {
    x.fill_random(rng, 1.5, 0.2);
    res.fill_random(rng, 2.0);
    w.fill_random(rng, 0.3, 1.0);
    dy.fill_random(rng);
    dh.fill_random(rng);
    for (HostMat* m : {&h, &y, &rstd, &dx, &dw}) m->poison();
  }
};

inline const tigon::RMSNormParams kParams{1e-5f, 0.f, TIGON_RMS_NORM_LLAMA};

inline tigon::TensorView vec(HostMat& m, int64_t n, tigon_device dev = tigon::cpu(), void* ptr = nullptr) {
  return tigon::TensorView(ptr ? ptr : m.data(), {n}, to_dl(m.dtype), dev);
}

// The fused op on the host.
inline void run_host(Tensors& t, bool with_dh) {
  auto wv = vec(t.w, t.w.cols), rv = vec(t.rstd, t.rstd.cols), dwv = vec(t.dw, t.dw.cols);
  auto dhv = t.dh.view();
  tigon::add_rms_norm_fwd(t.x.view(), t.res.view(), &wv, t.y.view(), t.h.view(), &rv, kParams);
  tigon::add_rms_norm_bwd(t.dy.view(), with_dh ? &dhv : nullptr, t.h.view(), &wv, rv, t.dx.view(), &dwv, kParams,
                          nullptr, 0);
}

inline std::string case_name(const ::testing::TestParamInfo<AddNormCase>& info) {
  const AddNormCase& c = info.param;
  return std::string(short_name(c.xt)) + "_" + std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_pad" +
         std::to_string(c.pad) + (c.dh ? "_dh" : "");
}

}  // namespace tigon_test
