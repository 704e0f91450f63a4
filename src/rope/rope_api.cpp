// RoPE C API: argument validation, then the CPU reference or the CUDA kernels by the tensors' device.
#include <array>
#include <cstring>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "rope/rope.h"
#include "tigon/rope.h"

namespace tigon::rope {
namespace {

template <size_t N>
std::array<int64_t, N> strides_of(const tigon_tensor& t) {
  std::array<int64_t, N> s{};
  if (t.strides) {
    for (size_t i = 0; i < N; ++i) s[i] = t.strides[i];
  } else {  // row-major contiguous
    int64_t step = 1;
    for (int i = int(N) - 1; i >= 0; --i) {
      s[i] = step;
      step *= t.shape[i];
    }
  }
  return s;
}

const char* data_of(const tigon_tensor& t) { return static_cast<const char*>(t.data) + t.byte_offset; }

void check_last_contiguous(const tigon_tensor& t, const char* arg) {
  const int64_t last = t.shape[t.ndim - 1];
  if (t.strides && last > 1 && t.strides[t.ndim - 1] != 1)
    fail_arg(arg, "last dimension must be contiguous (stride 1), got stride ", t.strides[t.ndim - 1]);
}

// Outer dims in the tensor's own order; which of them is B, H, T depends on the layout.
struct Dims {
  int b = 0, h = 1, t = 2;
};
Dims dims_of(int layout) { return layout == TIGON_ROPE_BTHD ? Dims{0, 2, 1} : Dims{0, 1, 2}; }

void check_table(const tigon_tensor& c, const char* arg, const tigon_tensor& x, const Dims& d) {
  check_same_device(x, "x", c, arg);
  if (c.ndim != 3) fail_arg(arg, "must be 3-D (batch or 1, seq_len, rotary_dim), got shape ", shape_string(c));
  const int64_t batch = x.shape[d.b], seq = x.shape[d.t], head_dim = x.shape[3], rotary = c.shape[2];
  if (c.shape[0] != 1 && c.shape[0] != batch)
    fail_arg(arg, "batch size must be 1 or ", batch, " (x's), got shape ", shape_string(c));
  if (c.shape[1] != seq) fail_arg(arg, "seq_len must be ", seq, " (x's), got shape ", shape_string(c));
  if (rotary < 2 || rotary % 2 != 0 || rotary > head_dim)
    fail_arg(arg, "rotary dim (last) must be even and in [2, head_dim = ", head_dim, "], got ", rotary);
  check_last_contiguous(c, arg);
}

Problem build(const tigon_tensor* x_in, const tigon_tensor* cos_in, const tigon_tensor* sin_in,
              const tigon_tensor* out_in, tigon_rope_params params, const char* x_name, const char* out_name) {
  if (params.interleaved != 0 && params.interleaved != 1)
    fail_arg("interleaved", "must be 0 (rotate-half) or 1 (adjacent pairs), got ", params.interleaved);
  if (params.layout != TIGON_ROPE_BHTD && params.layout != TIGON_ROPE_BTHD)
    fail_arg("layout", "must be 0 (BHTD) or 1 (BTHD), got ", params.layout);
  const tigon_tensor& x = require(x_in, x_name);
  const tigon_tensor& c = require(cos_in, "cos");
  const tigon_tensor& s = require(sin_in, "sin");
  const tigon_tensor& out = require(out_in, out_name);
  if (x.ndim != 4) fail_arg(x_name, "must be 4-D (B, H, T, D) or (B, T, H, D), got shape ", shape_string(x));
  Problem p;
  p.dtype = dtype_of(x, x_name);
  check_dtype_in(p.dtype, x_name, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  check_last_contiguous(x, x_name);
  const Dims d = dims_of(params.layout);
  check_table(c, "cos", x, d);
  check_table(s, "sin", x, d);
  for (int i = 0; i < 3; ++i)
    if (s.shape[i] != c.shape[i]) fail_arg("sin", "must have cos's shape ", shape_string(c), ", got ", shape_string(s));
  p.cs_dtype = dtype_of(c, "cos");
  check_dtype_in(p.cs_dtype, "cos", {DType::kFloat32, p.dtype});
  if (dtype_of(s, "sin") != p.cs_dtype)
    fail_dtype("sin", dtype_name(dtype_of(s, "sin")), " differs from cos's ", dtype_name(p.cs_dtype));
  check_same_device(x, x_name, out, out_name);
  if (out.ndim != 4 || std::memcmp(out.shape, x.shape, 4 * sizeof(int64_t)) != 0)
    fail_arg(out_name, "must have ", x_name, "'s shape ", shape_string(x), ", got ", shape_string(out));
  check_dtype_in(dtype_of(out, out_name), out_name, {p.dtype});
  check_last_contiguous(out, out_name);

  const auto xs = strides_of<4>(x), os = strides_of<4>(out);
  const auto cs = strides_of<3>(c), ss = strides_of<3>(s);
  p.x = data_of(x);
  p.out = const_cast<char*>(data_of(out));
  p.cos = data_of(c);
  p.sin = data_of(s);
  p.in_place = p.out == p.x;
  if (p.in_place && xs != os) fail_arg(out_name, "may be ", x_name, " itself only with the same strides");
  p.dim = x.shape[3];
  p.rotary = c.shape[2];
  p.interleaved = params.interleaved == 1;
  p.h_axis = d.h;
  p.t_axis = d.t;
  for (int i = 0; i < 3; ++i) {
    p.size[i] = x.shape[i];
    p.x_stride[i] = xs[i];
    p.out_stride[i] = os[i];
  }
  // The tables vary with the batch (unless it is 1) and the position, never with the head.
  const bool batched = c.shape[0] != 1;
  p.cos_stride[d.b] = batched ? cs[0] : 0;
  p.sin_stride[d.b] = batched ? ss[0] : 0;
  p.cos_stride[d.t] = cs[1];
  p.sin_stride[d.t] = ss[1];
  return p;
}

void run(const tigon_tensor* x, const Problem* parts, int n, void* stream) {
  if (is_cuda(*x)) {
    if (parts[0].size[0] * parts[0].size[parts[0].t_axis] == 0) return;
    TIGON_ON_CUDA(*x, run_cuda(parts, n, stream));
  } else {
    for (int i = 0; i < n; ++i)
      if (parts[i].rows() > 0) run_cpu(parts[i]);
  }
}

// q and k in one call: k must agree with q on everything but its head count and strides.
void check_pair(const tigon_tensor* q, const tigon_tensor* k, const char* q_name, const char* k_name, const Problem& pq,
                const Problem& pk) {
  check_same_device(*q, q_name, *k, k_name);
  if (pk.dtype != pq.dtype)
    fail_dtype(k_name, dtype_name(pk.dtype), " differs from ", q_name, "'s ", dtype_name(pq.dtype));
  if (pk.dim != pq.dim) fail_arg(k_name, "head dim must be ", q_name, "'s ", pq.dim, ", got ", pk.dim);
  if (pk.size[0] != pq.size[0] || pk.size[pk.t_axis] != pq.size[pq.t_axis])
    fail_arg(k_name, "must have ", q_name, "'s batch and seq_len, got shape ", shape_string(*k), " vs ",
             shape_string(*q));
}

}  // namespace
}  // namespace tigon::rope

using namespace tigon;
using namespace tigon::rope;

extern "C" {

tigon_status_t tigon_rope_fwd(const tigon_tensor* x, const tigon_tensor* cos, const tigon_tensor* sin,
                              const tigon_tensor* out, tigon_rope_params params, void* stream) {
  return api_guard("tigon_rope_fwd", [&] {
    Problem p = build(x, cos, sin, out, params, "x", "out");
    run(x, &p, 1, stream);
  });
}

tigon_status_t tigon_rope_bwd(const tigon_tensor* dy, const tigon_tensor* cos, const tigon_tensor* sin,
                              const tigon_tensor* dx, tigon_rope_params params, void* stream) {
  return api_guard("tigon_rope_bwd", [&] {
    Problem p = build(dy, cos, sin, dx, params, "dy", "dx");
    p.backward = true;
    run(dy, &p, 1, stream);
  });
}

tigon_status_t tigon_rope_qk_fwd(const tigon_tensor* q, const tigon_tensor* k, const tigon_tensor* cos,
                                 const tigon_tensor* sin, const tigon_tensor* q_out, const tigon_tensor* k_out,
                                 tigon_rope_params params, void* stream) {
  return api_guard("tigon_rope_qk_fwd", [&] {
    Problem p[2] = {build(q, cos, sin, q_out, params, "q", "q_out"), build(k, cos, sin, k_out, params, "k", "k_out")};
    check_pair(q, k, "q", "k", p[0], p[1]);
    run(q, p, 2, stream);
  });
}

tigon_status_t tigon_rope_qk_bwd(const tigon_tensor* dq_out, const tigon_tensor* dk_out, const tigon_tensor* cos,
                                 const tigon_tensor* sin, const tigon_tensor* dq, const tigon_tensor* dk,
                                 tigon_rope_params params, void* stream) {
  return api_guard("tigon_rope_qk_bwd", [&] {
    Problem p[2] = {build(dq_out, cos, sin, dq, params, "dq_out", "dq"),
                    build(dk_out, cos, sin, dk, params, "dk_out", "dk")};
    p[0].backward = p[1].backward = true;
    check_pair(dq_out, dk_out, "dq_out", "dk_out", p[0], p[1]);
    run(dq_out, p, 2, stream);
  });
}

}  // extern "C"
