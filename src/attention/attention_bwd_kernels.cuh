// Attention backward kernels (include/tigon/attention.h states the math):
//   preprocess: per query row and head, delta = dout . o and lse in base 2 (a row that sees no key gets +inf, so its
//     probabilities are exp2(-inf) = 0);
//   main kernel, kDQ = false: one CTA per (key block, key/value head, sequence) keeps k and v and streams the query
//     blocks that can see its keys, for every query head of the group: dv = P^T dout, dk = scale dS^T q;
//   main kernel, kDQ = true: one CTA per (query block, query head, sequence) keeps q and dout and streams the visible
//     key blocks: dq = scale dS k.
// Each output element is written once by one CTA after a fixed-order loop: no atomics, the same bits on every run.
// The scores are recomputed in both passes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/attention_bwd_launch.h"
#include "attention/attention_bwd_tiles.cuh"
#include "common/cuda_check.h"
#include "common/error.h"

namespace tigon::attention::bwd {

constexpr float kLog2e = 1.4426950408889634f;

// One sequence's extent. Key j is visible from query i when lo <= j - i <= hi (both clamped to the tile of the
// sequence, so no arithmetic on them overflows).
struct Seq {
  int64_t q_start = 0, k_start = 0;  // first packed token (variable length), else 0
  int len_q = 0, len_k = 0;
  int lo = 0, hi = 0;
};

__device__ __forceinline__ Seq sequence(const Params& p, int b) {
  Seq s;
  if (p.cu_seqlens_q) {
    s.q_start = p.cu_seqlens_q[b];
    s.k_start = p.cu_seqlens_k[b];
    s.len_q = min(max(p.cu_seqlens_q[b + 1] - int(s.q_start), 0), p.max_seqlen_q);
    s.len_k = min(max(p.cu_seqlens_k[b + 1] - int(s.k_start), 0), p.max_seqlen_k);
  } else {
    s.len_q = p.max_seqlen_q;
    s.len_k = p.max_seqlen_k;
  }
  const int64_t shift = int64_t(s.len_k) - s.len_q;  // the diagonal aligned bottom-right
  int64_t hi = p.window_right >= 0 ? shift + p.window_right : int64_t(s.len_k);
  int64_t lo = p.window_left >= 0 ? shift - p.window_left : -int64_t(s.len_q);
  hi = hi < -int64_t(s.len_q) ? -int64_t(s.len_q) : (hi > s.len_k ? s.len_k : hi);
  lo = lo < -int64_t(s.len_q) ? -int64_t(s.len_q) : (lo > s.len_k ? s.len_k : lo);
  s.hi = int(hi);
  s.lo = int(lo);
  return s;
}

// Index of (sequence b, query head h, row i of the sequence) in lse's layout (and the workspace's).
__device__ __forceinline__ int64_t stat_index(const Params& p, const Seq& s, int b, int h, int64_t i) {
  return p.cu_seqlens_q ? h * p.rows_q + s.q_start + i : (int64_t(b) * p.heads_q + h) * p.max_seqlen_q + i;
}

template <class Element>
__device__ __forceinline__ Element* row_ptr(const View& t, int b, int64_t token, int h) {
  return static_cast<Element*>(const_cast<void*>(t.data)) + b * t.batch + token * t.seq + h * t.head;
}

constexpr int kPreprocessWarps = 8;

// One warp per (query row, head): delta = dout . o in fp32, and lse in base 2.
template <class Element>
__global__ void __launch_bounds__(32 * kPreprocessWarps) preprocess_kernel(const Params p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = int64_t(blockIdx.x) * kPreprocessWarps + warp;
  if (item >= p.rows_q * p.heads_q) return;
  const int64_t row = item / p.heads_q;
  const int h = int(item % p.heads_q);
  // Dense rows are (sequence, position); packed rows are tokens (the batch stride is 0).
  const int b = p.cu_seqlens_q ? 0 : int(row / p.max_seqlen_q);
  const int64_t tok = p.cu_seqlens_q ? row : row % p.max_seqlen_q;
  const Element* o = row_ptr<Element>(p.o, b, tok, h);
  const Element* dout = row_ptr<Element>(p.dout, b, tok, h);
  float acc = 0.f;
  for (int d = lane; d < p.head_dim; d += 32) acc += static_cast<float>(o[d]) * static_cast<float>(dout[d]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const int64_t idx = p.cu_seqlens_q ? h * p.rows_q + row : (int64_t(b) * p.heads_q + h) * p.max_seqlen_q + tok;
    const float lse = p.lse[idx];
    p.lse_log2[idx] = lse == -INFINITY ? INFINITY : lse * kLog2e;
    p.delta[idx] = acc;
  }
}

template <class Cfg, bool kDQ>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) bwd_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma: sm_90a only
  using Element = typename Cfg::Element;
  constexpr int R = Cfg::kBlockR, C = Cfg::kBlockC, D = Cfg::kHeadDim, kThreads = Cfg::kThreads;
  using LayoutRD = typename Cfg::LayoutRD;
  using LayoutCD = typename Cfg::LayoutCD;
  using LayoutCDt = typename Cfg::LayoutCDt;
  using LayoutRC = typename Cfg::LayoutRC;

  extern __shared__ __align__(128) char smem_raw[];
  auto& sm = *reinterpret_cast<typename Cfg::Smem*>(smem_raw);
  // wgmma's swizzle follows the address bits: a buffer off its 1024-byte boundary would be read scrambled.
  if (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) % 1024 != 0) __trap();
  const int tid = threadIdx.x;
  const int b = blockIdx.z;
  const int head = blockIdx.y;  // dq: the query head; dk/dv: the key/value head
  const int group = p.heads_q / p.heads_kv;
  // Causal dq blocks further down see more keys: start those first.
  const int block = kDQ ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  const Seq s = sequence(p, b);
  const int len_r = kDQ ? s.len_q : s.len_k;  // resident rows
  const int len_c = kDQ ? s.len_k : s.len_q;  // streamed rows
  const int r0 = block * R;
  if (r0 >= len_r) return;
  const int r_end = min(r0 + R, len_r);

  // Streamed blocks that hold a visible pair: keys j in [i + lo, i + hi] for the resident queries (dq), queries i in
  // [j - hi, j - lo] for the resident keys (dk/dv).
  const int64_t c_min = kDQ ? max(int64_t(0), int64_t(r0) + s.lo) : max(int64_t(0), int64_t(r0) - s.hi);
  const int64_t c_max =
      kDQ ? min(int64_t(len_c) - 1, int64_t(r_end) - 1 + s.hi) : min(int64_t(len_c) - 1, int64_t(r_end) - 1 - s.lo);
  const int c_first = int(c_min / C);
  const int n_blocks = c_min <= c_max ? int(c_max / C) - c_first + 1 : 0;
  const int steps = kDQ ? n_blocks : n_blocks * group;

  // Resident and streamed operands (dk/dv: x = k, y = v, a = q, b = dout; dq: x = q, y = dout, a = k, b = v).
  const View x = kDQ ? p.q : p.k;
  const View y = kDQ ? p.dout : p.v;
  const View a = kDQ ? p.k : p.q;
  const View bv = kDQ ? p.v : p.dout;
  const int64_t r_start = kDQ ? s.q_start : s.k_start, c_start = kDQ ? s.k_start : s.q_start;

  // Step t streams block c_first + t % n_blocks of query head (dk/dv) head * group + t / n_blocks.
  auto load_step = [&](int t, int stage) {
    const int cb = c_first + (kDQ ? t : t % n_blocks);
    const int c0 = cb * C;
    const int h_c = kDQ ? head / group : head * group + t / n_blocks;
    const int rows = min(C, len_c - c0);
    load_tile<C, D, kThreads>(make_tensor(make_smem_ptr(sm.a[stage]), LayoutCD{}),
                              row_ptr<Element>(a, b, c_start + c0, h_c), a.seq, rows, p.aligned16, tid);
    load_tile<C, D, kThreads>(make_tensor(make_smem_ptr(sm.b[stage]), LayoutCD{}),
                              row_ptr<Element>(bv, b, c_start + c0, h_c), bv.seq, rows, p.aligned16, tid);
    if (!kDQ) {
      const int64_t st = stat_index(p, s, b, h_c, c0);
      load_stats<C, kThreads>(sm.lse[stage], sm.delta[stage], p.lse_log2 + st, p.delta + st, rows, tid);
    }
  };

  typename Cfg::Mma1 mma1;  // scores, dP
  typename Cfg::Mma2 mma2;  // gradients
  auto thr1 = mma1.get_thread_slice(tid);
  auto thr2 = mma2.get_thread_slice(tid);
  Tensor acc_v = partition_fragment_C(mma2, Shape<Int<R>, Int<D>>{});  // dv (dk/dv only)
  Tensor acc_g = partition_fragment_C(mma2, Shape<Int<R>, Int<D>>{});  // dk or dq, before the scale
  clear(acc_v);
  clear(acc_g);

  Tensor sX = make_tensor(make_smem_ptr(sm.x), LayoutRD{});
  Tensor sY = make_tensor(make_smem_ptr(sm.y), LayoutRD{});
  Tensor sP = make_tensor(make_smem_ptr(sm.p), LayoutRC{});
  Tensor sdS = make_tensor(make_smem_ptr(sm.ds), LayoutRC{});
  Tensor tSsP = thr1.partition_C(sP);
  Tensor tSsdS = thr1.partition_C(sdS);
  Tensor tScS = thr1.partition_C(make_identity_tensor(Shape<Int<R>, Int<C>>{}));  // (row, column) in the tile

  const bool softcap = p.softcap > 0.f;
  const float scale_log2 = p.scale * kLog2e;
  const float cap_in = softcap ? p.scale / p.softcap : 0.f;  // tanh's argument per unit of q . k
  const float cap_log2 = p.softcap * kLog2e;

  if (steps > 0) {
    load_tile<R, D, kThreads>(sX, row_ptr<Element>(x, b, r_start + r0, head), x.seq, r_end - r0, p.aligned16, tid);
    load_tile<R, D, kThreads>(sY, row_ptr<Element>(y, b, r_start + r0, head), y.seq, r_end - r0, p.aligned16, tid);
    if (kDQ) {
      const int64_t st = stat_index(p, s, b, head, r0);
      load_stats<R, kThreads>(sm.lse[0], sm.delta[0], p.lse_log2 + st, p.delta + st, r_end - r0, tid);
    }
    load_step(0, 0);
    cp_async_commit();
  }

  for (int t = 0; t < steps; ++t) {
    const int stage = t & 1;
    if (t + 1 < steps) load_step(t + 1, stage ^ 1);
    cp_async_commit();  // possibly empty: keeps "all but the newest group" meaning this step's data
    cp_async_wait<1>();
    fence_smem_for_wgmma();
    __syncthreads();

    Tensor sA = make_tensor(make_smem_ptr(sm.a[stage]), LayoutCD{});
    Tensor sB = make_tensor(make_smem_ptr(sm.b[stage]), LayoutCD{});
    Tensor sAt = make_tensor(make_smem_ptr(sm.a[stage]), LayoutCDt{});
    Tensor sBt = make_tensor(make_smem_ptr(sm.b[stage]), LayoutCDt{});

    // GEMM1: raw scores x a^T and dP = y b^T (resident rows x streamed rows).
    Tensor acc_s = partition_fragment_C(mma1, Shape<Int<R>, Int<C>>{});
    Tensor acc_dp = partition_fragment_C(mma1, Shape<Int<R>, Int<C>>{});
    clear(acc_s);
    clear(acc_dp);
    gemm_smem(mma1, acc_s, sX, sA, tid);
    gemm_smem(mma1, acc_dp, sY, sB, tid);

    // P = exp(s - lse) and dS = P (dP - delta) (times the softcap's derivative), zero outside the mask.
    const int c0 = (c_first + (kDQ ? t : t % n_blocks)) * C;
    const int i0 = kDQ ? r0 : c0, j0 = kDQ ? c0 : r0;
    const int i_last = i0 + (kDQ ? R : C) - 1, j_last = j0 + (kDQ ? C : R) - 1;
    const bool full = i_last < s.len_q && j_last < s.len_k && j_last - i0 <= s.hi && j0 - i_last >= s.lo;
    const float* s_lse = kDQ ? sm.lse[0] : sm.lse[stage];
    const float* s_delta = kDQ ? sm.delta[0] : sm.delta[stage];
    CUTE_UNROLL
    for (int e = 0; e < size(acc_s); ++e) {
      const int r = get<0>(tScS(e)), c = get<1>(tScS(e));
      const int qrow = kDQ ? r : c;
      float prob, dcap = 1.f;
      if (softcap) {
        const float th = tanhf(acc_s(e) * cap_in);
        prob = exp2f(th * cap_log2 - s_lse[qrow]);
        dcap = 1.f - th * th;
      } else {
        prob = exp2f(acc_s(e) * scale_log2 - s_lse[qrow]);
      }
      if (!full) {
        const int i = kDQ ? r0 + r : c0 + c, j = kDQ ? c0 + c : r0 + r;
        const bool visible = i < s.len_q && j < s.len_k && j - i <= s.hi && j - i >= s.lo;
        if (!visible) prob = 0.f;
      }
      const float ds = prob * (acc_dp(e) - s_delta[qrow]) * dcap;
      if (!kDQ) tSsP(e) = static_cast<Element>(prob);
      tSsdS(e) = static_cast<Element>(ds);
    }
    fence_smem_for_wgmma();
    __syncthreads();

    // GEMM2: dv += P b (dk/dv: b = dout), dk or dq += dS a.
    if (!kDQ) gemm_smem(mma2, acc_v, sP, sBt, tid);
    gemm_smem(mma2, acc_g, sdS, sAt, tid);
    __syncthreads();  // this stage and P/dS are rewritten by the next steps
  }

  // Write the resident rows (zeros where no query sees them).
  Tensor tOcO = thr2.partition_C(make_identity_tensor(Shape<Int<R>, Int<D>>{}));
  const View g = kDQ ? p.dq : p.dk;
  Element* g_out = row_ptr<Element>(g, b, r_start + r0, head);
  Element* v_out = kDQ ? nullptr : row_ptr<Element>(p.dv, b, r_start + r0, head);
  CUTE_UNROLL
  for (int e = 0; e < size(acc_g); ++e) {
    const int r = get<0>(tOcO(e)), d = get<1>(tOcO(e));
    if (r0 + r < r_end) {
      g_out[r * g.seq + d] = static_cast<Element>(acc_g(e) * p.scale);
      if (!kDQ) v_out[r * p.dv.seq + d] = static_cast<Element>(acc_v(e));
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built for another architecture: fail loudly (the launcher already refuses devices other than sm_90)
#endif
}

// Dynamic shared memory past 48 KiB, and the whole carveout for shared memory so that two CTAs fit where the
// registers allow it.
template <class Kernel>
void allow_smem(Kernel kernel, int bytes) {
  TIGON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  TIGON_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
}

template <class Element, int kHeadDim>
void launch_main(const Params& p, cudaStream_t stream) {
  using Cfg = Config<Element, kHeadDim>;
  constexpr int kSmem = int(sizeof(typename Cfg::Smem));
  static_assert(kSmem <= 227 * 1024, "shared memory over the sm_90 limit");
  const unsigned r_blocks_kv = unsigned((p.max_seqlen_k + Cfg::kBlockR - 1) / Cfg::kBlockR);
  const unsigned r_blocks_q = unsigned((p.max_seqlen_q + Cfg::kBlockR - 1) / Cfg::kBlockR);
  if (r_blocks_kv > 0) {
    auto kernel = bwd_kernel<Cfg, false>;
    allow_smem(kernel, kSmem);
    kernel<<<dim3(r_blocks_kv, unsigned(p.heads_kv), unsigned(p.batch)), Cfg::kThreads, kSmem, stream>>>(p);
    TIGON_CUDA_CHECK_LAUNCH();
  }
  if (r_blocks_q > 0) {
    auto kernel = bwd_kernel<Cfg, true>;
    allow_smem(kernel, kSmem);
    kernel<<<dim3(r_blocks_q, unsigned(p.heads_q), unsigned(p.batch)), Cfg::kThreads, kSmem, stream>>>(p);
    TIGON_CUDA_CHECK_LAUNCH();
  }
}

// The whole backward for one dtype: preprocess, then the dk/dv and dq kernels (independent of each other).
template <class Element>
void launch(const Params& p, cudaStream_t stream) {
  const int64_t items = p.rows_q * p.heads_q;
  if (items > 0) {
    const int64_t blocks = (items + kPreprocessWarps - 1) / kPreprocessWarps;
    preprocess_kernel<Element><<<unsigned(blocks), 32 * kPreprocessWarps, 0, stream>>>(p);
    TIGON_CUDA_CHECK_LAUNCH();
  }
  switch (p.head_dim) {
    case 64: launch_main<Element, 64>(p, stream); break;
    case 96: launch_main<Element, 96>(p, stream); break;
    case 128: launch_main<Element, 128>(p, stream); break;
    case 256: launch_main<Element, 256>(p, stream); break;
    default: fail(TIGON_ERROR_NOT_SUPPORTED, "attention backward: head_dim ", p.head_dim, " has no CUDA kernel");
  }
}

}  // namespace tigon::attention::bwd
