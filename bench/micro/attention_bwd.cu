// The attention backward's CUDA kernels on their own, before the C API reaches them: every case below against a
// direct fp64 loop of include/tigon/attention.h's math (masks, windows, GQA, variable length, softcap, strides that
// defeat 16-byte loads, both dtypes, every head dim), then the speed of one long problem, causal and full, with dq
// added in the deterministic order and unordered. Diagnostic only, not part of the library; it links the
// backward's sources directly (the library exports only the C API).
//
//   nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude -I<cutlass>/include \
//     -o build/attention_bwd bench/micro/attention_bwd.cu src/attention/attention_bwd_cuda*.cu src/common/tensor.cpp
//   build/attention_bwd [--speed-only] [batch seqlen heads head_dim [kv_heads]]
//     (speed; default 8 4096 32 128 8, bf16: causal and full masks, deterministic and unordered dq; --speed-only skips
//     the correctness cases, for a profiler that should see the long problem's launches first)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "micro_util.cuh"
#include "attention/attention.h"

namespace {

using tigon::DType;
namespace ta = tigon::attention;

float to_float(uint16_t bits, DType t) {
  if (t == DType::kBFloat16) {
    __nv_bfloat16_raw r;
    r.x = bits;
    return __bfloat162float(__nv_bfloat16(r));
  }
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}
uint16_t to_bits(float v, DType t) {
  if (t == DType::kBFloat16) return __nv_bfloat16_raw(__float2bfloat16_rn(v)).x;
  return __half_raw(__float2half_rn(v)).x;
}

struct Case {
  const char* name;
  DType dtype;
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  bool causal = false;
  int left = -1, right = -1;
  float softcap = 0.f;
  std::vector<int> lens_q, lens_k;  // variable length when not empty (batch = its size)
  int pad = 0;                      // extra elements per token row (a pad of 3 defeats 16-byte loads)
  bool bhsd = false;                // [batch, heads, seq, dim] storage seen through strides
};

// A [rows, heads, dim] (or [batch, seq, heads, dim]) tensor on the host and the device, with its strides.
struct Buf {
  std::vector<uint16_t> h;
  uint16_t* d = nullptr;
  ta::Tensor4 t;
};

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

bool run_case(const Case& c, std::mt19937& rng) {
  const bool varlen = !c.lens_q.empty();
  const int B = varlen ? int(c.lens_q.size()) : c.batch, Hq = c.heads_q, Hk = c.heads_kv, D = c.head_dim;
  std::vector<int> cu_q(B + 1, 0), cu_k(B + 1, 0);
  for (int b = 0; b < B; ++b) {
    cu_q[b + 1] = cu_q[b] + (varlen ? c.lens_q[b] : c.seqlen_q);
    cu_k[b + 1] = cu_k[b] + (varlen ? c.lens_k[b] : c.seqlen_k);
  }
  const int maxq = varlen ? *std::max_element(c.lens_q.begin(), c.lens_q.end()) : c.seqlen_q;
  const int maxk = varlen ? *std::max_element(c.lens_k.begin(), c.lens_k.end()) : c.seqlen_k;
  const int64_t tq = cu_q[B], tk = cu_k[B];
  // Element index of (token t of the packed/flattened rows, head h, d). Dense tokens are b * seqlen + i.
  auto make = [&](int64_t tokens, int heads, int seqlen) {
    Buf x;
    const int64_t row = int64_t(heads) * D + c.pad;
    x.h.assign(size_t(tokens * row + 8), 0);
    if (c.bhsd && !varlen) {  // storage [b, h, s, d]; the tensor is its permutation to [b, s, h, d]
      x.t.batch_stride = int64_t(heads) * seqlen * D;
      x.t.seq_stride = D;
      x.t.head_stride = int64_t(seqlen) * D;
    } else {
      x.t.batch_stride = varlen ? 0 : int64_t(seqlen) * row;
      x.t.seq_stride = row;
      x.t.head_stride = D;
    }
    return x;
  };
  auto at = [&](const Buf& x, int64_t token, int seqlen, int h) -> int64_t {
    const int64_t b = varlen ? 0 : token / seqlen, i = varlen ? token : token % seqlen;
    return b * x.t.batch_stride + i * x.t.seq_stride + h * x.t.head_stride;
  };
  Buf q = make(tq, Hq, c.seqlen_q), k = make(tk, Hk, c.seqlen_k), v = make(tk, Hk, c.seqlen_k);
  Buf o = make(tq, Hq, c.seqlen_q), dout = make(tq, Hq, c.seqlen_q), dq = make(tq, Hq, c.seqlen_q);
  Buf dk = make(tk, Hk, c.seqlen_k), dv = make(tk, Hk, c.seqlen_k);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto fill = [&](Buf& x, int64_t tokens, int heads, int seqlen) {
    for (int64_t t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < D; ++d) x.h[at(x, t, seqlen, h) + d] = to_bits(nd(rng), c.dtype);
  };
  fill(q, tq, Hq, c.seqlen_q);
  fill(k, tk, Hk, c.seqlen_k);
  fill(v, tk, Hk, c.seqlen_k);
  fill(dout, tq, Hq, c.seqlen_q);
  auto val = [&](const Buf& x, int64_t token, int seqlen, int h, int d) {
    return double(to_float(x.h[at(x, token, seqlen, h) + d], c.dtype));
  };

  // fp64 forward (o rounded to the dtype, lse) and backward, straight from the header's formulas.
  const double scale = 1.0 / std::sqrt(double(D));
  const int right = c.causal ? 0 : c.right;
  const int64_t lse_rows = varlen ? tq : int64_t(B) * c.seqlen_q;
  std::vector<float> lse(size_t(Hq * lse_rows));
  std::vector<double> rdq(size_t(tq * Hq * D), 0), rdk(size_t(tk * Hk * D), 0), rdv(size_t(tk * Hk * D), 0);
  for (int b = 0; b < B; ++b) {
    const int Sq = std::min(cu_q[b + 1] - cu_q[b], maxq), Sk = std::min(cu_k[b + 1] - cu_k[b], maxk);
    const int shift = Sk - Sq;
    for (int h = 0; h < Hq; ++h) {
      const int hk = h / (Hq / Hk);
      for (int i = 0; i < Sq; ++i) {
        const int64_t tq_i = varlen ? cu_q[b] + i : int64_t(b) * c.seqlen_q + i;
        std::vector<double> s(Sk), th(Sk);
        std::vector<char> vis(Sk);
        double m = -INFINITY;
        for (int j = 0; j < Sk; ++j) {
          const int64_t tk_j = varlen ? cu_k[b] + j : int64_t(b) * c.seqlen_k + j;
          vis[j] = (right < 0 || j <= i + shift + right) && (c.left < 0 || j >= i + shift - c.left);
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += val(q, tq_i, c.seqlen_q, h, d) * val(k, tk_j, c.seqlen_k, hk, d);
          s[j] = scale * dot;
          if (c.softcap > 0) {
            th[j] = std::tanh(s[j] / c.softcap);
            s[j] = c.softcap * th[j];
          }
          if (vis[j]) m = std::max(m, s[j]);
        }
        const int64_t li = varlen ? int64_t(h) * tq + tq_i : (int64_t(b) * Hq + h) * c.seqlen_q + i;
        if (m == -INFINITY) {
          lse[li] = -INFINITY;
          for (int d = 0; d < D; ++d) o.h[at(o, tq_i, c.seqlen_q, h) + d] = to_bits(0.f, c.dtype);
          continue;
        }
        double sum = 0;
        for (int j = 0; j < Sk; ++j)
          if (vis[j]) sum += std::exp(s[j] - m);
        const double l = m + std::log(sum);
        lse[li] = float(l);
        std::vector<double> oi(D, 0), p(Sk, 0);
        for (int j = 0; j < Sk; ++j) {
          if (!vis[j]) continue;
          const int64_t tk_j = varlen ? cu_k[b] + j : int64_t(b) * c.seqlen_k + j;
          p[j] = std::exp(s[j] - double(lse[li]));
          for (int d = 0; d < D; ++d) oi[d] += p[j] * val(v, tk_j, c.seqlen_k, hk, d);
        }
        double delta = 0;
        for (int d = 0; d < D; ++d) {
          o.h[at(o, tq_i, c.seqlen_q, h) + d] = to_bits(float(oi[d]), c.dtype);
          delta += val(dout, tq_i, c.seqlen_q, h, d) * val(o, tq_i, c.seqlen_q, h, d);
        }
        for (int j = 0; j < Sk; ++j) {
          if (!vis[j]) continue;
          const int64_t tk_j = varlen ? cu_k[b] + j : int64_t(b) * c.seqlen_k + j;
          double dp = 0;
          for (int d = 0; d < D; ++d) dp += val(dout, tq_i, c.seqlen_q, h, d) * val(v, tk_j, c.seqlen_k, hk, d);
          double ds = p[j] * (dp - delta);
          if (c.softcap > 0) ds *= 1 - th[j] * th[j];
          for (int d = 0; d < D; ++d) {
            rdv[(tk_j * Hk + hk) * D + d] += p[j] * val(dout, tq_i, c.seqlen_q, h, d);
            rdq[(tq_i * Hq + h) * D + d] += scale * ds * val(k, tk_j, c.seqlen_k, hk, d);
            rdk[(tk_j * Hk + hk) * D + d] += scale * ds * val(q, tq_i, c.seqlen_q, h, d);
          }
        }
      }
    }
  }

  // Device copies; outputs start as NaN so that an element the kernels forget shows up.
  const uint16_t nan_bits = to_bits(NAN, c.dtype);
  std::fill(dq.h.begin(), dq.h.end(), nan_bits);
  std::fill(dk.h.begin(), dk.h.end(), nan_bits);
  std::fill(dv.h.begin(), dv.h.end(), nan_bits);
  for (Buf* x : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) {
    CHECK(cudaMalloc(&x->d, x->h.size() * 2));
    CHECK(cudaMemcpy(x->d, x->h.data(), x->h.size() * 2, cudaMemcpyHostToDevice));
    x->t.data = x->d;
  }
  float* dlse = nullptr;
  int32_t *dcu_q = nullptr, *dcu_k = nullptr;
  CHECK(cudaMalloc(&dlse, lse.size() * 4));
  CHECK(cudaMemcpy(dlse, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
  ta::BwdProblem p;
  p.s.dtype = c.dtype;
  p.s.batch = B;
  p.s.seqlen_q = maxq;
  p.s.seqlen_k = maxk;
  p.s.heads_q = Hq;
  p.s.heads_kv = Hk;
  p.s.head_dim = D;
  if (varlen) {
    CHECK(cudaMalloc(&dcu_q, (B + 1) * 4));
    CHECK(cudaMalloc(&dcu_k, (B + 1) * 4));
    CHECK(cudaMemcpy(dcu_q, cu_q.data(), (B + 1) * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dcu_k, cu_k.data(), (B + 1) * 4, cudaMemcpyHostToDevice));
    p.s.cu_seqlens_q = dcu_q;
    p.s.cu_seqlens_k = dcu_k;
    p.s.total_q = tq;
    p.s.total_k = tk;
  }
  p.s.scale = float(scale);
  p.s.softcap = c.softcap;
  p.s.causal = c.causal;
  p.s.window_left = c.left;
  p.s.window_right = right;
  p.q = q.t, p.k = k.t, p.v = v.t, p.o = o.t, p.dout = dout.t, p.dq = dq.t, p.dk = dk.t, p.dv = dv.t;
  p.lse = dlse;
  const size_t ws_bytes = ta::bwd_cuda_workspace_bytes(p.s, true, 0);
  void* ws = nullptr;
  CHECK(cudaMalloc(&ws, ws_bytes + 1));
  ta::bwd_cuda(p, ws, ws_bytes, nullptr);
  CHECK(cudaDeviceSynchronize());

  bool ok = true;
  auto compare = [&](const char* name, Buf& x, const std::vector<double>& ref, int64_t tokens, int heads, int seqlen) {
    CHECK(cudaMemcpy(x.h.data(), x.d, x.h.size() * 2, cudaMemcpyDeviceToHost));
    const double tol = (c.dtype == DType::kBFloat16 ? 2e-2 : 5e-3) * std::max(max_abs(ref), 1e-3);
    double worst = 0;
    for (int64_t t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < D; ++d) {
          const double g = to_float(x.h[at(x, t, seqlen, h) + d], c.dtype), r = ref[(t * heads + h) * D + d];
          const double e = std::isfinite(g) ? std::fabs(g - r) : INFINITY;
          worst = std::max(worst, e);
        }
    const bool pass = worst <= tol;
    std::printf("  %-3s max error %.3g (tolerance %.3g, max |ref| %.3g) %s\n", name, worst, tol, max_abs(ref),
                pass ? "ok" : "FAIL");
    ok = ok && pass;
  };
  std::printf("%s\n", c.name);
  compare("dq", dq, rdq, tq, Hq, c.seqlen_q);
  compare("dk", dk, rdk, tk, Hk, c.seqlen_k);
  compare("dv", dv, rdv, tk, Hk, c.seqlen_k);

  // Same bits on a second run.
  std::vector<uint16_t> first = dq.h;
  ta::bwd_cuda(p, ws, ws_bytes, nullptr);
  CHECK(cudaMemcpy(dq.h.data(), dq.d, dq.h.size() * 2, cudaMemcpyDeviceToHost));
  if (first != dq.h) {
    std::printf("  dq differs between two runs: FAIL\n");
    ok = false;
  }
  for (Buf* x : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) CHECK(cudaFree(x->d));
  CHECK(cudaFree(dlse));
  CHECK(cudaFree(ws));
  if (dcu_q) CHECK(cudaFree(dcu_q));
  if (dcu_k) CHECK(cudaFree(dcu_k));
  return ok;
}

void speed(int batch, int seqlen, int heads, int kv_heads, int head_dim) {
  ta::BwdProblem p;
  p.s.dtype = DType::kBFloat16;
  p.s.batch = batch;
  p.s.seqlen_q = p.s.seqlen_k = seqlen;
  p.s.heads_q = heads;
  p.s.heads_kv = kv_heads;
  p.s.head_dim = head_dim;
  p.s.scale = 1.f / std::sqrt(float(head_dim));
  const int64_t n = int64_t(batch) * seqlen * heads * head_dim;  // k and v use the first kv_heads / heads of theirs
  std::vector<uint16_t> h(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : h) x = to_bits(nd(rng), DType::kBFloat16);
  ta::Tensor4* ts[] = {&p.q, &p.k, &p.v, &p.o, &p.dout, &p.dq, &p.dk, &p.dv};
  for (ta::Tensor4* t : ts) {
    CHECK(cudaMalloc(&t->data, n * 2));
    CHECK(cudaMemcpy(t->data, h.data(), n * 2, cudaMemcpyHostToDevice));
    t->batch_stride = int64_t(seqlen) * heads * head_dim;
    t->seq_stride = int64_t(heads) * head_dim;
    t->head_stride = head_dim;
  }
  float* lse = nullptr;
  CHECK(cudaMalloc(&lse, size_t(batch) * heads * seqlen * 4));
  CHECK(cudaMemset(lse, 0, size_t(batch) * heads * seqlen * 4));  // the values do not change the work
  p.lse = lse;
  for (ta::Tensor4* t : {&p.k, &p.v, &p.dk, &p.dv}) {
    t->batch_stride = int64_t(seqlen) * kv_heads * head_dim;
    t->seq_stride = int64_t(kv_heads) * head_dim;
  }
  size_t ws_bytes = 0;  // the most any mask and mode below asks for
  for (int64_t right : {int64_t(0), int64_t(-1)}) {
    p.s.causal = right == 0, p.s.window_right = right;
    for (bool deterministic : {true, false})
      ws_bytes = std::max(ws_bytes, ta::bwd_cuda_workspace_bytes(p.s, deterministic, 0));
  }
  void* ws = nullptr;
  CHECK(cudaMalloc(&ws, ws_bytes));
  for (bool causal : {true, false}) {
    for (bool deterministic : {true, false}) {
      p.s.causal = causal;
      p.s.window_right = causal ? 0 : -1;
      p.deterministic = deterministic;
      const float us = time_us([&] { ta::bwd_cuda(p, ws, ws_bytes, nullptr); });
      const double fwd_flops = 4.0 * batch * heads * double(seqlen) * seqlen * head_dim / (causal ? 2 : 1);
      std::printf(
          "speed: bf16 %s batch %d seqlen %d heads %d/%d head_dim %d, %s dq: %.1f us, backward %.1f TFLOP/s "
          "(2.5x the forward's FLOPs)\n",
          causal ? "causal" : "full", batch, seqlen, heads, kv_heads, head_dim,
          deterministic ? "deterministic" : "unordered", us, 2.5 * fwd_flops / us * 1e-6);
    }
  }
  for (ta::Tensor4* t : ts) CHECK(cudaFree(t->data));
  CHECK(cudaFree(lse));
  CHECK(cudaFree(ws));
}

}  // namespace

int main(int argc, char** argv) {
  const bool speed_only = argc > 1 && std::string(argv[1]) == "--speed-only";
  if (speed_only) --argc, ++argv;
  std::mt19937 rng(7);
  const DType bf = DType::kBFloat16, f16 = DType::kFloat16;
  std::vector<Case> cases;
  cases.reserve(16);  // the references add() returns stay valid
  auto add = [&](const char* name, DType t, int batch, int sq, int sk, int hq, int hk, int d) -> Case& {
    cases.push_back(Case{name, t, batch, sq, sk, hq, hk, d});
    return cases.back();
  };
  add("dense causal bf16 d128 gqa 4/2", bf, 2, 200, 200, 4, 2, 128).causal = true;
  add("dense causal fp16 d64, seqlen_q 100 < seqlen_k 300 (bottom-right)", f16, 1, 100, 300, 2, 1, 64).causal = true;
  add("dense causal bf16 d64, seqlen_q 300 > seqlen_k 100 (rows with no key)", bf, 1, 300, 100, 2, 2, 64).causal = true;
  Case& window = add("dense window (37, 5) bf16 d96", bf, 2, 150, 170, 2, 2, 96);
  window.left = 37;
  window.right = 5;
  add("dense no mask softcap 30 fp16 d256", f16, 1, 130, 97, 2, 1, 256).softcap = 30.f;
  add("dense causal bf16 d256 gqa 4/2", bf, 2, 200, 200, 4, 2, 256).causal = true;
  Case& packed256 = add("varlen causal gqa 4/2 fp16 d256, window (70, 0)", f16, 0, 0, 0, 4, 2, 256);
  packed256.left = 70;
  packed256.right = 0;
  packed256.lens_q = {77, 0, 183};
  packed256.lens_k = {50, 130, 210};
  Case& packed = add("varlen causal gqa 6/2 bf16 d128", bf, 0, 0, 0, 6, 2, 128);
  packed.causal = true;
  packed.lens_q = {77, 0, 183, 5};
  packed.lens_k = {50, 130, 210, 1};
  Case& packed_window = add("varlen window (20, 0) fp16 d64", f16, 0, 0, 0, 2, 2, 64);
  packed_window.left = 20;
  packed_window.right = 0;
  packed_window.lens_q = packed_window.lens_k = {64, 129};
  Case& padded = add("dense causal bf16 d128, rows padded by 3 elements (no 16-byte loads)", bf, 2, 90, 90, 2, 2, 128);
  padded.causal = true;
  padded.pad = 3;
  add("dense bf16 d128 stored [b, h, s, d]", bf, 2, 128, 128, 3, 3, 128).bhsd = true;
  bool ok = true;
  if (!speed_only) {
    for (const Case& c : cases) ok = run_case(c, rng) && ok;
    std::printf("%s\n", ok ? "all cases pass" : "SOME CASES FAIL");
  }
  const int batch = argc > 4 ? std::atoi(argv[1]) : 8, seqlen = argc > 4 ? std::atoi(argv[2]) : 4096;
  const int heads = argc > 4 ? std::atoi(argv[3]) : 32, head_dim = argc > 4 ? std::atoi(argv[4]) : 128;
  const int kv_heads = argc > 5 ? std::atoi(argv[5]) : (argc > 4 ? heads : 8);
  speed(batch, seqlen, heads, kv_heads, head_dim);
  return ok ? 0 : 1;
}
