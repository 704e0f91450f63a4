// Attention C API: argument validation, then the CPU reference or the CUDA kernels by the tensors' device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "attention/attention.h"
#include "common/device.h"
#include "common/error.h"
#include "common/overlap.h"
#include "common/tensor.h"
#include "tigon/attention.h"

namespace tigon::attention {
namespace {

// A q/k/v/o-like tensor as [batch, seq, heads, head_dim] (variable length: [total, heads, head_dim], batch 1), with
// what the overlap checks need: its own shape and element strides.
struct View {
  const tigon_tensor* t = nullptr;
  const char* name = "";
  DType dtype = DType::kBFloat16;
  int64_t batch = 1, seq = 0, heads = 0, dim = 0;
  Tensor4 t4;
};

char* first_element(const tigon_tensor& t) { return static_cast<char*>(t.data) + t.byte_offset; }

View as_view(const tigon_tensor* in, const char* name, bool varlen) {
  const tigon_tensor& t = require(in, name);
  View v;
  v.t = &t;
  v.name = name;
  const int rank = varlen ? 3 : 4;
  if (t.ndim != rank)
    fail_arg(name,
             varlen ? "must be 3-D [total, heads, head_dim] with cu_seqlens, got shape "
                    : "must be 4-D [batch, seqlen, heads, head_dim] without cu_seqlens, got shape ",
             shape_string(t));
  v.dtype = dtype_of(t, name);
  const std::vector<int64_t> s = strides_of(t);
  for (int i = 0; i < rank; ++i)
    if (s[i] < 0) fail_arg(name, "strides must be >= 0, got ", s[i], " at dim ", i);
  if (s[rank - 1] != 1 && t.shape[rank - 1] > 1) fail_arg(name, "head_dim (last) stride must be 1, got ", s[rank - 1]);
  const int seq = varlen ? 0 : 1;  // the sequence dim; heads and head_dim follow it
  v.batch = varlen ? 1 : t.shape[0];
  v.seq = t.shape[seq];
  v.heads = t.shape[seq + 1];
  v.dim = t.shape[seq + 2];
  v.t4.data = first_element(t);
  v.t4.batch_stride = varlen ? 0 : s[0];
  v.t4.seq_stride = s[seq];
  v.t4.head_stride = s[seq + 1];
  return v;
}

// ---- params, shapes, lse, cu_seqlens -------------------------------------------------------------------------------

void check_params(const tigon_attention_params& p) {
  if (!(p.scale > 0.f) || !std::isfinite(p.scale)) fail_arg("scale", "must be finite and > 0, got ", p.scale);
  if (!(p.softcap >= 0.f) || !std::isfinite(p.softcap))
    fail_arg("softcap", "must be finite and >= 0 (0: off), got ", p.softcap);
  if (p.causal != 0 && p.causal != 1) fail_arg("causal", "must be 0 or 1, got ", p.causal);
  if (p.window_left < -1) fail_arg("window_left", "must be -1 (unbounded) or >= 0, got ", p.window_left);
  if (p.window_right < -1) fail_arg("window_right", "must be -1 (unbounded) or >= 0, got ", p.window_right);
  if (p.causal && p.window_right > 0)
    fail_arg("window_right", "must be -1 or 0 when causal (causal already hides every key right of the diagonal), got ",
             p.window_right);
  if (p.deterministic != 0 && p.deterministic != 1) fail_arg("deterministic", "must be 0 or 1, got ", p.deterministic);
}

// The same dtype, device and shape as a reference view (o like q, dk like k, ...).
void check_like(const View& v, const View& ref) {
  check_same_device(*ref.t, ref.name, *v.t, v.name);
  check_dtype_in(v.dtype, v.name, {ref.dtype});
  if (!std::equal(v.t->shape, v.t->shape + v.t->ndim, ref.t->shape))
    fail_arg(v.name, "must have ", ref.name, "'s shape ", shape_string(*ref.t), ", got ", shape_string(*v.t));
}

const int32_t* check_cu_seqlens(const tigon_tensor* in, const char* name, const View& q, int64_t* batch) {
  const tigon_tensor& t = require(in, name);
  check_same_device(*q.t, q.name, t, name);
  check_dtype_in(dtype_of(t, name), name, {DType::kInt32});
  if (t.ndim != 1 || t.shape[0] < 1) fail_arg(name, "must be 1-D [batch + 1], got shape ", shape_string(t));
  if (*batch >= 0 && t.shape[0] != *batch + 1)
    fail_arg(name, "must have ", *batch + 1, " entries like cu_seqlens_q, got shape ", shape_string(t));
  *batch = t.shape[0] - 1;
  return static_cast<const int32_t*>(as_vector(t, name, t.shape[0]));
}

// Host cu_seqlens (CPU tensors) are checked in full; the CUDA path cannot read them without a synchronisation.
void check_cu_values(const int32_t* cu, int64_t batch, int64_t total, int64_t max_len, const char* name,
                     const char* max_name) {
  if (cu[0] != 0) fail_arg(name, "must start at 0, got ", cu[0]);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = int64_t(cu[b + 1]) - cu[b];
    if (len < 0) fail_arg(name, "must be non-decreasing, got ", cu[b], " then ", cu[b + 1], " at ", b);
    if (len > max_len) fail_arg(name, "sequence ", b, " has length ", len, ", more than ", max_name, " = ", max_len);
  }
  if (cu[batch] != total)
    fail_arg(name, "must end at the packed row count ", total, " (the tensor's first dim), got ", cu[batch]);
}

// lse: fp32, contiguous, dense [batch, heads_q, seqlen_q] or variable length [heads_q, total_q].
float* check_lse(const tigon_tensor* in, const View& q, const Shape& s) {
  const tigon_tensor& t = require(in, "lse");
  check_same_device(*q.t, q.name, t, "lse");
  check_dtype_in(dtype_of(t, "lse"), "lse", {DType::kFloat32});
  const std::vector<int64_t> want =
      s.varlen() ? std::vector<int64_t>{s.heads_q, s.total_q} : std::vector<int64_t>{s.batch, s.heads_q, s.seqlen_q};
  if (t.ndim != int(want.size()) || !std::equal(want.begin(), want.end(), t.shape))
    fail_arg("lse", "must be fp32 ", s.varlen() ? "[heads_q, total_q] = [" : "[batch, heads_q, seqlen_q] = [", want[0],
             ", ", want[1], s.varlen() ? "" : cat(", ", want[2]), "], got shape ", shape_string(t));
  if (numel(t) == 0) return static_cast<float*>(static_cast<void*>(first_element(t)));  // torch's strides for 0 rows
  return static_cast<float*>(as_vector(t, "lse", numel(t)));
}

constexpr int kCudaHeadDims[] = {64, 96, 128, 256};

// Checks q, k, v, cu_seqlens and params (everything a workspace size depends on) and builds the shape.
Shape build_shape(View* q, View* k, View* v, const tigon_tensor* q_in, const tigon_tensor* k_in,
                  const tigon_tensor* v_in, const tigon_tensor* cu_q, const tigon_tensor* cu_k,
                  const tigon_attention_params& params) {
  check_params(params);
  if ((cu_q == nullptr) != (cu_k == nullptr))
    fail_arg(cu_q ? "cu_seqlens_k" : "cu_seqlens_q", "is NULL but ", cu_q ? "cu_seqlens_q" : "cu_seqlens_k",
             " is given: pass both (variable length) or neither (dense)");
  const bool varlen = cu_q != nullptr;
  *q = as_view(q_in, "q", varlen);
  *k = as_view(k_in, "k", varlen);
  *v = as_view(v_in, "v", varlen);
  check_dtype_in(q->dtype, "q", {DType::kBFloat16, DType::kFloat16, DType::kFloat32});
  check_same_device(*q->t, "q", *k->t, "k");
  check_dtype_in(k->dtype, "k", {q->dtype});
  if (q->dim == 0) fail_arg("q", "head_dim must be > 0, got shape ", shape_string(*q->t));
  if (k->dim != q->dim) fail_arg("k", "head_dim must be q's ", q->dim, ", got shape ", shape_string(*k->t));
  if (!varlen && k->batch != q->batch)
    fail_arg("k", "batch must be q's ", q->batch, ", got shape ", shape_string(*k->t));
  if (q->heads == 0) fail_arg("q", "must have at least one head, got shape ", shape_string(*q->t));
  if (k->heads == 0 || q->heads % k->heads != 0)
    fail_arg("k", "heads_kv = ", k->heads, " must divide heads_q = ", q->heads, " (grouped-query attention)");
  check_like(*v, *k);
  if (is_cuda(*q->t)) {
    if (q->dtype == DType::kFloat32) fail_dtype("q", "float32 runs on the CPU only; CUDA takes bfloat16 or float16");
    if (std::find(std::begin(kCudaHeadDims), std::end(kCudaHeadDims), q->dim) == std::end(kCudaHeadDims))
      fail_arg("q", "head_dim ", q->dim, " is not supported on CUDA (64, 96, 128 or 256; any on the CPU)");
  }

  Shape s;
  s.dtype = q->dtype;
  s.heads_q = q->heads;
  s.heads_kv = k->heads;
  s.head_dim = q->dim;
  s.scale = params.scale;
  s.softcap = params.softcap;
  s.causal = params.causal == 1;
  s.window_left = params.window_left;
  s.window_right = s.causal ? 0 : params.window_right;
  if (!varlen) {
    s.batch = q->batch;
    s.seqlen_q = q->seq;
    s.seqlen_k = k->seq;
    return s;
  }
  int64_t batch = -1;
  s.cu_seqlens_q = check_cu_seqlens(cu_q, "cu_seqlens_q", *q, &batch);
  s.cu_seqlens_k = check_cu_seqlens(cu_k, "cu_seqlens_k", *q, &batch);
  s.batch = batch;
  if (params.max_seqlen_q <= 0) fail_arg("max_seqlen_q", "must be > 0 with cu_seqlens, got ", params.max_seqlen_q);
  if (params.max_seqlen_k <= 0) fail_arg("max_seqlen_k", "must be > 0 with cu_seqlens, got ", params.max_seqlen_k);
  s.seqlen_q = params.max_seqlen_q;
  s.seqlen_k = params.max_seqlen_k;
  s.total_q = q->seq;
  s.total_k = k->seq;
  if (!is_cuda(*q->t)) {
    check_cu_values(s.cu_seqlens_q, batch, s.total_q, s.seqlen_q, "cu_seqlens_q", "max_seqlen_q");
    check_cu_values(s.cu_seqlens_k, batch, s.total_k, s.seqlen_k, "cu_seqlens_k", "max_seqlen_k");
  }
  return s;
}

// Checks what a workspace size depends on, then reports it (0 on the CPU).
void workspace_size(const tigon_tensor* q, const tigon_tensor* k, const tigon_tensor* v, const tigon_tensor* cu_q,
                    const tigon_tensor* cu_k, const tigon_attention_params& params, size_t* bytes,
                    [[maybe_unused]] bool backward) {
  if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
  View qv, kv, vv;
  [[maybe_unused]] const Shape s = build_shape(&qv, &kv, &vv, q, k, v, cu_q, cu_k, params);
  *bytes = 0;
  if (!is_cuda(*qv.t)) return;
  TIGON_ON_CUDA(*qv.t, {
    const int device = qv.t->device.device_id;
    *bytes =
        backward ? bwd_cuda_workspace_bytes(s, params.deterministic == 1, device) : fwd_cuda_workspace_bytes(s, device);
  });
}

bool no_rows(const Shape& s) { return s.batch == 0 || (s.varlen() ? s.total_q : s.seqlen_q) == 0; }

}  // namespace
}  // namespace tigon::attention

using namespace tigon;
using namespace tigon::attention;

extern "C" {

tigon_status_t tigon_attention_fwd_workspace_size(const tigon_tensor* q, const tigon_tensor* k, const tigon_tensor* v,
                                                  const tigon_tensor* cu_seqlens_q, const tigon_tensor* cu_seqlens_k,
                                                  tigon_attention_params params, size_t* bytes) {
  return api_guard("tigon_attention_fwd_workspace_size",
                   [&] { workspace_size(q, k, v, cu_seqlens_q, cu_seqlens_k, params, bytes, false); });
}

tigon_status_t tigon_attention_fwd(const tigon_tensor* q, const tigon_tensor* k, const tigon_tensor* v,
                                   const tigon_tensor* cu_seqlens_q, const tigon_tensor* cu_seqlens_k,
                                   const tigon_tensor* o, const tigon_tensor* lse, tigon_attention_params params,
                                   void* workspace, size_t workspace_bytes, void* stream) {
  return api_guard("tigon_attention_fwd", [&] {
    FwdProblem p;
    View qv, kv, vv;
    p.s = build_shape(&qv, &kv, &vv, q, k, v, cu_seqlens_q, cu_seqlens_k, params);
    const View ov = as_view(o, "o", p.s.varlen());
    check_like(ov, qv);
    if (lse) p.lse = check_lse(lse, qv, p.s);
    const Span inputs[] = {
        {"q", qv.t}, {"k", kv.t}, {"v", vv.t}, {"cu_seqlens_q", cu_seqlens_q}, {"cu_seqlens_k", cu_seqlens_k}};
    check_no_overlap({{"o", ov.t}, {"lse", lse}}, inputs);
    p.q = qv.t4;
    p.k = kv.t4;
    p.v = vv.t4;
    p.o = ov.t4;
    if (no_rows(p.s)) return;
    if (is_cuda(*qv.t)) {
      TIGON_ON_CUDA(*qv.t, {
        check_workspace(workspace, workspace_bytes, fwd_cuda_workspace_bytes(p.s, qv.t->device.device_id),
                        "tigon_attention_fwd_workspace_size");
        fwd_cuda(p, workspace, workspace_bytes, stream);
      });
    } else {
      (void)workspace, (void)workspace_bytes, (void)stream;  // the CPU path needs neither
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_attention_bwd_workspace_size(const tigon_tensor* q, const tigon_tensor* k, const tigon_tensor* v,
                                                  const tigon_tensor* cu_seqlens_q, const tigon_tensor* cu_seqlens_k,
                                                  tigon_attention_params params, size_t* bytes) {
  return api_guard("tigon_attention_bwd_workspace_size",
                   [&] { workspace_size(q, k, v, cu_seqlens_q, cu_seqlens_k, params, bytes, true); });
}

tigon_status_t tigon_attention_bwd(const tigon_tensor* dout, const tigon_tensor* q, const tigon_tensor* k,
                                   const tigon_tensor* v, const tigon_tensor* o, const tigon_tensor* lse,
                                   const tigon_tensor* cu_seqlens_q, const tigon_tensor* cu_seqlens_k,
                                   const tigon_tensor* dq, const tigon_tensor* dk, const tigon_tensor* dv,
                                   tigon_attention_params params, void* workspace, size_t workspace_bytes,
                                   void* stream) {
  return api_guard("tigon_attention_bwd", [&] {
    BwdProblem p;
    View qv, kv, vv;
    p.s = build_shape(&qv, &kv, &vv, q, k, v, cu_seqlens_q, cu_seqlens_k, params);
    const bool varlen = p.s.varlen();
    const View ov = as_view(o, "o", varlen), dov = as_view(dout, "dout", varlen);
    const View dqv = as_view(dq, "dq", varlen), dkv = as_view(dk, "dk", varlen), dvv = as_view(dv, "dv", varlen);
    check_like(ov, qv);
    check_like(dov, qv);
    check_like(dqv, qv);
    check_like(dkv, kv);
    check_like(dvv, vv);
    p.lse = check_lse(lse, qv, p.s);
    const Span inputs[] = {{"dout", dov.t},
                           {"q", qv.t},
                           {"k", kv.t},
                           {"v", vv.t},
                           {"o", ov.t},
                           {"lse", lse},
                           {"cu_seqlens_q", cu_seqlens_q},
                           {"cu_seqlens_k", cu_seqlens_k}};
    check_no_overlap({{"dq", dqv.t}, {"dk", dkv.t}, {"dv", dvv.t}}, inputs);
    p.dout = dov.t4;
    p.q = qv.t4;
    p.k = kv.t4;
    p.v = vv.t4;
    p.o = ov.t4;
    p.dq = dqv.t4;
    p.dk = dkv.t4;
    p.dv = dvv.t4;
    p.deterministic = params.deterministic == 1;
    if (numel(*dqv.t) == 0 && numel(*dkv.t) == 0) return;  // nothing to write (dv is shaped like dk)
    if (is_cuda(*qv.t)) {
      TIGON_ON_CUDA(*qv.t, {
        check_workspace(workspace, workspace_bytes,
                        bwd_cuda_workspace_bytes(p.s, p.deterministic, qv.t->device.device_id),
                        "tigon_attention_bwd_workspace_size");
        bwd_cuda(p, workspace, workspace_bytes, stream);
      });
    } else {
      (void)workspace, (void)workspace_bytes, (void)stream;
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
