// Hopper forward kernel: TMA descriptors, parameters and the launch, per element type and head dim.
#pragma once

#include <cutlass/numeric_types.h>

#include <algorithm>

#include "attention/attention.h"
#include "attention/attention_fwd_sm90.h"
#include "attention/attention_fwd_sm90_kernel.cuh"
#include "common/cuda_check.h"

namespace tigon::attention::sm90 {

// q, k or v as a TMA source: (rows, head_dim, heads, batch). Variable length packs every sequence's rows and has
// batch 1.
template <class C>
auto gmem_view(const Tensor4& t, int64_t rows, int64_t heads, int64_t batch) {
  using Element = typename C::Element;
  return make_tensor(
      make_gmem_ptr(static_cast<Element const*>(t.data)),
      make_layout(typename C::GmemShape{int32_t(rows), int32_t(C::kHeadDim), int32_t(heads), int32_t(batch)},
                  typename C::GmemStride{t.seq_stride, _1{}, t.head_stride, t.batch_stride}));
}

template <class Element, int kHeadDim>
void launch_fwd(const FwdProblem& pr, cudaStream_t stream) {
  using C = FwdConfig<Element, kHeadDim>;
  const Shape& s = pr.s;
  const bool varlen = s.varlen();
  // TMA dimensions must be at least 1; an empty key side still gets a descriptor, never used.
  const int64_t rows_q = std::max<int64_t>(1, varlen ? s.total_q : s.seqlen_q);
  const int64_t rows_k = std::max<int64_t>(1, varlen ? s.total_k : s.seqlen_k);
  const int64_t batch = varlen ? 1 : s.batch;

  FwdParams<C> p;
  p.tma_q = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<C>(pr.q, rows_q, s.heads_q, batch), typename C::SmemLayoutQ{},
                          typename C::TileQ{}, _1{});
  p.tma_k = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<C>(pr.k, rows_k, s.heads_kv, batch),
                          typename C::SmemLayoutKVStage{}, typename C::TileKV{}, _1{});
  p.tma_v = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<C>(pr.v, rows_k, s.heads_kv, batch),
                          typename C::SmemLayoutKVStage{}, typename C::TileKV{}, _1{});
  p.shape_q = typename C::GmemShape{int32_t(rows_q), int32_t(kHeadDim), int32_t(s.heads_q), int32_t(batch)};
  p.shape_k = typename C::GmemShape{int32_t(rows_k), int32_t(kHeadDim), int32_t(s.heads_kv), int32_t(batch)};
  p.o = static_cast<Element*>(pr.o.data);
  p.o_batch_stride = varlen ? 0 : pr.o.batch_stride;
  p.o_seq_stride = pr.o.seq_stride;
  p.o_head_stride = pr.o.head_stride;
  p.lse = pr.lse;
  p.cu_seqlens_q = s.cu_seqlens_q;
  p.cu_seqlens_k = s.cu_seqlens_k;
  p.seqlen_q = int(s.seqlen_q);
  p.seqlen_k = int(s.seqlen_k);
  p.total_q = int(s.total_q);
  p.heads_q = int(s.heads_q);
  p.group = int(s.group());
  constexpr float kLog2e = 1.4426950408889634f;
  p.tanh_scale = s.softcap > 0.f ? s.scale / s.softcap : 0.f;
  p.score_log2 = (s.softcap > 0.f ? s.softcap : s.scale) * kLog2e;
  // A window reaching past both lengths hides nothing: unbounded, which also keeps the kernel's int32 sums small.
  auto window = [&](int64_t w) { return w < 0 || w >= s.seqlen_q + s.seqlen_k ? -1 : int(w); };
  p.window_left = window(s.window_left);
  p.window_right = window(s.window_right);

  // Sections of (head, sequence) pairs whose keys and values fill at most half of L2 (query heads of one key/value
  // head are adjacent pairs and share theirs).
  int device = 0, l2_bytes = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  const int64_t kv_bytes_per_pair = std::max<int64_t>(1, 2 * s.seqlen_k * kHeadDim * sizeof(Element) / s.group());
  p.m_blocks = int((s.seqlen_q + C::kBlockM - 1) / C::kBlockM);
  p.pairs = int(s.heads_q * s.batch);
  p.section_pairs = int(std::clamp<int64_t>(l2_bytes / 2 / kv_bytes_per_pair, 1, p.pairs));
  const dim3 grid(unsigned(int64_t(p.m_blocks) * p.pairs));
  const int smem = int(sizeof(typename C::SharedStorage));
  auto kernel = fwd_kernel<C>;
  TIGON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<grid, C::kThreads, smem, stream>>>(p);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim>
void launch_fwd_any_dtype(const FwdProblem& p, cudaStream_t stream) {
  if (p.s.dtype == DType::kBFloat16) {
    launch_fwd<cutlass::bfloat16_t, kHeadDim>(p, stream);
  } else {
    launch_fwd<cutlass::half_t, kHeadDim>(p, stream);
  }
}

}  // namespace tigon::attention::sm90
