// Decode attention C API: argument validation, then the CPU reference or the CUDA kernels by the tensors' device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/device.h"
#include "common/error.h"
#include "common/overlap.h"
#include "common/tensor.h"
#include "decode_attention/decode_attention.h"
#include "tigon/decode_attention.h"

namespace tigon::decode_attention {
namespace {

// A 4-D [batch, seq, heads, head_dim] tensor with head_dim stride 1 and non-negative strides.
struct View {
  const tigon_tensor* t = nullptr;
  const char* name = "";
  DType dtype = DType::kBFloat16;
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  Tensor4 t4;
};

View as_view(const tigon_tensor* in, const char* name, const char* dims) {
  const tigon_tensor& t = require(in, name);
  if (t.ndim != 4) fail_arg(name, "must be 4-D ", dims, ", got shape ", shape_string(t));
  View v;
  v.t = &t;
  v.name = name;
  v.dtype = dtype_of(t, name);
  const std::vector<int64_t> s = strides_of(t);
  for (int i = 0; i < 4; ++i)
    if (s[i] < 0) fail_arg(name, "strides must be >= 0, got ", s[i], " at dim ", i);
  if (s[3] != 1 && t.shape[3] > 1) fail_arg(name, "head_dim (last) stride must be 1, got ", s[3]);
  v.batch = t.shape[0];
  v.seq = t.shape[1];
  v.heads = t.shape[2];
  v.dim = t.shape[3];
  v.t4 = {static_cast<char*>(t.data) + t.byte_offset, s[0], s[1], s[2]};
  return v;
}

void check_params(const tigon_decode_attention_params& p) {
  if (!(p.scale > 0.f) || !std::isfinite(p.scale)) fail_arg("scale", "must be finite and > 0, got ", p.scale);
  if (!(p.softcap >= 0.f) || !std::isfinite(p.softcap))
    fail_arg("softcap", "must be finite and >= 0 (0: off), got ", p.softcap);
  if (p.window_left < -1) fail_arg("window_left", "must be -1 (unbounded) or >= 0, got ", p.window_left);
}

constexpr int64_t kCudaHeadDims[] = {64, 80, 96, 128, 256};

// CUDA reads head rows as 16-byte vectors.
void check_cuda_aligned(const View& v) {
  const Tensor4& t = v.t4;
  const bool ok = (reinterpret_cast<uintptr_t>(t.data) % 16) == 0 && (v.batch <= 1 || t.batch_stride % 8 == 0) &&
                  (v.seq <= 1 || t.seq_stride % 8 == 0) && (v.heads <= 1 || t.head_stride % 8 == 0);
  if (!ok)
    fail_arg(v.name, "CUDA reads head rows as 16-byte vectors: the data must be 16-byte aligned and every stride a ",
             "multiple of 8 elements");
}

// Checks q, k_cache, v_cache and params (everything a workspace size depends on) and builds the shape.
Shape build_shape(View* q, View* k, View* v, const tigon_tensor* q_in, const tigon_tensor* k_in,
                  const tigon_tensor* v_in, const tigon_decode_attention_params& params) {
  check_params(params);
  *q = as_view(q_in, "q", "[batch, tq, heads_q, head_dim]");
  *k = as_view(k_in, "k_cache", "[batch, s_max, heads_kv, head_dim]");
  *v = as_view(v_in, "v_cache", "[batch, s_max, heads_kv, head_dim]");
  check_dtype_in(q->dtype, "q", {DType::kBFloat16, DType::kFloat16, DType::kFloat32});
  check_same_device(*q->t, "q", *k->t, "k_cache");
  check_dtype_in(k->dtype, "k_cache", {q->dtype});
  if (q->dim == 0) fail_arg("q", "head_dim must be > 0, got shape ", shape_string(*q->t));
  if (q->heads == 0) fail_arg("q", "must have at least one head, got shape ", shape_string(*q->t));
  if (k->batch != q->batch || k->dim != q->dim)
    fail_arg("k_cache", "must be [batch, s_max, heads_kv, head_dim] with q's batch ", q->batch, " and head_dim ",
             q->dim, ", got shape ", shape_string(*k->t));
  if (k->heads == 0 || q->heads % k->heads != 0)
    fail_arg("k_cache", "heads_kv = ", k->heads, " must divide heads_q = ", q->heads, " (grouped-query attention)");
  check_same_device(*q->t, "q", *v->t, "v_cache");
  check_dtype_in(v->dtype, "v_cache", {q->dtype});
  if (!std::equal(v->t->shape, v->t->shape + 4, k->t->shape))
    fail_arg("v_cache", "must have k_cache's shape ", shape_string(*k->t), ", got ", shape_string(*v->t));
  if (is_cuda(*q->t)) {
    if (q->dtype == DType::kFloat32) fail_dtype("q", "float32 runs on the CPU only; CUDA takes bfloat16 or float16");
    if (std::find(std::begin(kCudaHeadDims), std::end(kCudaHeadDims), q->dim) == std::end(kCudaHeadDims))
      fail_arg("q", "head_dim ", q->dim, " is not supported on CUDA (64, 80, 96, 128 or 256; any on the CPU)");
    if (k->seq > INT32_MAX) fail_arg("k_cache", "s_max must fit in int32 on CUDA, got ", k->seq);
    check_cuda_aligned(*q);
    check_cuda_aligned(*k);
    check_cuda_aligned(*v);
  }
  Shape s;
  s.dtype = q->dtype;
  s.batch = q->batch;
  s.tq = q->seq;
  s.s_max = k->seq;
  s.heads_q = q->heads;
  s.heads_kv = k->heads;
  s.head_dim = q->dim;
  s.scale = params.scale;
  s.softcap = params.softcap;
  s.window_left = params.window_left;
  return s;
}

// An int32 [batch] of cache positions (cache_seqlens, cache_starts) whose entry b must lie in [0, upper(b)]. Host
// values are checked in full; the CUDA path cannot read them without a synchronisation (the kernels clamp them).
template <class Upper>
const int32_t* check_positions(const tigon_tensor* in, const char* arg, const View& q, const char* upper_name,
                               Upper upper) {
  const tigon_tensor& t = require(in, arg);
  check_same_device(*q.t, "q", t, arg);
  check_dtype_in(dtype_of(t, arg), arg, {DType::kInt32});
  if (t.ndim != 1 || t.shape[0] != q.batch)
    fail_arg(arg, "must be 1-D [batch] = [", q.batch, "], got shape ", shape_string(t));
  const auto* pos = static_cast<const int32_t*>(as_vector(t, arg, q.batch));
  if (!is_cuda(t))
    for (int64_t b = 0; b < q.batch; ++b)
      if (pos[b] < 0 || pos[b] > upper(b))
        fail_arg(arg, "entry ", b, " is ", pos[b], ", outside [0, ", upper_name, " = ", upper(b), "]");
  return pos;
}

float* check_lse(const tigon_tensor* in, const View& q) {
  const tigon_tensor& t = require(in, "lse");
  check_same_device(*q.t, "q", t, "lse");
  check_dtype_in(dtype_of(t, "lse"), "lse", {DType::kFloat32});
  if (t.ndim != 3 || t.shape[0] != q.batch || t.shape[1] != q.heads || t.shape[2] != q.seq)
    fail_arg("lse", "must be fp32 [batch, heads_q, tq] = [", q.batch, ", ", q.heads, ", ", q.seq, "], got shape ",
             shape_string(t));
  if (numel(t) == 0) return static_cast<float*>(static_cast<void*>(static_cast<char*>(t.data) + t.byte_offset));
  return static_cast<float*>(as_vector(t, "lse", numel(t)));
}

// The append's inputs: new rows and caches of one dtype on one device, [batch, tq | s_max, heads_kv, head_dim].
AppendProblem build_append(const tigon_tensor* k_new, const tigon_tensor* v_new, const tigon_tensor* k_cache,
                           const tigon_tensor* v_cache) {
  const View kn = as_view(k_new, "k_new", "[batch, tq, heads_kv, head_dim]");
  const View vn = as_view(v_new, "v_new", "[batch, tq, heads_kv, head_dim]");
  const View kc = as_view(k_cache, "k_cache", "[batch, s_max, heads_kv, head_dim]");
  const View vc = as_view(v_cache, "v_cache", "[batch, s_max, heads_kv, head_dim]");
  check_dtype_in(kc.dtype, "k_cache", {DType::kBFloat16, DType::kFloat16, DType::kFloat32});
  for (const View* v : {&kn, &vn, &vc}) {
    check_same_device(*kc.t, "k_cache", *v->t, v->name);
    check_dtype_in(v->dtype, v->name, {kc.dtype});
  }
  if (!std::equal(vc.t->shape, vc.t->shape + 4, kc.t->shape))
    fail_arg("v_cache", "must have k_cache's shape ", shape_string(*kc.t), ", got ", shape_string(*vc.t));
  if (kn.batch != kc.batch || kn.heads != kc.heads || kn.dim != kc.dim)
    fail_arg("k_new", "must be [batch, tq, heads_kv, head_dim] with k_cache's batch ", kc.batch, ", heads_kv ",
             kc.heads, " and head_dim ", kc.dim, ", got shape ", shape_string(*kn.t));
  if (!std::equal(vn.t->shape, vn.t->shape + 4, kn.t->shape))
    fail_arg("v_new", "must have k_new's shape ", shape_string(*kn.t), ", got ", shape_string(*vn.t));
  if (is_cuda(*kc.t) && kc.seq > INT32_MAX) fail_arg("k_cache", "s_max must fit in int32 on CUDA, got ", kc.seq);
  AppendProblem p;
  p.dtype = kc.dtype;
  p.batch = kc.batch;
  p.tq = kn.seq;
  p.s_max = kc.seq;
  p.heads = kc.heads;
  p.head_dim = kc.dim;
  p.k_new = kn.t4;
  p.v_new = vn.t4;
  p.k = kc.t4;
  p.v = vc.t4;
  return p;
}

}  // namespace
}  // namespace tigon::decode_attention

using namespace tigon;
using namespace tigon::decode_attention;

extern "C" {

tigon_status_t tigon_decode_attention_workspace_size(const tigon_tensor* q, const tigon_tensor* k_cache,
                                                     const tigon_tensor* v_cache, tigon_decode_attention_params params,
                                                     size_t* bytes) {
  return api_guard("tigon_decode_attention_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    View qv, kv, vv;
    [[maybe_unused]] const Shape s = build_shape(&qv, &kv, &vv, q, k_cache, v_cache, params);
    *bytes = 0;
    if (is_cuda(*qv.t)) TIGON_ON_CUDA(*qv.t, *bytes = cuda_workspace_bytes(s, qv.t->device.device_id));
  });
}

tigon_status_t tigon_decode_attention(const tigon_tensor* q, const tigon_tensor* k_cache, const tigon_tensor* v_cache,
                                      const tigon_tensor* cache_seqlens, const tigon_tensor* cache_starts,
                                      const tigon_tensor* out, const tigon_tensor* lse,
                                      tigon_decode_attention_params params, void* workspace, size_t workspace_bytes,
                                      void* stream) {
  return api_guard("tigon_decode_attention", [&] {
    Problem p;
    View qv, kv, vv;
    p.s = build_shape(&qv, &kv, &vv, q, k_cache, v_cache, params);
    const int64_t s_max = p.s.s_max;
    p.seqlens = check_positions(cache_seqlens, "cache_seqlens", qv, "s_max", [&](int64_t) { return s_max; });
    if (cache_starts)
      p.starts = check_positions(cache_starts, "cache_starts", qv, "cache_seqlens",
                                 [&](int64_t b) { return int64_t(p.seqlens[b]); });
    const View ov = as_view(out, "out", "[batch, tq, heads_q, head_dim]");
    check_same_device(*qv.t, "q", *ov.t, "out");
    check_dtype_in(ov.dtype, "out", {qv.dtype});
    if (!std::equal(ov.t->shape, ov.t->shape + 4, qv.t->shape))
      fail_arg("out", "must have q's shape ", shape_string(*qv.t), ", got ", shape_string(*ov.t));
    if (is_cuda(*ov.t)) check_cuda_aligned(ov);
    if (lse) p.lse = check_lse(lse, qv);
    const Span inputs[] = {{"q", q},
                           {"k_cache", k_cache},
                           {"v_cache", v_cache},
                           {"cache_seqlens", cache_seqlens},
                           {"cache_starts", cache_starts}};
    check_no_overlap({{"out", out}, {"lse", lse}}, inputs);
    p.q = qv.t4;
    p.k = kv.t4;
    p.v = vv.t4;
    p.out = ov.t4;
    if (p.s.batch == 0 || p.s.tq == 0) return;
    if (is_cuda(*qv.t)) {
      TIGON_ON_CUDA(*qv.t, {
        check_workspace(workspace, workspace_bytes, cuda_workspace_bytes(p.s, qv.t->device.device_id),
                        "tigon_decode_attention_workspace_size");
        run_cuda(p, workspace, workspace_bytes, stream);
      });
    } else {
      (void)workspace, (void)workspace_bytes, (void)stream;
      run_cpu(p);
    }
  });
}

tigon_status_t tigon_decode_attention_append(const tigon_tensor* k_new, const tigon_tensor* v_new,
                                             const tigon_tensor* k_cache, const tigon_tensor* v_cache,
                                             const tigon_tensor* cache_seqlens, void* stream) {
  return api_guard("tigon_decode_attention_append", [&] {
    AppendProblem p = build_append(k_new, v_new, k_cache, v_cache);
    const int64_t s_max = p.s_max;
    const tigon_tensor& seqlens = require(cache_seqlens, "cache_seqlens");
    check_same_device(*k_cache, "k_cache", seqlens, "cache_seqlens");
    check_dtype_in(dtype_of(seqlens, "cache_seqlens"), "cache_seqlens", {DType::kInt32});
    if (seqlens.ndim != 1 || seqlens.shape[0] != p.batch)
      fail_arg("cache_seqlens", "must be 1-D [batch] = [", p.batch, "], got shape ", shape_string(seqlens));
    p.seqlens = static_cast<const int32_t*>(as_vector(seqlens, "cache_seqlens", p.batch));
    if (!is_cuda(seqlens))
      for (int64_t b = 0; b < p.batch; ++b)
        if (p.seqlens[b] < 0 || p.seqlens[b] > s_max)
          fail_arg("cache_seqlens", "entry ", b, " is ", p.seqlens[b], ", outside [0, s_max = ", s_max, "]");
    const Span inputs[] = {{"k_new", k_new}, {"v_new", v_new}, {"cache_seqlens", cache_seqlens}};
    check_no_overlap({{"k_cache", k_cache}, {"v_cache", v_cache}}, inputs);
    if (p.batch == 0 || p.tq == 0 || p.heads == 0 || p.head_dim == 0) return;
    if (is_cuda(seqlens)) {
      TIGON_ON_CUDA(seqlens, append_cuda(p, stream));
    } else {
      (void)stream;
      append_cpu(p);
    }
  });
}

}  // extern "C"
