// RoPE kernel: one thread per (part, batch, head, position, unit), the unit V head-dim elements. A rotation unit
// covers both members of V pairs (rotate-half: elements e..e+V and their partners e+R/2..; interleaved: the adjacent
// pairs inside e..e+V) and reads its cos/sin entries itself (from L1 and L2: a position's heads share them); a
// pass-through unit copies V elements past R. One head a thread keeps every thread's loads ahead of its stores and
// fills the GPU at any head count: the kernel before it walked a position's heads in one thread and reached 91-95%
// of the copy rate on an H100 where this one reaches 97-100% (docs/performance/rope.md). A thread reads everything
// it writes before writing it, so in-place calls (out == x) need no synchronisation.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/async_copy.cuh"
#include "common/cuda_types.cuh"

namespace tigon::rope::kern {

struct Part {  // q or k: strides in elements along batch, head and position
  const void* x;
  void* out;
  int64_t heads;
  int64_t x_b, x_h, x_t, o_b, o_h, o_t;
  bool copy_pass;  // false in place: the pass-through dims are already where they belong
};

struct Args {
  Part part[2];
  int parts;
  const void* cos;
  const void* sin;
  int64_t c_b, c_t, s_b, s_t;
  int64_t batch, seq;
  bool head_inner;  // items ordered unit, head, position (heads adjacent in memory) instead of unit, position, head
  int rotary, half;
  int rot_units, pass_units;
};

// (a, b) is one pair; forward: a' = a cos_a - b sin_a, b' = b cos_b + a sin_b. The backward (the transpose) is the
// same expression with sin_a' = -sin_b and sin_b' = -sin_a, so both directions share one kernel.
__device__ __forceinline__ void rotate_pair(float& a, float& b, float ca, float cb, float sa, float sb, bool bwd) {
  const float sa_eff = bwd ? -sb : sa, sb_eff = bwd ? -sa : sb;
  const float na = a * ca - b * sa_eff;
  const float nb = b * cb + a * sb_eff;
  a = na;
  b = nb;
}

// N elements of T in registers in their storage format, read as floats. A 16-byte vector is held as four 32-bit
// words and its 16-bit elements are unpacked with bit operations: an array of bf16 would take one register each.
template <class T>
__device__ __forceinline__ float unpack(uint32_t w, int j) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(w);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(j & 1 ? (w & 0xffff0000u) : (w << 16));
  } else {
    const __half2 h = *reinterpret_cast<const __half2*>(&w);
    return j & 1 ? __high2float(h) : __low2float(h);
  }
}

template <class T, int N, bool kVector = N * sizeof(T) == 16>
struct Regs {  // scalar path: a few elements
  T v[N];
  __device__ __forceinline__ void load(const T* p) {
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = p[j];
  }
  __device__ __forceinline__ float operator[](int j) const { return cuda::to_f<T>(v[j]); }
};

template <class T, int N>
struct Regs<T, N, true> {  // vector path: one 16-byte load
  uint32_t w[4];
  __device__ __forceinline__ void load(const T* p) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
  }
  __device__ __forceinline__ float operator[](int j) const { return unpack<T>(w[j * sizeof(T) / 4], j); }
};

// Item i of part p: the unit fastest, then the inner one of head and position (neighbouring threads touch
// neighbouring bytes), then the other, then the batch.
template <class T, class TC, int V, int PV, bool INTERLEAVED, bool BWD>
__device__ __forceinline__ void rotate_item(const Args& a, const Part& p, int64_t i) {
  const int units = a.rot_units + a.pass_units;
  const int u = int(i % units);
  const int64_t r = i / units;
  int64_t h, t, b;
  if (a.head_inner) {
    h = r % p.heads, t = (r / p.heads) % a.seq, b = r / p.heads / a.seq;
  } else {
    t = r % a.seq, h = (r / a.seq) % p.heads, b = r / a.seq / p.heads;
  }
  const T* x = static_cast<const T*>(p.x) + b * p.x_b + t * p.x_t + h * p.x_h;
  T* o = static_cast<T*>(p.out) + b * p.o_b + t * p.o_t + h * p.o_h;
  if (u >= a.rot_units) {  // pass-through dims: a plain copy (in place they are already where they belong)
    if (!p.copy_pass) return;
    const int e = a.rotary + (u - a.rot_units) * PV;
    float v[PV];
    cuda::load_vec<T, PV>(x + e, v);
    cuda::store_vec<T, PV>(o + e, v);
    return;
  }
  const int e = u * V, f = INTERLEAVED ? e : e + a.half;
  Regs<T, V> va, vb;
  va.load(x + e);
  if constexpr (!INTERLEAVED) vb.load(x + f);
  const TC* cs = static_cast<const TC*>(a.cos) + b * a.c_b + t * a.c_t;
  const TC* sn = static_cast<const TC*>(a.sin) + b * a.s_b + t * a.s_t;
  Regs<TC, V> ca, cb, sa, sb;
  ca.load(cs + e);
  sa.load(sn + e);
  if constexpr (!INTERLEAVED) {
    cb.load(cs + f);
    sb.load(sn + f);
  }
  float av[V], bv[V];
  if constexpr (INTERLEAVED) {
#pragma unroll
    for (int j = 0; j < V; j += 2) {
      av[j] = va[j], av[j + 1] = va[j + 1];
      rotate_pair(av[j], av[j + 1], ca[j], ca[j + 1], sa[j], sa[j + 1], BWD);
    }
    cuda::store_vec<T, V>(o + e, av);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      av[j] = va[j], bv[j] = vb[j];
      rotate_pair(av[j], bv[j], ca[j], cb[j], sa[j], sb[j], BWD);
    }
    cuda::store_vec<T, V>(o + e, av);
    cuda::store_vec<T, V>(o + f, bv);
  }
}

// V: elements per rotation unit (16 bytes of T on the vector path; 1, or 2 for interleaved, on the scalar path).
// PV: elements per pass-through unit (V on the vector path, 1 on the scalar path, so any D - R works).
// BWD is a template argument: as a runtime flag its select kept 16 more floats live.
template <class T, class TC, int V, int PV, bool INTERLEAVED, bool BWD>
__global__ void __launch_bounds__(256) rope(Args a) {
  // Launched as a programmatic dependent (decode steps chain these kernels): the kernel ahead's writes first; the
  // next kernel may start its own prologue meanwhile.
  cuda::grid_dependency_wait();
  cuda::allow_dependents();
  const int64_t per_head = a.batch * a.seq * (a.rot_units + a.pass_units);
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t n0 = per_head * a.part[0].heads;
  // Parts by constant index: a runtime index into the kernel's parameters copies them all into registers.
  if (i < n0)
    rotate_item<T, TC, V, PV, INTERLEAVED, BWD>(a, a.part[0], i);
  else if (a.parts > 1 && (i -= n0) < per_head * a.part[1].heads)
    rotate_item<T, TC, V, PV, INTERLEAVED, BWD>(a, a.part[1], i);
}

}  // namespace tigon::rope::kern
