// Distillation row kernels: the per-element math both share (statistics of the student and the teacher, the row sums
// of the divergences that need a second look at the row, the gradient) and the two kernels:
//   cluster  a row held in shared memory across a thread block cluster (1-8 blocks), copied in by the bulk copy engine:
//            student and teacher are read from DRAM once, every later pass reads shared memory, and the gradient is
//            written with 16-byte stores (possibly over the student or the teacher). Rows 16-byte aligned.
//   classic  one block per row (grid-stride), element by element from global memory, every pass reading the row
//            again: the fallback for unaligned rows (odd vocabularies) and rows too long for a cluster.
// Passes per row: 1. statistics (max and sum of exponentials; the KLs' loss sums on the way): online in the classic
// kernel, against each piece's maxima in the cluster kernel; 2. only JSD and TVD: the row sums their gradient needs
// (KL(q || m), sum q sign(q - p)); 3. the gradient: for JSD and TVD the cluster kernel keeps each element's gradient
// terms in place of its inputs after pass 2, so their pass 3 takes no exponential or logarithm. All math fp32, exp2
// and log2 on the SFU (ex2.approx, lg2.approx), 64-bit row offsets.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/async_copy.cuh"
#include "common/cuda_types.cuh"
#include "distill/distill_launch.h"

namespace tigon::distill::kern {

using cuda::exp2_fast;
using cuda::from_f;
using cuda::to_f;
using cuda::unpack_words;

using cuda::kLog2e;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kThreads = 256;      // both kernels' block size at most
constexpr int kMaxCluster = 8;     // the portable maximum
constexpr int kMaxPieces = 10;     // bulk copies per block (each of the student and the teacher), one mbarrier each
constexpr int kStatBytes = 24;     // what one block sends each block in the first exchange: six floats
constexpr int kSumBytes = 8;       // ... and in the second: two floats
constexpr int kStaticSmem = 1024;  // the cluster kernel's static shared memory, at most (the launcher plans with it)

template <class T>
constexpr int kVec = 16 / int(sizeof(T));
constexpr int64_t kMaxRowVecs = int64_t(1) << 30;  // 32-bit vector indices in the cluster kernel

__device__ __forceinline__ float log2_fast(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// What a thread (then the block, then the cluster) knows about a row after pass 1. The student's sums are relative to
// 2^mz, the teacher's to 2^mt (mt stays 0 unless the teacher is logits, whose maximum is tracked).
// Plain structs (no initialisers: they also live in shared memory); empty_stats and empty_sums make the start values.
struct Stats {
  float mz, sz;  // max of z log2e / T; sum of 2^(z log2e / T - mz)
  float rz;      // reverse KL: sum of 2^(.. - mz) (z / T - y')
  float mt, st;  // teacher: max (logits only, else 0) and sum of its weights w (2^(t s - mt), or t)
  float rt;      // forward KL: sum of w (y' - z / T)
};
// The second look at the row: JSD (KL(p || m), KL(q || m)) or TVD (0.5 sum |q - p|, sum q sign(q - p)).
struct Sums {
  float a, b;
};

__device__ __forceinline__ float rescale_factor(float from, float to) {
  return from == -INFINITY ? 0.f : exp2_fast(from - to);
}

// A teacher value as the natural-log term y' (the log-probability up to the row's constant) and, for probabilities,
// as it is.
template <bool kProbs>
__device__ __forceinline__ float teacher_log(float t, const RowArgs& a) {
  if constexpr (kProbs) return log2_fast(t) * kLn2;
  return t * a.t_log;
}

// Pass 1 over n elements of a row (z: student, t: teacher), their maxima tested once.
template <Kind K, bool kProbs, int N>
__device__ __forceinline__ void accumulate(Stats& st, const float (&z)[N], const float (&t)[N], const RowArgs& a) {
  float vz = -INFINITY;
#pragma unroll
  for (int e = 0; e < N; ++e) vz = fmaxf(vz, z[e] * a.z_scale);
  if (vz > st.mz) {
    const float f = rescale_factor(st.mz, vz);
    st.sz *= f;
    if constexpr (K == Kind::kReverseKL) st.rz *= f;
    st.mz = vz;
  }
  constexpr bool kTeacherSum = K == Kind::kForwardKL;  // the KL's S and loss; the logits' normaliser in any case
  if (!kProbs && a.teacher_logits) {
    float vt = -INFINITY;
#pragma unroll
    for (int e = 0; e < N; ++e) vt = fmaxf(vt, t[e] * a.t_scale);
    if (vt > st.mt) {
      const float f = rescale_factor(st.mt, vt);
      st.st *= f;
      if constexpr (kTeacherSum) st.rt *= f;
      st.mt = vt;
    }
  }
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const float ez = exp2_fast(fmaf(z[e], a.z_scale, -st.mz));
    st.sz += ez;
    if constexpr (K == Kind::kReverseKL)
      if (ez > 0.f) st.rz += ez * (z[e] * a.inv_temp - teacher_log<kProbs>(t[e], a));
    if (kTeacherSum || (!kProbs && a.teacher_logits)) {
      const float w = kProbs ? t[e] : exp2_fast(fmaf(t[e], a.t_scale, -st.mt));
      st.st += w;
      if constexpr (kTeacherSum)
        if (w > 0.f) st.rt += w * (teacher_log<kProbs>(t[e], a) - z[e] * a.inv_temp);
    }
  }
}

// v merged over aligned groups of `width` lanes (a power of two up to 32), the same bits in every lane: maxima first,
// then each lane's sums rescaled once and added by butterfly (each step adds the same two values in either order).
__device__ __forceinline__ Stats merge_stats(const Stats& v, int width) {
  float mz = v.mz, mt = v.mt;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) {
      mz = fmaxf(mz, __shfl_xor_sync(0xffffffffu, mz, o));
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
    }
  const float fz = rescale_factor(v.mz, mz), ft = v.mt == mt ? 1.f : rescale_factor(v.mt, mt);
  Stats r;
  r.mz = mz;
  r.mt = mt;
  r.sz = v.sz * fz;
  r.rz = v.rz * fz;
  r.st = v.st * ft;
  r.rt = v.rt * ft;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) {
      r.sz += __shfl_xor_sync(0xffffffffu, r.sz, o);
      r.rz += __shfl_xor_sync(0xffffffffu, r.rz, o);
      r.st += __shfl_xor_sync(0xffffffffu, r.st, o);
      r.rt += __shfl_xor_sync(0xffffffffu, r.rt, o);
    }
  return r;
}

__device__ __forceinline__ Sums merge_sums(Sums v, int width) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < width) {
      v.a += __shfl_xor_sync(0xffffffffu, v.a, o);
      v.b += __shfl_xor_sync(0xffffffffu, v.b, o);
    }
  return v;
}

// An entry no lane holds: the identity of the merges (a teacher maximum of -inf rescales to nothing only where the
// teacher's maximum is tracked; elsewhere every entry's mt is 0).
__device__ __forceinline__ Stats empty_stats(const RowArgs& a) {
  return {-INFINITY, 0.f, 0.f, a.teacher_logits ? -INFINITY : 0.f, 0.f, 0.f};
}
__device__ __forceinline__ Sums empty_sums(const RowArgs&) { return {0.f, 0.f}; }
__device__ __forceinline__ Stats merge(const Stats& v, int width) { return merge_stats(v, width); }
__device__ __forceinline__ Sums merge(const Sums& v, int width) { return merge_sums(v, width); }

// n entries (n <= 32; get(j) returns entry j) merged in every lane of every warp: lane l takes entry l mod width
// (width: n rounded up to a power of two), so every group merges the same values in the same order.
template <class S, class Get>
__device__ __forceinline__ S merge_entries(int n, Get get, const RowArgs& a) {
  int width = 1;
  while (width < n) width *= 2;
  const int j = int(threadIdx.x & 31) & (width - 1);
  S v;
  if constexpr (std::is_same_v<S, Stats>)
    v = j < n ? get(j) : empty_stats(a);
  else
    v = j < n ? get(j) : empty_sums(a);
  return merge(v, width);
}

// The block's merge of v, in every thread; smem holds one S per warp. Starts with a barrier, so consecutive calls on
// the same smem are safe.
template <class S>
__device__ __forceinline__ S block_merge(const S& v, S* smem, const RowArgs& a) {
  const S w = merge(v, 32);
  const int warps = int(blockDim.x / 32);
  if (warps == 1) return w;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x / 32] = w;
  __syncthreads();
  return merge_entries<S>(warps, [&](int j) { return smem[j]; }, a);
}

// The row's constants after pass 1 (natural logs unless named log2).
struct Row {
  float lse2z;  // log2 sum 2^(z log2e / T): the student's log-sum-exp, exp2 domain
  float lse_z;  // the same, natural
  float lse2t;  // the teacher's (logits), exp2 domain; 0 otherwise
  float c_t;    // the same, natural: y = y' - c_t
  float loss;   // the KLs' row loss (JSD and TVD: after pass 2)
  float sp;     // sum_c p_c (1 for logits)
  float k;      // JSD: KL(q || m); TVD: sum q sign(q - p); reverse KL: the loss
};

template <Kind K>
__device__ __forceinline__ Row finish_stats(const Stats& s, const RowArgs& a) {
  Row r;
  r.lse2z = s.mz + log2_fast(s.sz);
  r.lse_z = r.lse2z * kLn2;
  r.lse2t = a.teacher_logits ? s.mt + log2_fast(s.st) : 0.f;
  r.c_t = r.lse2t * kLn2;
  r.sp = a.teacher_logits ? 1.f : s.st;
  r.loss = 0.f;
  r.k = 0.f;
  if constexpr (K == Kind::kForwardKL) r.loss = (a.teacher_logits ? s.rt / s.st : s.rt) + (r.lse_z - r.c_t) * r.sp;
  if constexpr (K == Kind::kReverseKL) r.k = r.loss = s.rz / s.sz - r.lse_z + r.c_t;
  return r;
}

// One element's student and teacher terms: x, q (student), y, p (teacher), natural logs.
struct Elem {
  float x, q, y, p;
};
template <bool kProbs>
__device__ __forceinline__ Elem elem(float z, float t, const Row& r, const RowArgs& a) {
  Elem e;
  e.x = fmaf(z, a.inv_temp, -r.lse_z);
  e.q = exp2_fast(fmaf(z, a.z_scale, -r.lse2z));
  if constexpr (kProbs) {
    e.p = t;
    e.y = log2_fast(t) * kLn2;
  } else {
    e.y = fmaf(t, a.t_log, -r.c_t);
    e.p = exp2_fast(fmaf(t, a.t_scale, -r.lse2t));
  }
  return e;
}

// Pass 2: JSD's KL(p || m) and KL(q || m), or TVD's 0.5 |q - p| and q sign(q - p). JSD works in base 2 (x2 = log2 q
// is q's exponent): its sums are ln 2 short, which finish_sums puts back.
// The cluster kernel also keeps, per element, what its gradient needs: ka, JSD's log2(q / m) (0 where q is 0) or TVD's
// sign(q - p), and kb = uq, the element's q as 2^(z-term - uz) with q = uq fz. uz is the largest z-term this thread
// saw, so uq lies in [0, 1] and fp16 keeps it to 2^-12 down to 2^-14 of the thread's largest q (a row's probabilities
// span far more than fp16's range; relative to each thread's largest, the ones that carry the gradient keep their
// precision); fz = 2^(uz - lse2z). The plain form: uz = lse2z, fz = 1.
template <Kind K, bool kProbs>
__device__ __forceinline__ void add_sums(Sums& s, float z, float t, const Row& r, const RowArgs& a, float uz, float fz,
                                         float& ka, float& kb) {
  kb = exp2_fast(fmaf(z, a.z_scale, -uz));
  const float q = kb * fz;
  float y2, p;
  if constexpr (kProbs) {
    p = t;
    y2 = log2_fast(t);
  } else {
    y2 = fmaf(t, a.t_scale, -r.lse2t);
    p = exp2_fast(y2);
  }
  if constexpr (K == Kind::kJSD) {
    const float x2 = fmaf(z, a.z_scale, -r.lse2z);
    const float lm2 = log2_fast(fmaf(a.beta, p - q, q));  // log2(b p + (1 - b) q)
    if (p > 0.f) s.a += p * (y2 - lm2);
    ka = q > 0.f ? x2 - lm2 : 0.f;
    s.b += q * ka;
  } else {
    const float d = q - p;
    s.a += 0.5f * fabsf(d);
    ka = d > 0.f ? 1.f : d < 0.f ? -1.f : 0.f;
    s.b += ka * q;
  }
}
template <Kind K, bool kProbs>
__device__ __forceinline__ void add_sums(Sums& s, float z, float t, const Row& r, const RowArgs& a) {
  float ka, kb;
  add_sums<K, kProbs>(s, z, t, r, a, r.lse2z, 1.f, ka, kb);
}

// The row's loss and k after pass 2.
template <Kind K>
__device__ __forceinline__ void finish_sums(Row& r, const Sums& s, const RowArgs& a) {
  if constexpr (K == Kind::kJSD) {  // the sums in base 2
    r.loss = (a.beta * s.a + (1.f - a.beta) * s.b) * kLn2;
    r.k = s.b * kLn2;
  } else {
    r.loss = s.a;
    r.k = s.b;
  }
}

// d(loss)/dz for one element, times coef (the reduction's scale over T).
template <Kind K, bool kProbs>
__device__ __forceinline__ float grad_elem(float z, float t, const Row& r, float coef, const RowArgs& a) {
  const Elem e = elem<kProbs>(z, t, r, a);
  if constexpr (K == Kind::kForwardKL) return coef * fmaf(e.q, r.sp, -e.p);
  if constexpr (K == Kind::kReverseKL) return e.q > 0.f ? coef * e.q * (e.x - e.y - r.k) : 0.f;
  if constexpr (K == Kind::kJSD) {
    const float lm = log2_fast(fmaf(a.beta, e.p - e.q, e.q)) * kLn2;
    return e.q > 0.f ? coef * (1.f - a.beta) * e.q * (e.x - lm - r.k) : 0.f;
  }
  const float d = e.q - e.p;
  return coef * 0.5f * e.q * ((d > 0.f ? 1.f : d < 0.f ? -1.f : 0.f) - r.k);
}

__device__ __forceinline__ bool row_ignored(const RowArgs& a, int64_t row) {
  if (a.labels == nullptr) return false;
  const int64_t l =
      a.labels64 ? static_cast<const int64_t*>(a.labels)[row] : int64_t(static_cast<const int32_t*>(a.labels)[row]);
  return l == a.ignore_index;
}

// The gradient's factor for every element of a kept row: the reduction's scale over T (needs the totals kernel's
// count for the means).
__device__ __forceinline__ float grad_coef(const RowArgs& a) {
  float scale = 1.f;
  if (a.reduction == TIGON_DISTILL_REDUCTION_BATCHMEAN) scale = 1.f / a.totals[kCount];
  if (a.reduction == TIGON_DISTILL_REDUCTION_MEAN) scale = 1.f / (a.totals[kCount] * float(a.cols));
  return scale * a.inv_temp;
}

constexpr bool needs_sums(Kind k) { return k == Kind::kJSD || k == Kind::kTVD; }

// ---- classic: one block per row, element by element ---------------------------------------------------------------

template <class T, Kind K, bool kProbs>
__global__ void __launch_bounds__(kThreads) classic_rows_kernel(RowArgs a) {
  __shared__ Stats stat_smem[kThreads / 32];
  __shared__ Sums sum_smem[kThreads / 32];
  cuda::allow_dependents();
  const int64_t tid = threadIdx.x, step = blockDim.x;
  const float coef = grad_coef(a);  // the totals kernel ran before this one (a plain launch after it)
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(a.student) + row * a.x_stride;
    const T* t = static_cast<const T*>(a.teacher) + row * a.t_stride;
    T* g = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
    if (row_ignored(a, row)) {
      if (tid == 0) a.row_loss[row] = 0.f;
      if (g)
        for (int64_t c = tid; c < a.cols; c += step) g[c] = from_f<T>(0.f);
      continue;
    }
    Stats st = empty_stats(a);
    for (int64_t c = tid; c < a.cols; c += step) {
      const float z[1] = {to_f<T>(x[c])}, tv[1] = {to_f<T>(t[c])};
      accumulate<K, kProbs, 1>(st, z, tv, a);
    }
    Row r = finish_stats<K>(block_merge(st, stat_smem, a), a);
    if constexpr (needs_sums(K)) {
      Sums s = empty_sums(a);
      for (int64_t c = tid; c < a.cols; c += step) add_sums<K, kProbs>(s, to_f<T>(x[c]), to_f<T>(t[c]), r, a);
      finish_sums<K>(r, block_merge(s, sum_smem, a), a);
    }
    if (tid == 0) a.row_loss[row] = r.loss;
    if (g) {
      __syncthreads();  // every read of the row is done before the gradient may be written over it
      for (int64_t c = tid; c < a.cols; c += step)
        g[c] = from_f<T>(grad_elem<K, kProbs>(to_f<T>(x[c]), to_f<T>(t[c]), r, coef, a));
    }
  }
}

// ---- cluster: the row resident in shared memory ---------------------------------------------------------------------

// How a row is split (in 16-byte vectors): block `rank` holds [rank * slice_vecs, + slice_vecs) of the student and of
// the teacher, copied in pieces of piece_vecs.
struct SliceShape {
  int64_t slice_vecs = 0;
  int64_t piece_vecs = 1;
};

// A Stats entry padded to 32 bytes: st.async's 16-byte store needs every slot 16-byte aligned.
struct alignas(16) StatSlot {
  Stats s;
  float pad[2];
};

// This block's entry sent into slot `rank` of every block of the cluster (st.async counted on that block's bar), then
// every block merges all entries in the same order: identical results everywhere, no cluster-wide barrier.
__device__ __forceinline__ void send_stats(const Stats& s, StatSlot* slots, uint64_t* bar, int csize, int rank) {
  const int tid = int(threadIdx.x);
  if (tid < csize) {
    const uint32_t dst = cuda::cluster_addr(&slots[rank], uint32_t(tid)), rbar = cuda::cluster_addr(bar, uint32_t(tid));
    cuda::st_async_v4(dst, __float_as_uint(s.mz), __float_as_uint(s.sz), __float_as_uint(s.rz), __float_as_uint(s.mt),
                      rbar);
    cuda::st_async_b64(dst + 16, uint64_t(__float_as_uint(s.st)) | uint64_t(__float_as_uint(s.rt)) << 32, rbar);
  }
}
__device__ __forceinline__ void send_sums(const Sums& s, Sums* slots, uint64_t* bar, int csize, int rank) {
  const int tid = int(threadIdx.x);
  if (tid < csize) {
    const uint32_t dst = cuda::cluster_addr(&slots[rank], uint32_t(tid)), rbar = cuda::cluster_addr(bar, uint32_t(tid));
    cuda::st_async_b64(dst, uint64_t(__float_as_uint(s.a)) | uint64_t(__float_as_uint(s.b)) << 32, rbar);
  }
}

static_assert(sizeof(Stats) == kStatBytes && sizeof(Sums) == kSumBytes, "exchange sizes");
static_assert(kMaxPieces * 8 + 3 * 8 + (kThreads / 32) * (sizeof(Stats) + sizeof(Sums)) +
                      kMaxCluster * (sizeof(StatSlot) + sizeof(Sums)) <=
                  kStaticSmem,
              "cluster_rows_kernel's static shared memory outgrew kStaticSmem");

// ---- the cluster kernel's passes over its slice -----------------------------------------------------------------

// What JSD's and TVD's elements keep in place of their student and teacher values after pass 2 (add_sums' ka and
// kb), so their gradient pass takes no exponential or logarithm: fp16 for 16-bit rows, floats for fp32 rows. TVD's
// sign is exact; JSD's log-ratio keeps 2^-12 of its size, which shows where q (log q - log m - k) nearly cancels,
// within 1e-3 of the row's largest gradient (docs/performance/distillation.md). The forward KL's gradient, q sp - p,
// subtracts two probabilities that are close wherever the student is good, so its pass 3 recomputes both from the
// inputs in fp32 rather than from rounded copies.
template <class T>
using Kept = std::conditional_t<sizeof(T) == 2, __half, float>;
constexpr int kVecsPerThread = 3;  // a thread's vectors of one piece, at most (the launcher's plan keeps to it)

// A 16-byte vector of this block's shared memory (32-bit shared addresses, computed once per pass: through a generic
// pointer the compiler rebuilt the cluster window's address for every vector and split the loads in two).
__device__ __forceinline__ uint4 lds16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts16(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

// The largest element of the live vectors (-inf for none), compared on the packed 16-bit values.
template <class T>
__device__ __forceinline__ float max_of(const uint4 (&v)[kVecsPerThread], const bool (&live)[kVecsPerThread]) {
  if constexpr (sizeof(T) == 4) {
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j)
      if (live[j])
        m = fmaxf(m, fmaxf(fmaxf(__uint_as_float(v[j].x), __uint_as_float(v[j].y)),
                           fmaxf(__uint_as_float(v[j].z), __uint_as_float(v[j].w))));
    return m;
  } else {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    T2 m;
    if constexpr (std::is_same_v<T, __half>)
      m = __float2half2_rn(-INFINITY);
    else
      m = __float2bfloat162_rn(-INFINITY);
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j)
      if (live[j]) {
        const T2* e = reinterpret_cast<const T2*>(&v[j]);
        m = __hmax2(m, __hmax2(__hmax2(e[0], e[1]), __hmax2(e[2], e[3])));
      }
    return fmaxf(__low2float(m), __high2float(m));
  }
}

// Raises a running maximum (exp2 domain) to m, rescaling the sums taken against it (a no-op unless m is larger; from
// -inf the sums are 0). The references only grow, so a thread's entry needs no merging across pieces.
__device__ __forceinline__ void raise_max(float& ref, float m, float& s1, float& s2) {
  if (m > ref) {
    const float f = rescale_factor(ref, m);
    s1 *= f;
    s2 *= f;
    ref = m;
  }
}

// Pass 1 for one element against fixed references uz, ut (exp2-domain maxima, so every exponential is at most 1).
// kLogits: the teacher is logits (its weights are exponentials, and the forward KL's loss term is summed as w (t - z),
// a factor 1 / T short).
template <Kind K, bool kProbs, bool kLogits>
__device__ __forceinline__ void accumulate_fixed(Stats& s, float z, float t, float uz, float ut, const RowArgs& a) {
  const float ez = exp2_fast(fmaf(z, a.z_scale, -uz));
  s.sz += ez;
  if constexpr (K == Kind::kReverseKL)
    if (ez > 0.f) s.rz += ez * (z * a.inv_temp - teacher_log<kProbs>(t, a));
  if constexpr (K == Kind::kForwardKL || kLogits) {
    const float w = kProbs ? t : exp2_fast(fmaf(t, a.t_scale, -ut));
    s.st += w;
    if constexpr (K == Kind::kForwardKL)
      if (w > 0.f) s.rt += w * (kLogits ? t - z : teacher_log<kProbs>(t, a) - z * a.inv_temp);
  }
}

// Pass 1 over this thread's vectors of one piece (k = first + tid + j * nthr < end, at most kVecsPerThread), into the
// thread's running entry st: their maxima from the packed values raise st's references, then every element's
// exponentials are taken against those, in registers. With kLogits the forward KL's st.rt is a factor 1 / T short (the
// caller puts it back after the last piece).
template <class T, Kind K, bool kProbs, bool kLogits>
__device__ __forceinline__ void pass1_piece(Stats& st, uint32_t xs, uint32_t ts, uint32_t first, uint32_t end,
                                            const RowArgs& a) {
  constexpr int V = kVec<T>;
  const uint32_t tid = threadIdx.x, nthr = blockDim.x;
  uint4 zv[kVecsPerThread], tv[kVecsPerThread];
  bool live[kVecsPerThread];
#pragma unroll
  for (int j = 0; j < kVecsPerThread; ++j) {
    const uint32_t k = first + tid + j * nthr;
    live[j] = k < end;
    if (live[j]) {
      zv[j] = lds16(xs + 16 * k);
      tv[j] = lds16(ts + 16 * k);
    }
  }
  raise_max(st.mz, max_of<T>(zv, live) * a.z_scale, st.sz, st.rz);
  if constexpr (kLogits) raise_max(st.mt, max_of<T>(tv, live) * a.t_scale, st.st, st.rt);
  const float uz = st.mz == -INFINITY ? 0.f : st.mz;  // all -inf so far: every exponential is 0 against any finite
  const float ut = st.mt == -INFINITY ? 0.f : st.mt;  // value (ut: 0 where the teacher's maximum is not tracked)
#pragma unroll
  for (int j = 0; j < kVecsPerThread; ++j)
    if (live[j]) {
      float z[V], t[V];
      unpack_words<T>(zv[j], z);
      unpack_words<T>(tv[j], t);
#pragma unroll
      for (int e = 0; e < V; ++e) accumulate_fixed<K, kProbs, kLogits>(st, z[e], t[e], uz, ut, a);
    }
}

template <class T, Kind K, bool kProbs>
__global__ void __launch_bounds__(kThreads, 3) cluster_rows_kernel(RowArgs a, SliceShape sh) {
  constexpr int V = kVec<T>;
  extern __shared__ uint4 smem[];  // [slice_vecs] student, then [slice_vecs] teacher; later the kept terms
  __shared__ uint64_t bars[kMaxPieces];
  __shared__ uint64_t stat_bar, sum_bar;
  __shared__ Stats warp_stats[kThreads / 32];
  __shared__ Sums warp_sums[kThreads / 32];
  __shared__ StatSlot stat_slots[kMaxCluster];
  __shared__ Sums sum_slots[kMaxCluster];

  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int csize = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int tid = int(threadIdx.x), nthr = int(blockDim.x);
  const int64_t row = blockIdx.x / csize;
  const int64_t nvec = a.cols / V, v0 = rank * sh.slice_vecs;
  const int64_t count = v0 < nvec ? min(sh.slice_vecs, nvec - v0) : 0;
  const int tail = rank == csize - 1 ? int(a.cols - nvec * V) : 0;  // the last block: columns after whole vectors
  const int pieces = int((count + sh.piece_vecs - 1) / sh.piece_vecs);
  uint4* xs = smem;
  uint4* ts = smem + sh.slice_vecs;
  const uint32_t xa = cuda::smem_addr(xs), ta = cuda::smem_addr(ts);  // the same as 32-bit shared addresses
  const T* x = static_cast<const T*>(a.student) + row * a.x_stride;
  const T* t = static_cast<const T*>(a.teacher) + row * a.t_stride;
  T* g = a.grad ? static_cast<T*>(a.grad) + row * a.g_stride : nullptr;
  cuda::allow_dependents();

  if (row_ignored(a, row)) {  // the same in every block of the cluster: nothing is read or exchanged
    if (rank == 0 && tid == 0) a.row_loss[row] = 0.f;
    if (g) {
      uint4* gv = reinterpret_cast<uint4*>(g);
      for (int64_t k = v0 + tid; k < v0 + count; k += nthr) __stcg(gv + k, make_uint4(0, 0, 0, 0));
      if (tid < tail) g[nvec * V + tid] = from_f<T>(0.f);
    }
    cuda::grid_dependency_wait();  // no block ends before the totals kernel (the finish kernel waits for this grid)
    return;
  }
  if (tid == 0) {
    for (int p = 0; p < pieces; ++p) cuda::mbar_init(&bars[p], 1);
    cuda::mbar_init(&stat_bar, 1);
    cuda::mbar_init(&sum_bar, 1);
    cuda::mbar_init_fence();
    if (csize > 1) {
      cuda::mbar_arrive_expect_tx(&stat_bar, kStatBytes * uint32_t(csize));
      if (needs_sums(K)) cuda::mbar_arrive_expect_tx(&sum_bar, kSumBytes * uint32_t(csize));
    }
    for (int p = 0; p < pieces; ++p) {
      const int64_t first = p * sh.piece_vecs;
      const uint32_t bytes = uint32_t(min(sh.piece_vecs, count - first) * 16);
      cuda::mbar_arrive_expect_tx(&bars[p], 2 * bytes);
      cuda::bulk_copy_g2s(xs + first, x + (v0 + first) * V, bytes, &bars[p]);
      cuda::bulk_copy_g2s(ts + first, t + (v0 + first) * V, bytes, &bars[p]);
    }
  }
  if (csize > 1) __cluster_barrier_arrive_relaxed();  // waited for before the first exchange
  __syncthreads();

  // Pass 1, piece by piece as the copies land, each against the running maxima of this thread's vectors; the tail
  // (last block) from global memory, kept in registers for the later passes.
  Stats st = empty_stats(a);
  for (int p = 0; p < pieces; ++p) {
    cuda::mbar_wait(&bars[p], 0);
    const uint32_t first = uint32_t(p * sh.piece_vecs), end = uint32_t(min(count, (p + 1) * sh.piece_vecs));
    if (!kProbs && a.teacher_logits)
      pass1_piece<T, K, kProbs, !kProbs>(st, xa, ta, first, end, a);
    else
      pass1_piece<T, K, kProbs, false>(st, xa, ta, first, end, a);
  }
  if (K == Kind::kForwardKL && !kProbs && a.teacher_logits) st.rt *= a.inv_temp;
  float zt = 0.f, tt = 0.f;
  if (tid < tail) {
    zt = to_f<T>(x[nvec * V + tid]);
    tt = to_f<T>(t[nvec * V + tid]);
    const float z1[1] = {zt}, t1[1] = {tt};
    accumulate<K, kProbs, 1>(st, z1, t1, a);
  }
  const float thread_mz = st.mz;  // at least every z-term this thread holds (pass 2's reference)
  st = block_merge(st, warp_stats, a);
  if (csize > 1) {
    __cluster_barrier_wait();  // every block running and its barriers initialised before anyone writes into it
    send_stats(st, stat_slots, &stat_bar, csize, rank);
    cuda::mbar_wait(&stat_bar, 0);
    st = merge_entries<Stats>(csize, [&](int j) { return stat_slots[j].s; }, a);
  }
  Row r = finish_stats<K>(st, a);

  // Pass 2 (JSD, TVD) in pass 1's order, each vector's kept terms written over it when a gradient is wanted: every
  // thread reads back only what it wrote.
  // uz: the reference of the kept q's (see add_sums); a thread that saw only -inf keeps q's of 0 against the lse
  // itself.
  const float uz = thread_mz == -INFINITY ? r.lse2z : thread_mz, fz = exp2_fast(uz - r.lse2z);
  if constexpr (needs_sums(K)) {
    Sums s = empty_sums(a);
    for (int p = 0; p < pieces; ++p) {
      const uint32_t first = uint32_t(p * sh.piece_vecs), end = uint32_t(min(count, (p + 1) * sh.piece_vecs));
      for (uint32_t k = first + tid; k < end; k += nthr) {
        float z[V], tv[V], ka[V], kb[V];
        unpack_words<T>(lds16(xa + 16 * k), z);
        unpack_words<T>(lds16(ta + 16 * k), tv);
#pragma unroll
        for (int e = 0; e < V; ++e) add_sums<K, kProbs>(s, z[e], tv[e], r, a, uz, fz, ka[e], kb[e]);
        if (g) {
          sts16(xa + 16 * k, cuda::pack16<Kept<T>>(ka));
          sts16(ta + 16 * k, cuda::pack16<Kept<T>>(kb));
        }
      }
    }
    if (tid < tail) add_sums<K, kProbs>(s, zt, tt, r, a);
    s = block_merge(s, warp_sums, a);
    if (csize > 1) {
      send_sums(s, sum_slots, &sum_bar, csize, rank);
      cuda::mbar_wait(&sum_bar, 0);
      s = merge_entries<Sums>(csize, [&](int j) { return sum_slots[j]; }, a);
    }
    finish_sums<K>(r, s, a);
  }
  if (rank == 0 && tid == 0) a.row_loss[row] = r.loss;
  cuda::grid_dependency_wait();  // launched as the totals kernel's dependent: the count the means divide by
  if (!g) return;

  // Pass 3: the gradient, 16-byte stores, in pass 1's order. JSD: coef (1 - b) q (ln2 log2(q / m) - k); TVD:
  // coef / 2 q (sign - k); with q = kb fz both are kb (c1 ka - c2). The KLs recompute theirs from the inputs, the
  // forward KL's coef (q sp - p) with its factors folded into the exponents: 2^(z-term - oq) - 2^(t-term - op).
  const float coef = grad_coef(a);
  const float c = coef * (K == Kind::kJSD ? 1.f - a.beta : 0.5f) * fz;
  const float c1 = K == Kind::kJSD ? c * kLn2 : c, c2 = c * r.k;
  const float oq = r.lse2z - log2_fast(coef * r.sp), op = r.lse2t - log2_fast(coef);
  uint4* gv = reinterpret_cast<uint4*>(g) + v0;
  for (int p = 0; p < pieces; ++p) {
    const uint32_t first = uint32_t(p * sh.piece_vecs), end = uint32_t(min(count, (p + 1) * sh.piece_vecs));
    for (uint32_t k = first + tid; k < end; k += nthr) {
      float out[V];
      if constexpr (needs_sums(K)) {
        float ka[V], kb[V];
        unpack_words<Kept<T>>(lds16(xa + 16 * k), ka);
        unpack_words<Kept<T>>(lds16(ta + 16 * k), kb);
#pragma unroll
        for (int e = 0; e < V; ++e) out[e] = kb[e] * fmaf(c1, ka[e], -c2);
      } else {
        float z[V], tv[V];
        unpack_words<T>(lds16(xa + 16 * k), z);
        unpack_words<T>(lds16(ta + 16 * k), tv);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          if constexpr (K == Kind::kForwardKL)
            out[e] = exp2_fast(fmaf(z[e], a.z_scale, -oq)) -
                     (kProbs ? coef * tv[e] : exp2_fast(fmaf(tv[e], a.t_scale, -op)));
          else
            out[e] = grad_elem<K, kProbs>(z[e], tv[e], r, coef, a);
        }
      }
      __stcg(gv + k, cuda::pack16<T>(out));
    }
  }
  if (tid < tail) g[nvec * V + tid] = from_f<T>(grad_elem<K, kProbs>(zt, tt, r, coef, a));
}

}  // namespace tigon::distill::kern
