// RoPE kernel. A work item is one token position (b, t) and one "unit" of V head-dim elements; its thread loads the
// cos/sin entries of that unit once and applies them to every head of q and k (one or two "parts"), so the tables
// are read from memory once per position instead of once per head (they were twice the traffic of q and k).
// A rotation unit covers both members of V pairs (rotate-half: elements e..e+V and their partners e+R/2..;
// interleaved: the adjacent pairs inside e..e+V); a pass-through unit copies V elements past R. A thread loads its next
// heads before it stores the ones in hand, to keep enough bytes in flight. A thread reads everything it writes
// before writing it, so in-place calls (out == x) need no synchronisation.
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
  int64_t head_split;  // threads that share one (b, t, unit), each taking every head_split-th head
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

// One part's heads h0, h0 + step, ... for the rotation unit at element e (partner f for rotate-half).
// The next group of heads is loaded before this group is stored: a store ahead of a load holds the load behind it
// (the compiler cannot tell the output from the input), which left one memory round trip per group in flight.
// The table entries are (re)loaded once per group of heads, from L1: holding them across the whole loop as floats
// cost 32 registers more and halved the resident threads.
template <class T, class TC, int V, bool INTERLEAVED, int kHeadsAtOnce>
__device__ __forceinline__ void rotate_heads(const Part& p, int64_t b, int64_t t, int64_t h0, int64_t step, int e,
                                             int f, const TC* cs, const TC* sn, bool bwd) {
  // Four base pointers and one offset per head: a pointer per head and half cost ~16 more registers per head.
  const T* xe = static_cast<const T*>(p.x) + b * p.x_b + t * p.x_t + e;
  const T* xf = xe + (f - e);
  T* oe = static_cast<T*>(p.out) + b * p.o_b + t * p.o_t + e;
  T* of = oe + (f - e);
  Regs<T, V> va[kHeadsAtOnce], vb[kHeadsAtOnce];
  auto load_group = [&](int64_t h, Regs<T, V>(&ra)[kHeadsAtOnce], Regs<T, V>(&rb)[kHeadsAtOnce]) {
#pragma unroll
    for (int k = 0; k < kHeadsAtOnce; ++k) {
      const int64_t hk = h + k * step;
      if (hk < p.heads) {
        ra[k].load(xe + hk * p.x_h);
        if constexpr (!INTERLEAVED) rb[k].load(xf + hk * p.x_h);
      }
    }
  };
  load_group(h0, va, vb);
#pragma unroll 1
  for (int64_t h = h0; h < p.heads; h += kHeadsAtOnce * step) {
    Regs<T, V> na[kHeadsAtOnce], nb[kHeadsAtOnce];
    if (h + kHeadsAtOnce * step < p.heads) load_group(h + kHeadsAtOnce * step, na, nb);
    Regs<TC, V> ca, cb, sa, sb;
    ca.load(cs + e);
    sa.load(sn + e);
    if constexpr (!INTERLEAVED) {
      cb.load(cs + f);
      sb.load(sn + f);
    }
#pragma unroll
    for (int k = 0; k < kHeadsAtOnce; ++k) {
      const int64_t hk = h + k * step;
      if (hk >= p.heads) break;
      float a[V], b[V];
      if constexpr (INTERLEAVED) {
#pragma unroll
        for (int j = 0; j < V; j += 2) {
          a[j] = va[k][j];
          a[j + 1] = va[k][j + 1];
          rotate_pair(a[j], a[j + 1], ca[j], ca[j + 1], sa[j], sa[j + 1], bwd);
        }
        cuda::store_vec<T, V>(oe + hk * p.o_h, a);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          a[j] = va[k][j];
          b[j] = vb[k][j];
          rotate_pair(a[j], b[j], ca[j], cb[j], sa[j], sb[j], bwd);
        }
        cuda::store_vec<T, V>(oe + hk * p.o_h, a);
        cuda::store_vec<T, V>(of + hk * p.o_h, b);
      }
    }
#pragma unroll
    for (int k = 0; k < kHeadsAtOnce; ++k) va[k] = na[k], vb[k] = nb[k];
  }
}

// One part's pass-through unit at element e, for heads h0, h0 + step, ...
template <class T, int PV>
__device__ __forceinline__ void copy_heads(const Part& p, int64_t b, int64_t t, int e, int64_t h0, int64_t step) {
  if (!p.copy_pass) return;
  const T* x = static_cast<const T*>(p.x) + b * p.x_b + t * p.x_t + e;
  T* out = static_cast<T*>(p.out) + b * p.o_b + t * p.o_t + e;
  for (int64_t h = h0; h < p.heads; h += step) {
    float v[PV];
    cuda::load_vec<T, PV>(x + h * p.x_h, v);
    cuda::store_vec<T, PV>(out + h * p.o_h, v);
  }
}

// V: elements per rotation unit (16 bytes of T on the vector path; 1, or 2 for interleaved, on the scalar path).
// PV: elements per pass-through unit (V on the vector path, 1 on the scalar path, so any D - R works).
// BWD is a template argument: as a runtime flag its select kept 16 more floats live.
template <class T, class TC, int V, int PV, bool INTERLEAVED, bool BWD, int HEADS>
__global__ void __launch_bounds__(256) rope(Args a) {
  // Launched as a programmatic dependent (decode steps chain these kernels): the kernel ahead's writes first; the
  // next kernel may start its own prologue meanwhile.
  cuda::grid_dependency_wait();
  cuda::allow_dependents();
  // One work item per thread, no grid-stride loop: a loop would keep every parameter of both parts in registers.
  const int units = a.rot_units + a.pass_units;
  const int64_t items = a.batch * a.seq * units;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= items * a.head_split) return;
  {
    // Unit fastest, then position: neighbouring threads touch neighbouring bytes of one head (coalesced).
    const int64_t h0 = i / items, item = i % items;
    const int u = int(item % units);
    const int64_t bt = item / units, t = bt % a.seq, b = bt / a.seq;
    if (u >= a.rot_units) {  // pass-through dims: a plain copy
      const int e = a.rotary + (u - a.rot_units) * PV;
      copy_heads<T, PV>(a.part[0], b, t, e, h0, a.head_split);
      if (a.parts > 1) copy_heads<T, PV>(a.part[1], b, t, e, h0, a.head_split);
      return;
    }
    const int e = u * V, f = INTERLEAVED ? e : e + a.half;
    const TC* cs = static_cast<const TC*>(a.cos) + b * a.c_b + t * a.c_t;
    const TC* sn = static_cast<const TC*>(a.sin) + b * a.s_b + t * a.s_t;
    // Parts by constant index: a runtime index into the kernel's parameters copies them all into registers.
    rotate_heads<T, TC, V, INTERLEAVED, HEADS>(a.part[0], b, t, h0, a.head_split, e, f, cs, sn, BWD);
    if (a.parts > 1) rotate_heads<T, TC, V, INTERLEAVED, HEADS>(a.part[1], b, t, h0, a.head_split, e, f, cs, sn, BWD);
  }
}

}  // namespace tigon::rope::kern
