// Attention forward on CUDA: what the Hopper kernel needs of the device and the tensors, checked before any launch,
// then the dispatch by head dim (the kernels: attention_fwd_sm90_*.cu*).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "attention/attention.h"
#include "attention/attention_fwd_sm90.h"
#include "common/cuda_check.h"
#include "common/device.h"

namespace tigon::attention {
namespace {

// TMA reads q, k and v: 16-byte aligned start, strides positive multiples of 16 bytes below 2^40 bytes. A stride of
// an extent-1 dimension is never stepped, so it is replaced by a valid one.
void check_tma_source(const char* name, Tensor4& t, int64_t rows, int64_t heads, int64_t batch, int elem_bytes) {
  if ((reinterpret_cast<uintptr_t>(t.data) & 15u) != 0)
    fail_arg(name, "the CUDA attention kernel loads it with TMA, which needs a 16-byte aligned data pointer");
  auto check = [&](const char* what, int64_t extent, int64_t& stride) {
    if (extent <= 1) {
      stride = 16 / elem_bytes;
    } else if (stride <= 0 || (stride * elem_bytes) % 16 != 0 || stride * elem_bytes >= (int64_t(1) << 40)) {
      fail_arg(name, "the CUDA attention kernel loads it with TMA, which needs its ", what, " stride (", stride,
               " elements) to be a positive multiple of 16 bytes below 2^40 bytes");
    }
  };
  check("sequence", rows, t.seq_stride);
  check("head", heads, t.head_stride);
  check("batch", batch, t.batch_stride);
}

// o is written as pairs of adjacent elements (4-byte stores).
void check_output(const Tensor4& o, const Shape& s) {
  const bool odd_stride = (s.seqlen_q > 1 || s.varlen()) && o.seq_stride % 2 != 0;
  if ((reinterpret_cast<uintptr_t>(o.data) & 3u) != 0 || odd_stride || (s.heads_q > 1 && o.head_stride % 2 != 0) ||
      (!s.varlen() && s.batch > 1 && o.batch_stride % 2 != 0))
    fail_arg("o",
             "the CUDA attention kernel stores element pairs: it needs a 4-byte aligned data pointer and even "
             "strides");
}

}  // namespace

size_t fwd_cuda_workspace_bytes(const Shape&, int) { return 0; }

void fwd_cuda(const FwdProblem& problem, void*, size_t, void* stream) {
  const Shape& s = problem.s;
  const bool varlen = s.varlen();
  const int64_t rows_q = varlen ? s.total_q : s.seqlen_q, rows_k = varlen ? s.total_k : s.seqlen_k;
  if (s.batch == 0 || s.heads_q == 0 || rows_q == 0 || s.seqlen_q == 0) return;  // nothing to write
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  require_sm90a(device, "the CUDA attention forward");
  if (s.dtype != DType::kBFloat16 && s.dtype != DType::kFloat16)
    fail_dtype("q", dtype_name(s.dtype), ": the CUDA attention kernel takes bf16 or fp16");
  // One CTA per 128-row query tile of each (head, sequence): the grid's int32 block index bounds the tiles.
  if (std::max({rows_q, rows_k, s.seqlen_q, s.seqlen_k}) > INT_MAX ||
      (s.seqlen_q + 127) / 128 * s.heads_q * s.batch > INT_MAX)
    fail_arg("q", "too large for the CUDA attention kernel (at most 2^31 - 1 tokens and query tiles of 128 rows)");

  FwdProblem p = problem;
  // No keys (every row gets o = 0, lse = -inf): k and v may have no memory at all, but TMA descriptors need an
  // address; q's serves and is never read through them.
  if (rows_k == 0) p.k.data = p.v.data = p.q.data;
  const int bytes = dtype_bytes(s.dtype);
  const int64_t batch = varlen ? 1 : s.batch;
  check_tma_source("q", p.q, rows_q, s.heads_q, batch, bytes);
  check_tma_source("k", p.k, rows_k, s.heads_kv, batch, bytes);
  check_tma_source("v", p.v, rows_k, s.heads_kv, batch, bytes);
  check_output(p.o, s);

  const auto st = static_cast<cudaStream_t>(stream);
  switch (s.head_dim) {
    case 64: sm90::fwd_hdim64(p, st); break;
    case 96: sm90::fwd_hdim96(p, st); break;
    case 128: sm90::fwd_hdim128(p, st); break;
    case 256: sm90::fwd_hdim256(p, st); break;
    default: fail_arg("q", "head_dim ", s.head_dim, ": the CUDA attention kernel takes 64, 96, 128 or 256");
  }
}

}  // namespace tigon::attention
