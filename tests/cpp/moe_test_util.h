// A MoE experts problem on the host (tokens, routing, expert weights, upstream gradient) and the calls that run it
// through the C API on any device; shared by the reference and the GPU tests.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "test_util.h"
#include "tigon/moe.h"

namespace tigon_test {

struct MoeCase {
  int64_t T, k, E, H, I;
  DType dtype;
  HostMat x, w, gate_up, down, dout;  // x [T, H] (row stride may exceed H), w [T, k] fp32, weights as [E * rows, cols]
  std::vector<int64_t> ids;           // [T, k]

  // Routing: each token picks k distinct experts among the first `used` (the rest stay empty); every `sentinel_every`
  // th pair gets id E (an expert held elsewhere) when > 0.
  MoeCase(int64_t t, int64_t k_, int64_t e, int64_t h, int64_t i, DType d, int64_t used, int sentinel_every = 0,
          int64_t x_stride = -1, unsigned seed = 1)
      : T(t),
        k(k_),
        E(e),
        H(h),
        I(i),
        dtype(d),
        x(d, t, h, x_stride),
        w(DType::kFloat32, t, k_),
        gate_up(d, e * 2 * i, h),
        down(d, e * h, i),
        dout(d, t, h) {
    std::mt19937 rng(seed);
    x.fill_random(rng);
    w.fill_random(rng, 0.5);
    gate_up.fill_random(rng, 1.0 / std::sqrt(double(h)));
    down.fill_random(rng, 1.0 / std::sqrt(double(i)));
    dout.fill_random(rng);
    ids.resize(size_t(t * k_));
    for (int64_t r = 0; r < t; ++r) {
      std::vector<int64_t> pool(static_cast<size_t>(used));
      for (int64_t q = 0; q < used; ++q) pool[size_t(q)] = q;
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int64_t j = 0; j < k_; ++j) ids[size_t(r * k_ + j)] = pool[size_t(j % used)];
    }
    if (sentinel_every > 0)
      for (size_t q = 0; q < ids.size(); q += size_t(sentinel_every)) ids[q] = e;
  }

  tigon::TensorView ids_view(tigon_device dev = tigon::cpu(), void* p = nullptr) {
    return tigon::TensorView(p ? p : ids.data(), {T, k}, tigon::dtype::int64, dev);
  }
  tigon::TensorView w_view(tigon_device dev = tigon::cpu(), void* p = nullptr) {
    return tigon::TensorView(p ? p : w.data(), {T, k}, to_dl(w.dtype), dev);
  }
  static tigon::TensorView experts_view(HostMat& m, int64_t e, int64_t r, int64_t c, tigon_device dev = tigon::cpu(),
                                        void* p = nullptr) {
    return tigon::TensorView(p ? p : m.data(), {e, r, c}, to_dl(m.dtype), dev);
  }
  tigon::TensorView gate_up_view(tigon_device dev = tigon::cpu(), void* p = nullptr) {
    return experts_view(gate_up, E, 2 * I, H, dev, p);
  }
  tigon::TensorView down_view(tigon_device dev = tigon::cpu(), void* p = nullptr) {
    return experts_view(down, E, H, I, dev, p);
  }

  // The gradients' host buffers, poisoned.
  struct Grads {
    HostMat dx, dw, dgate_up, ddown;
  };
  Grads new_grads() const {
    Grads g{HostMat(dtype, T, H), HostMat(DType::kFloat32, T, k), HostMat(dtype, E * 2 * I, H),
            HostMat(dtype, E * H, I)};
    g.dx.poison(), g.dw.poison(), g.dgate_up.poison(), g.ddown.poison();
    return g;
  }

  // The CPU reference through the C API.
  HostMat reference_out() {
    HostMat out(dtype, T, H);
    out.poison();
    EXPECT_EQ(tigon_moe_fwd(x.view(), ids_view(), w_view(), gate_up_view(), down_view(), out.view(), {0}, nullptr, 0,
                            nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
    return out;
  }
  Grads reference_grads() {
    Grads g = new_grads();
    const tigon::TensorView dgu = experts_view(g.dgate_up, E, 2 * I, H), dd = experts_view(g.ddown, E, H, I);
    const tigon::TensorView dwv(g.dw.data(), {T, k}, tigon::dtype::float32);
    EXPECT_EQ(tigon_moe_bwd(x.view(), ids_view(), w_view(), gate_up_view(), down_view(), dout.view(), g.dx.view(), dwv,
                            dgu, dd, {0}, nullptr, 0, nullptr),
              TIGON_SUCCESS)
        << tigon_last_error();
    return g;
  }
};

}  // namespace tigon_test
