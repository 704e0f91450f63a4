// MoE experts, CUDA path: the (token, choice) pairs are sorted by expert on the device, each expert's rows gathered
// into one contiguous slice, and three grouped GEMMs (moe_gemm_sm90.cuh) run every expert at once; the gate, the
// weighted combine and the gate's backward are one pass each over the sorted rows.
//
// Routing is a stable counting sort in three kernels: per-block counts of each expert (shared-memory counters), one
// block turning them into each block's base per expert and the experts' offsets, then each pair's slot = its
// expert's base + its rank among the block's earlier pairs of that expert (__match_any_sync finds a warp's peers;
// warps take turns). No global atomics choose an order, so a pair's slot, and every sum over an expert's rows, is
// the same on every run. Pairs whose id is outside [0, E) get no slot.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/activation_math.cuh"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "common/error.h"
#include "common/reduce.cuh"
#include "moe/moe.h"
#include "moe/moe_gemm.h"

namespace tigon::moe {

using cuda::from_f;
using cuda::load_vec;
using cuda::store_vec;
using cuda::to_f;

namespace {

constexpr int kRouteBlock = 1024;  // pairs per routing block: one thread each
constexpr int kVec = 8;            // 16 bytes of a 16-bit dtype
constexpr int kRowThreads = 128;

int64_t route_blocks(int64_t pairs) { return (pairs + kRouteBlock - 1) / kRouteBlock; }

template <class Id>
__device__ __forceinline__ int64_t expert_of(const Id* ids, int64_t i, int64_t experts) {
  const int64_t e = int64_t(ids[i]);
  return e >= 0 && e < experts ? e : -1;
}

template <class Id>
__global__ void route_count(const Id* ids, int64_t pairs, int64_t experts, int32_t* counts) {
  extern __shared__ int32_t count[];
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  const int64_t i = int64_t(blockIdx.x) * kRouteBlock + threadIdx.x;
  if (i < pairs) {
    const int64_t e = expert_of(ids, i, experts);
    if (e >= 0) atomicAdd(&count[e], 1);  // a count: the order of the adds does not matter
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) counts[int64_t(blockIdx.x) * experts + e] = count[e];
}

// One block: counts [blocks, E] become each block's exclusive base within its expert (in place), and offsets [E + 1]
// the experts' exclusive starts.
__global__ void route_scan(int32_t* counts, int64_t blocks, int64_t experts, int64_t* offsets) {
  extern __shared__ int64_t total[];
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    int64_t run = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t c = counts[b * experts + e];
      counts[b * experts + e] = int32_t(run);
      run += c;
    }
    total[e] = run;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t run = 0;
    for (int64_t e = 0; e < experts; ++e) {
      offsets[e] = run;
      run += total[e];
    }
    offsets[experts] = run;
  }
}

template <class Id>
__global__ void route_rank(const Id* ids, int64_t pairs, int64_t experts, const int32_t* counts, const int64_t* offsets,
                           int64_t* slot_of_pair, int64_t* pair_of_slot) {
  extern __shared__ int64_t next[];  // the block's next free slot per expert
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x)
    next[e] = offsets[e] + counts[int64_t(blockIdx.x) * experts + e];
  __syncthreads();
  const int64_t i = int64_t(blockIdx.x) * kRouteBlock + threadIdx.x;
  const int64_t e = i < pairs ? expert_of(ids, i, experts) : -1;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int w = 0; w < kRouteBlock / 32; ++w) {  // warps in order: a pair's rank counts the earlier warps' pairs
    if (warp == w) {
      const unsigned peers = __match_any_sync(0xffffffffu, e);
      const int64_t slot = e >= 0 ? next[e] + __popc(peers & ((1u << lane) - 1u)) : -1;
      __syncwarp();
      if (e >= 0 && lane == __ffs(peers) - 1) next[e] += __popc(peers);
      if (i < pairs) {
        slot_of_pair[i] = slot;
        if (slot >= 0) pair_of_slot[slot] = i;
      }
    }
    __syncthreads();
  }
}

// dst[s] = src[token of slot s] for the routed slots, 16 bytes at a time.
template <class T>
__global__ void gather_rows(const T* src, int64_t src_stride, const int64_t* pair_of_slot, const int64_t* offsets,
                            int64_t experts, int64_t k, int64_t cols, T* dst) {
  const int64_t s = blockIdx.x;
  if (s >= offsets[experts]) return;
  const uint4* in = reinterpret_cast<const uint4*>(src + (pair_of_slot[s] / k) * src_stride);
  uint4* out = reinterpret_cast<uint4*>(dst + s * cols);
  for (int64_t c = threadIdx.x; c < cols / kVec; c += blockDim.x) out[c] = in[c];
}

// h[s] = act(gate) * up over gu[s] = [gate | up], fp32, one rounding.
template <class T, int Act>
__global__ void gate_fwd(const T* gu, const int64_t* offsets, int64_t experts, int64_t inter, T* h) {
  const int64_t s = blockIdx.x;
  if (s >= offsets[experts]) return;
  const T* row = gu + s * 2 * inter;
  for (int64_t c = int64_t(threadIdx.x) * kVec; c < inter; c += int64_t(blockDim.x) * kVec) {
    float a[kVec], u[kVec], o[kVec];
    cuda::load_vecs<T, kVec>(row + c, a, row + inter + c, u);
#pragma unroll
    for (int j = 0; j < kVec; ++j) o[j] = cuda::act_fwd<Act>(a[j]) * u[j];
    store_vec<T, kVec>(h + s * inter + c, o);
  }
}

// out[t] = sum_j weights[t, j] rows[slot(t, j)] (weights NULL: 1), fp32 over j, one rounding; zero without a slot.
template <class T, class W>
__global__ void combine(const T* rows, const int64_t* slot_of_pair, const W* weights, int64_t k, int64_t cols, T* out,
                        int64_t out_stride) {
  const int64_t t = blockIdx.x, c = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * kVec;
  if (c >= cols) return;
  float acc[kVec] = {};
  for (int64_t j = 0; j < k; ++j) {
    const int64_t s = slot_of_pair[t * k + j];
    if (s < 0) continue;
    const float w = weights != nullptr ? to_f<W>(weights[t * k + j]) : 1.f;
    float v[kVec];
    load_vec<T, kVec>(rows + s * cols + c, v);
#pragma unroll
    for (int q = 0; q < kVec; ++q) acc[q] += w * v[q];
  }
  store_vec<T, kVec>(out + t * out_stride + c, acc);
}

// The gate's backward for slot s, in place: gu[s] = [gate | up] becomes its gradient from w dh through act(gate) up,
// dh[s] becomes w h (the down projection's weight-gradient operand), and dweights[pair] = dh . h.
template <class T, class W, int Act>
__global__ void gate_bwd(T* gu, T* dh, const int64_t* pair_of_slot, const int64_t* offsets, int64_t experts,
                         const W* weights, W* dweights, int64_t inter) {
  __shared__ float partial[kRowThreads / 32];
  const int64_t s = blockIdx.x;
  if (s >= offsets[experts]) return;  // the whole block leaves together
  const int64_t pair = pair_of_slot[s];
  const float w = to_f<W>(weights[pair]);
  T* row = gu + s * 2 * inter;
  float dot = 0.f;
  for (int64_t c = int64_t(threadIdx.x) * kVec; c < inter; c += int64_t(blockDim.x) * kVec) {
    float a[kVec], u[kVec], d[kVec], da[kVec], du[kVec], hw[kVec];
    cuda::load_vecs<T, kVec>(row + c, a, row + inter + c, u, dh + s * inter + c, d);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float f = cuda::act_fwd<Act>(a[j]), h = cuda::round_to<T>(f * u[j]), g = w * d[j];
      dot += d[j] * h;
      da[j] = cuda::act_bwd<Act>(a[j], g * u[j]);
      du[j] = g * f;
      hw[j] = w * h;
    }
    store_vec<T, kVec>(row + c, da);
    store_vec<T, kVec>(row + inter + c, du);
    store_vec<T, kVec>(dh + s * inter + c, hw);
  }
  dot = cuda::row_sum(dot, partial);
  if (threadIdx.x == 0 && dweights != nullptr) dweights[pair] = from_f<W>(dot);
}

template <class W>
__global__ void zero_unrouted(const int64_t* slot_of_pair, int64_t pairs, W* dweights) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < pairs && slot_of_pair[i] < 0) dweights[i] = from_f<W>(0.f);
}

// Zeroes expert e's [per_expert] slice of a weight gradient when no pair chose e (the grouped GEMM skips it).
template <class T>
__global__ void zero_unchosen(const int64_t* offsets, T* grad, int64_t per_expert) {
  const int64_t e = blockIdx.y;
  if (offsets[e + 1] != offsets[e]) return;
  T* p = grad + e * per_expert;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < per_expert; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = from_f<T>(0.f);
}

// ---- workspace ----------------------------------------------------------------------------------------------------

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

struct Buffers {
  int32_t* counts;
  int64_t *offsets, *slot_of_pair, *pair_of_slot;
  void *a, *b, *c;  // [P, H], [P, 2I], [P, I]
  void* gemm;
};

// Carves the workspace at base (NULL: sizes only); returns the bytes it takes (the same both ways).
size_t carve(const Problem& p, int device, void* base, Buffers* out) {
  const size_t P = size_t(p.pairs()), E = size_t(p.experts), el = size_t(dtype_bytes(p.dtype));
  const size_t sizes[] = {align256(size_t(route_blocks(p.pairs())) * E * 4),
                          align256((E + 1) * 8),
                          align256(P * 8),
                          align256(P * 8),
                          align256(P * size_t(p.hidden) * el),
                          align256(P * 2 * size_t(p.inter) * el),
                          align256(P * size_t(p.inter) * el),
                          align256(grouped_gemm_workspace(p.experts, device))};
  char* at[8];
  size_t total = 0;
  for (int i = 0; i < 8; ++i) {
    at[i] = base != nullptr ? static_cast<char*>(base) + total : nullptr;
    total += sizes[i];
  }
  if (out != nullptr)
    *out = {reinterpret_cast<int32_t*>(at[0]),
            reinterpret_cast<int64_t*>(at[1]),
            reinterpret_cast<int64_t*>(at[2]),
            reinterpret_cast<int64_t*>(at[3]),
            at[4],
            at[5],
            at[6],
            at[7]};
  return total;
}

int current_device() {
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// ---- the passes ---------------------------------------------------------------------------------------------------

template <class Id>
void route(const Problem& p, const Buffers& w, cudaStream_t st) {
  const int64_t blocks = route_blocks(p.pairs()), E = p.experts;
  const Id* ids = static_cast<const Id*>(p.ids);
  route_count<Id><<<unsigned(blocks), kRouteBlock, size_t(E) * 4, st>>>(ids, p.pairs(), E, w.counts);
  TIGON_CUDA_CHECK_LAUNCH();
  route_scan<<<1, 1024, size_t(E) * 8, st>>>(w.counts, blocks, E, w.offsets);
  TIGON_CUDA_CHECK_LAUNCH();
  route_rank<Id><<<unsigned(blocks), kRouteBlock, size_t(E) * 8, st>>>(ids, p.pairs(), E, w.counts, w.offsets,
                                                                       w.slot_of_pair, w.pair_of_slot);
  TIGON_CUDA_CHECK_LAUNCH();
}

void route_any(const Problem& p, const Buffers& w, cudaStream_t st) {
  if (p.ids_dtype == DType::kInt32)
    route<int32_t>(p, w, st);
  else
    route<int64_t>(p, w, st);
}

template <class T>
void gather(const T* src, int64_t stride, const Problem& p, const Buffers& w, void* dst, cudaStream_t st) {
  gather_rows<T><<<unsigned(p.pairs()), kRowThreads, 0, st>>>(src, stride, w.pair_of_slot, w.offsets, p.experts, p.k,
                                                              p.hidden, static_cast<T*>(dst));
  TIGON_CUDA_CHECK_LAUNCH();
}

GroupedGemm gemm_of(const Problem& p, const Buffers& w, GemmKind kind) {
  GroupedGemm g;
  g.kind = kind, g.dtype = p.dtype, g.experts = p.experts, g.offsets = w.offsets;
  return g;
}

// rows [P, n] = a [P, k] W_e^T (forward) or a W_e (data gradient), W: the experts' [E, n, k] or [E, k, n]
void project(const Problem& p, const Buffers& w, GemmKind kind, const void* a, const void* weight, int64_t n, int64_t k,
             void* d, int device, cudaStream_t st) {
  GroupedGemm g = gemm_of(p, w, kind);
  g.n = n, g.k = k, g.a = a, g.lda = k, g.b = weight, g.ldb = kind == GemmKind::kForward ? k : n, g.d = d, g.ldd = n;
  grouped_gemm(g, w.gemm, device, st);
}

// grad_e [m, n] = a_e^T b_e over expert e's rows of a [P, m] and b [P, n]
void weight_grad(const Problem& p, const Buffers& w, const void* a, int64_t m, const void* b, int64_t n, void* grad,
                 int device, cudaStream_t st) {
  GroupedGemm g = gemm_of(p, w, GemmKind::kWeight);
  g.m = m, g.n = n, g.a = a, g.lda = m, g.b = b, g.ldb = n, g.d = grad, g.ldd = n;
  grouped_gemm(g, w.gemm, device, st);
}

template <class T>
void zero_unchosen_experts(const Problem& p, const int64_t* offsets, void* grad, int64_t per_expert, cudaStream_t st) {
  zero_unchosen<T><<<dim3(16, unsigned(p.experts)), 256, 0, st>>>(offsets, static_cast<T*>(grad), per_expert);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <int A>
using Act = std::integral_constant<int, A>;

// Calls f(Act<a>{}) for the problem's gate activation a (a tigon_activation_t).
template <class F>
void with_act(int activation, F&& f) {
  switch (activation) {
    case TIGON_GLU_SILU: f(Act<TIGON_ACT_SILU>{}); break;
    case TIGON_GLU_GELU_TANH: f(Act<TIGON_ACT_GELU_TANH>{}); break;
    default: f(Act<TIGON_ACT_GELU_ERF>{}); break;
  }
}

template <class T>
void fwd_typed(const Fwd& f, const Buffers& w, int device, cudaStream_t st) {
  const Problem& p = f.p;
  const int64_t P = p.pairs(), H = p.hidden, I = p.inter;
  route_any(p, w, st);
  gather<T>(static_cast<const T*>(p.x), p.x_stride, p, w, w.a, st);
  project(p, w, GemmKind::kForward, w.a, p.gate_up, 2 * I, H, w.b, device, st);  // gu = x W_gu^T
  with_act(p.activation, [&](auto act) {
    gate_fwd<T, decltype(act)::value><<<unsigned(P), kRowThreads, 0, st>>>(static_cast<const T*>(w.b), w.offsets,
                                                                           p.experts, I, static_cast<T*>(w.c));
  });
  TIGON_CUDA_CHECK_LAUNCH();
  project(p, w, GemmKind::kForward, w.c, p.down, H, I, w.a, device, st);  // y = h W_d^T, over the gathered x
  const dim3 grid(unsigned(p.tokens), unsigned((H / kVec + kRowThreads - 1) / kRowThreads));
  const T* y = static_cast<const T*>(w.a);
  T* out = static_cast<T*>(f.out);
  if (p.weights_dtype == DType::kFloat32)
    combine<T, float><<<grid, kRowThreads, 0, st>>>(y, w.slot_of_pair, static_cast<const float*>(p.weights), p.k, H,
                                                    out, f.out_stride);
  else
    combine<T, T>
        <<<grid, kRowThreads, 0, st>>>(y, w.slot_of_pair, static_cast<const T*>(p.weights), p.k, H, out, f.out_stride);
  TIGON_CUDA_CHECK_LAUNCH();
}

template <class T, class W>
void gate_bwd_launch(const Bwd& b, const Buffers& w, cudaStream_t st) {
  const Problem& p = b.p;
  with_act(p.activation, [&](auto act) {
    gate_bwd<T, W, decltype(act)::value><<<unsigned(p.pairs()), kRowThreads, 0, st>>>(
        static_cast<T*>(w.b), static_cast<T*>(w.c), w.pair_of_slot, w.offsets, p.experts,
        static_cast<const W*>(p.weights), static_cast<W*>(b.dweights), p.inter);
  });
  TIGON_CUDA_CHECK_LAUNCH();
  if (b.dweights != nullptr) {
    zero_unrouted<W>
        <<<unsigned((p.pairs() + 255) / 256), 256, 0, st>>>(w.slot_of_pair, p.pairs(), static_cast<W*>(b.dweights));
    TIGON_CUDA_CHECK_LAUNCH();
  }
}

// One [P, H] buffer serves in turn as the gathered x (the recomputed gate/up), the gathered dout (dh and the down
// projection's weight gradient), x again (the gate/up weight gradient) and the data gradient's rows: a second gather of
// x costs less than holding a second [P, H] buffer through the whole backward.
template <class T>
void bwd_typed(const Bwd& b, const Buffers& w, int device, cudaStream_t st) {
  const Problem& p = b.p;
  const int64_t H = p.hidden, I = p.inter;
  const T* x = static_cast<const T*>(p.x);
  route_any(p, w, st);
  gather<T>(x, p.x_stride, p, w, w.a, st);                                       // x rows
  project(p, w, GemmKind::kForward, w.a, p.gate_up, 2 * I, H, w.b, device, st);  // gu, recomputed
  gather<T>(static_cast<const T*>(b.dout), b.dout_stride, p, w, w.a, st);        // g rows
  project(p, w, GemmKind::kData, w.a, p.down, I, H, w.c, device, st);            // dh = g W_d
  if (p.weights_dtype == DType::kFloat32)
    gate_bwd_launch<T, float>(b, w, st);
  else
    gate_bwd_launch<T, T>(b, w, st);
  if (b.ddown != nullptr) {  // ddown_e = g_e^T (w h)_e
    weight_grad(p, w, w.a, H, w.c, I, b.ddown, device, st);
    zero_unchosen_experts<T>(p, w.offsets, b.ddown, H * I, st);
  }
  if (b.dgate_up != nullptr) {  // dgate_up_e = dgu_e^T x_e, over x gathered again
    gather<T>(x, p.x_stride, p, w, w.a, st);
    weight_grad(p, w, w.b, 2 * I, w.a, H, b.dgate_up, device, st);
    zero_unchosen_experts<T>(p, w.offsets, b.dgate_up, 2 * I * H, st);
  }
  if (b.dx != nullptr) {  // dx[t] = sum_j (dgu W_gu)[slot(t, j)]
    project(p, w, GemmKind::kData, w.b, p.gate_up, H, 2 * I, w.a, device, st);
    const dim3 grid(unsigned(p.tokens), unsigned((H / kVec + kRowThreads - 1) / kRowThreads));
    combine<T, T><<<grid, kRowThreads, 0, st>>>(static_cast<const T*>(w.a), w.slot_of_pair, nullptr, p.k, H,
                                                static_cast<T*>(b.dx), b.dx_stride);
    TIGON_CUDA_CHECK_LAUNCH();
  }
}

void check_sizes(const Problem& p) {
  if (p.pairs() >= (int64_t(1) << 31))
    fail_arg("ids", "the CUDA MoE experts take fewer than 2^31 (token, choice) pairs, got ", p.pairs());
  if (p.experts > 4096) fail_arg("gate_up_weight", "the CUDA MoE experts take at most 4096 experts, got ", p.experts);
  if (2 * p.inter >= (int64_t(1) << 31) || p.hidden >= (int64_t(1) << 31))
    fail_arg("gate_up_weight", "hidden and 2 * intermediate sizes must be below 2^31 on CUDA");
}

void check_aligned(const void* ptr, const char* arg) {
  if (ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
    fail_arg(arg, "must start at a 16-byte aligned address on CUDA (its rows are read 16 bytes at a time)");
}

// What both passes check of the inputs on CUDA; returns the current device.
int check_problem(const Problem& p) {
  check_sizes(p);
  check_aligned(p.x, "x"), check_aligned(p.gate_up, "gate_up_weight"), check_aligned(p.down, "down_weight");
  const int device = current_device();
  require_sm90a(device, "the CUDA MoE experts (grouped GEMMs)");
  return device;
}

}  // namespace

size_t grouped_gemm_workspace(int64_t experts, int device) {
  const size_t bf16 = grouped_gemm_workspace_bf16(experts, device), fp16 = grouped_gemm_workspace_fp16(experts, device);
  return bf16 > fp16 ? bf16 : fp16;
}

void grouped_gemm(const GroupedGemm& g, void* workspace, int device, cudaStream_t stream) {
  if (g.dtype == DType::kBFloat16)
    grouped_gemm_bf16(g, workspace, device, stream);
  else
    grouped_gemm_fp16(g, workspace, device, stream);
}

size_t cuda_workspace_bytes(const Problem& p, bool) {  // the backward reuses the forward's buffers
  if (p.tokens == 0 || p.hidden == 0) return 0;
  return carve(p, current_device(), nullptr, nullptr);
}

void fwd_cuda(const Fwd& f, void* workspace, void* stream) {
  const Problem& p = f.p;
  check_aligned(f.out, "out");
  const int device = check_problem(p);
  Buffers w;
  carve(p, device, workspace, &w);
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kBFloat16)
    fwd_typed<__nv_bfloat16>(f, w, device, st);
  else
    fwd_typed<__half>(f, w, device, st);
}

void bwd_cuda(const Bwd& b, void* workspace, void* stream) {
  const Problem& p = b.p;
  const auto st = static_cast<cudaStream_t>(stream);
  const size_t el = size_t(dtype_bytes(p.dtype));
  if (p.tokens == 0 || p.hidden == 0) {  // nothing routed: zero weight gradients
    if (b.dgate_up)
      TIGON_CUDA_CHECK(cudaMemsetAsync(b.dgate_up, 0, size_t(p.experts * 2 * p.inter * p.hidden) * el, st));
    if (b.ddown) TIGON_CUDA_CHECK(cudaMemsetAsync(b.ddown, 0, size_t(p.experts * p.hidden * p.inter) * el, st));
    return;
  }
  check_aligned(b.dout, "dout"), check_aligned(b.dx, "dx");
  check_aligned(b.dgate_up, "dgate_up_weight"), check_aligned(b.ddown, "ddown_weight");
  const int device = check_problem(p);
  Buffers w;
  carve(p, device, workspace, &w);
  if (p.dtype == DType::kBFloat16)
    bwd_typed<__nv_bfloat16>(b, w, device, st);
  else
    bwd_typed<__half>(b, w, device, st);
}

}  // namespace tigon::moe
