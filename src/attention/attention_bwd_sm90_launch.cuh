// Hopper backward kernel: workspace layout, TMA descriptors, parameters, the work items' order and the three
// launches, per element type and head dim.
#pragma once

#include <cutlass/numeric_types.h>

#include <algorithm>

#include "attention/attention.h"
#include "attention/attention_bwd_sm90.h"
#include "attention/attention_bwd_sm90_kernel.cuh"
#include "attention/attention_fwd_sm90_launch.cuh"
#include "common/cuda_check.h"
#include "common/error.h"

namespace tigon::attention::sm90 {

template <class Element, int kHeadDim>
void launch_bwd(const BwdProblem& pr, void* workspace, cudaStream_t stream) {
  using C = BwdConfig<Element, kHeadDim>;
  using F = FwdConfig<Element, kHeadDim>;
  const Shape& s = pr.s;
  const bool varlen = s.varlen();
  const int64_t rows_q = std::max<int64_t>(1, varlen ? s.total_q : s.seqlen_q);
  const int64_t rows_k = std::max<int64_t>(1, varlen ? s.total_k : s.seqlen_k);
  const int64_t batch = varlen ? 1 : s.batch;
  const BwdWorkspace ws = bwd_workspace(s, pr.deterministic);

  BwdParams<C> p;
  p.tma_q = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<F>(pr.q, rows_q, s.heads_q, batch), typename C::SmemLayoutQStage{},
                          typename C::TileQ{}, _1{});
  p.tma_dout = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<F>(pr.dout, rows_q, s.heads_q, batch),
                             typename C::SmemLayoutQStage{}, typename C::TileQ{}, _1{});
  p.tma_k = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<F>(pr.k, rows_k, s.heads_kv, batch), typename C::SmemLayoutKV{},
                          typename C::TileKV{}, _1{});
  p.tma_v = make_tma_copy(SM90_TMA_LOAD{}, gmem_view<F>(pr.v, rows_k, s.heads_kv, batch), typename C::SmemLayoutKV{},
                          typename C::TileKV{}, _1{});
  p.shape_q = typename C::GmemShape{int32_t(rows_q), int32_t(kHeadDim), int32_t(s.heads_q), int32_t(batch)};
  p.shape_k = typename C::GmemShape{int32_t(rows_k), int32_t(kHeadDim), int32_t(s.heads_kv), int32_t(batch)};

  auto strides = [&](const Tensor4& t, int64_t (&out)[3]) {
    out[0] = varlen ? 0 : t.batch_stride, out[1] = t.seq_stride, out[2] = t.head_stride;
  };
  p.o = static_cast<const Element*>(pr.o.data);
  p.dout = static_cast<const Element*>(pr.dout.data);
  strides(pr.o, p.o_strides);
  strides(pr.dout, p.dout_strides);
  p.dq = static_cast<Element*>(pr.dq.data);
  p.dk = static_cast<Element*>(pr.dk.data);
  p.dv = static_cast<Element*>(pr.dv.data);
  strides(pr.dq, p.dq_strides);
  strides(pr.dk, p.dk_strides);
  strides(pr.dv, p.dv_strides);
  p.lse = pr.lse;

  char* base = static_cast<char*>(workspace);
  p.lse_log2 = reinterpret_cast<float*>(base + ws.lse_log2);
  p.delta = reinterpret_cast<float*>(base + ws.delta);
  p.dq_accum = reinterpret_cast<float*>(base + ws.dq_accum);
  p.semaphores = reinterpret_cast<int*>(base + ws.semaphores);
  p.tiles_per_head = ws.tiles_per_head;
  p.dq_accum1 = reinterpret_cast<float*>(base + ws.dq_accum1);
  p.semaphores1 = reinterpret_cast<int*>(base + ws.semaphores1);
  p.m1 = ws.segments.m1;
  p.tiles1 = ws.segments.tiles1;

  p.cu_seqlens_q = s.cu_seqlens_q;
  p.cu_seqlens_k = s.cu_seqlens_k;
  p.seqlen_q = int(s.seqlen_q);
  p.seqlen_k = int(s.seqlen_k);
  p.total_q = int(s.total_q);
  p.batch = int(s.batch);
  p.heads_q = int(s.heads_q);
  p.heads_kv = int(s.heads_kv);
  p.group = int(s.group());
  p.n_blocks = int((s.seqlen_k + C::kBlockN - 1) / C::kBlockN);

  constexpr float kLog2e = 1.4426950408889634f;
  p.scale = s.scale;
  p.tanh_scale = s.softcap > 0.f ? s.scale / s.softcap : 0.f;
  p.score_log2 = (s.softcap > 0.f ? s.softcap : s.scale) * kLog2e;
  static_assert(C::kBlockM == 64, "the workspace's tiles are 64 query rows");
  if (bwd_block_n(s) != C::kBlockN) fail(TIGON_ERROR_INTERNAL, "bwd_block_n disagrees with the kernel's key tile");
  p.window_left = bwd_window(s, s.window_left);
  p.window_right = bwd_window(s, s.window_right);

  // Rotated walks (attention_bwd_sm90_order.h) spread the key tiles of an unbounded-right mask over different query
  // tiles at any moment (fewer CTAs adding to one dq tile at once). Ordered, a CTA then waits for key tiles launched
  // after it, so all of a pair's must fit on the GPU; unordered, nothing waits.
  int device = 0, sms = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const bool ordered = pr.deterministic, rotate = p.window_right < 0 && (!ordered || p.n_blocks <= sms);
  p.items = BwdItems{p.n_blocks, int(s.heads_kv * s.batch), ordered, rotate, ws.segments.split};

  const int m_tiles = int((s.seqlen_q + C::kBlockM - 1) / C::kBlockM);
  const dim3 per_q_tile(unsigned(m_tiles), unsigned(s.heads_q), unsigned(s.batch));
  if (m_tiles > 0) {
    bwd_preprocess_kernel<C><<<per_q_tile, 256, 0, stream>>>(p);
    TIGON_CUDA_CHECK_LAUNCH();
  }
  if (p.n_blocks > 0) {  // also with no queries: dk and dv are then zeros
    const int smem = int(sizeof(typename C::SharedStorage));
    auto kernel = bwd_main_kernel<C>;
    TIGON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<unsigned(p.items.count()), C::kThreads, smem, stream>>>(p);
    TIGON_CUDA_CHECK_LAUNCH();
  }
  if (m_tiles > 0) {
    bwd_convert_dq_kernel<C><<<per_q_tile, 256, 0, stream>>>(p);
    TIGON_CUDA_CHECK_LAUNCH();
  }
}

template <int kHeadDim>
void launch_bwd_any_dtype(const BwdProblem& p, void* workspace, cudaStream_t stream) {
  if (p.s.dtype == DType::kBFloat16) {
    launch_bwd<cutlass::bfloat16_t, kHeadDim>(p, workspace, stream);
  } else {
    launch_bwd<cutlass::half_t, kHeadDim>(p, workspace, stream);
  }
}

}  // namespace tigon::attention::sm90
