// Attention backward on CUDA: checks what the kernels need beyond the validated problem (an sm_90 device, a head dim
// with a kernel, enough workspace), flattens the problem into kernel arguments and launches the dtype's kernels.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "attention/attention.h"
#include "attention/attention_bwd_launch.h"
#include "attention/attention_bwd_sm90.h"
#include "common/cuda_check.h"
#include "common/device.h"
#include "common/error.h"

namespace tigon::attention {

namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Rows of lse (and of each workspace array) per query head.
int64_t stat_rows(const Shape& s) { return s.varlen() ? s.total_q : s.batch * s.seqlen_q; }

bwd::View view(const Tensor4& t) { return {t.data, t.batch_stride, t.seq_stride, t.head_stride}; }

bool aligned16(const Tensor4& t) {
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.batch_stride % 8 == 0 && t.seq_stride % 8 == 0 &&
         t.head_stride % 8 == 0;
}

// A window wider than both sequences together masks nothing: unbounded, which keeps the kernels' int arithmetic
// in range.
int clamp_window(int64_t w, int64_t span) { return w < 0 || w > span ? -1 : int(w); }

// The TMA kernel's head dims.
bool has_sm90_kernel(const Shape& s) { return s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256; }

// What the TMA kernel needs of the tensors beyond the validated problem: q, k, v, dout as TMA sources (16-byte
// aligned start and strides), o read in 16-byte vectors, dq, dk, dv written as element pairs. Tensors that are not
// (a broadcast dout, odd strides) take the other kernel.
bool fits_sm90_kernel(const BwdProblem& pr) {
  const Shape& s = pr.s;
  const int64_t rows_q = s.varlen() ? s.total_q : s.seqlen_q, rows_k = s.varlen() ? s.total_k : s.seqlen_k;
  const int64_t batch = s.varlen() ? 1 : s.batch;
  auto vec16 = [&](const Tensor4& t, int64_t rows, int64_t heads) {
    auto ok = [](int64_t extent, int64_t stride) { return extent <= 1 || (stride > 0 && stride % 8 == 0); };
    return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && ok(rows, t.seq_stride) && ok(heads, t.head_stride) &&
           ok(batch, t.batch_stride);
  };
  auto pairs = [&](const Tensor4& t) {
    return reinterpret_cast<uintptr_t>(t.data) % 4 == 0 && t.seq_stride % 2 == 0 && t.head_stride % 2 == 0 &&
           t.batch_stride % 2 == 0;
  };
  return vec16(pr.q, rows_q, s.heads_q) && vec16(pr.dout, rows_q, s.heads_q) && vec16(pr.o, rows_q, s.heads_q) &&
         vec16(pr.k, rows_k, s.heads_kv) && vec16(pr.v, rows_k, s.heads_kv) && pairs(pr.dq) && pairs(pr.dk) &&
         pairs(pr.dv) && rows_q <= INT_MAX && rows_k <= INT_MAX &&
         (s.seqlen_k + 63) / 64 * s.heads_kv * s.batch <= INT_MAX;  // one CTA per key tile (64 or more): grid x
}

// The other kernels' workspace: lse in base 2, then delta, each this many bytes.
size_t stats_bytes(const Shape& s) { return align_up(size_t(stat_rows(s)) * size_t(s.heads_q) * sizeof(float)); }

}  // namespace

size_t bwd_cuda_workspace_bytes(const Shape& s, bool deterministic, int /*device*/) {
  const size_t other = 2 * stats_bytes(s);
  return has_sm90_kernel(s) ? std::max(other, sm90::bwd_workspace(s, deterministic).bytes) : other;
}

void bwd_cuda(const BwdProblem& pr, void* workspace, size_t workspace_bytes, void* stream) {
  const Shape& s = pr.s;
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  require_sm90a(device, "attention backward: the CUDA kernels");
  if (s.head_dim != 64 && s.head_dim != 96 && s.head_dim != 128 && s.head_dim != 256)
    fail(TIGON_ERROR_NOT_SUPPORTED, "attention backward: head_dim ", s.head_dim,
         " has no CUDA kernel (64, 96, 128 or 256)");
  if (s.dtype != DType::kBFloat16 && s.dtype != DType::kFloat16)
    fail(TIGON_ERROR_NOT_SUPPORTED, "attention backward: the CUDA kernels take bf16 or fp16, not ",
         dtype_name(s.dtype));
  if (s.batch > 65535 || s.heads_q > 65535 || s.seqlen_q > INT_MAX || s.seqlen_k > INT_MAX)
    fail(TIGON_ERROR_NOT_SUPPORTED, "attention backward: more than 65535 sequences or heads, or a sequence over 2^31 ",
         "tokens, is beyond the CUDA kernels' grid");
  const size_t need = bwd_cuda_workspace_bytes(s, pr.deterministic, device);
  if (workspace_bytes < need || (need > 0 && workspace == nullptr))
    fail_arg("workspace", "needs ", need, " bytes, got ", workspace_bytes);
  if (s.batch == 0 || s.heads_q == 0) return;
  if (has_sm90_kernel(s) && fits_sm90_kernel(pr)) {
    const auto st = static_cast<cudaStream_t>(stream);
    if (s.head_dim == 64)
      sm90::bwd_hdim64(pr, workspace, st);
    else if (s.head_dim == 128)
      sm90::bwd_hdim128(pr, workspace, st);
    else
      sm90::bwd_hdim256(pr, workspace, st);
    return;
  }

  bwd::Params p;
  const Tensor4* tensors[] = {&pr.q, &pr.k, &pr.v, &pr.o, &pr.dout, &pr.dq, &pr.dk, &pr.dv};
  bwd::View* views[] = {&p.q, &p.k, &p.v, &p.o, &p.dout, &p.dq, &p.dk, &p.dv};
  for (int i = 0; i < 8; ++i) *views[i] = view(*tensors[i]);
  p.lse = pr.lse;
  p.rows_q = stat_rows(s);
  p.lse_log2 = static_cast<float*>(workspace);
  p.delta = reinterpret_cast<float*>(static_cast<char*>(workspace) + stats_bytes(s));
  p.cu_seqlens_q = s.cu_seqlens_q;
  p.cu_seqlens_k = s.cu_seqlens_k;
  p.batch = int(s.batch);
  p.heads_q = int(s.heads_q);
  p.heads_kv = int(s.heads_kv);
  p.head_dim = int(s.head_dim);
  p.max_seqlen_q = int(s.seqlen_q);
  p.max_seqlen_k = int(s.seqlen_k);
  p.scale = s.scale;
  p.softcap = s.softcap;
  const int64_t span = s.seqlen_q + s.seqlen_k;
  p.window_left = clamp_window(s.window_left, span);
  p.window_right = s.causal ? 0 : clamp_window(s.window_right, span);
  p.aligned16 = aligned16(pr.q) && aligned16(pr.k) && aligned16(pr.v) && aligned16(pr.dout);

  const auto st = static_cast<cudaStream_t>(stream);
  if (s.dtype == DType::kBFloat16)
    bwd::launch_bf16(p, st);
  else
    bwd::launch_f16(p, st);
}

}  // namespace tigon::attention
