// GEMV kernels; included by gemv_cuda.cu only.
//
// y = x W^T for a few rows of x is bound by reading W once: every element of W is used M times at most. A block of
// 8 warps owns 16 rows of W (2 per warp) and one K range (the whole of K unless it is split across blocks). The
// block stages its rows of x for a tile of K in shared memory (16-bit x stays 16-bit: 32 KB hold 16 rows of 1024
// elements, or one row of 16384), then each warp streams its 2 rows of W through that tile with 16-byte loads, 8 in
// flight per lane (2 rows x 4 steps of the warp's 512-byte stride), and multiplies every W vector by every row of x
// from shared memory: per W byte read from memory, M/2 bytes of x read from shared memory. The W loads bypass L1
// (each byte is read once) and accumulate in fp32 registers, acc[row of W][row of x]; at the end one reduce-scatter
// over the warp's lanes leaves each sum in one lane, which writes y (plus the bias) or, when K is split across
// the blocks of a thread block cluster, its share to shared memory, where the cluster's first block adds the shares
// up in split order (deterministic, one launch, no workspace).
//
// Weight-only int8 (tigon_gemv_int8) is the same kernel with W's element type int8_t: a 16-byte load of W carries 16
// weights, so a lane multiplies each W vector by 32 bytes of x (two 16-byte shared-memory reads of 16-bit x), and the
// per-output-channel scale multiplies the finished sum.
//
// From 5 rows of x (16-bit, 16-byte rows) the CUDA cores' M FMAs per W element become the limit, and gemv_mma takes
// over: tensor-core mma.sync m16n8k16 with W as the A operand straight from its 16-byte loads (no shared memory), x as
// B from shared memory; see the kernel.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/async_copy.cuh"
#include "common/cuda_types.cuh"
#include "common/reduce.cuh"
#include "common/warp_mma.cuh"

namespace tigon::gemv::kern {

namespace cg = cooperative_groups;

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 2;                    // rows of W a warp owns
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // rows of W a block owns
constexpr int kUnroll = 4;                         // steps of the warp's stride loaded before any is used
constexpr int kTileBytes = 32 << 10;               // shared memory for the tile of x
constexpr int kMaxRowsX = 16;                      // rows of x per block (more rows: more blocks along z)
constexpr int kKAlign = 256;                       // tiles and K splits are multiples of this many elements

constexpr int kMaxParts = 4;  // weights side by side in y (tigon_gemv_parts)

struct Args {
  const void* x;
  const void* w[kMaxParts];
  const void* bias[kMaxParts];  // nullptr: none
  void* y;
  const float* w_scale;  // int8 W (one part): one scale per row of W (else unused)
  int64_t M, K;
  int64_t x_stride, y_stride;
  int64_t w_stride[kMaxParts];
  int64_t rows[kMaxParts];            // rows of each part's W
  int64_t y_first[kMaxParts];         // its first column of y
  int64_t tile_first[kMaxParts + 1];  // its first block along x (blocks of kBlockRows rows); [parts]: all of them
  int parts;
  int64_t k_split;  // elements of K per split (a multiple of kKAlign)
  int tile_k;       // elements of K staged per tile (a multiple of kKAlign)
  int64_t m0;       // first row of x of this launch
};

// The part of W this block's rows come from: the last one whose first block is at or before it.
__device__ __forceinline__ int part_of_block(const Args& a) {
  int i = 0;
#pragma unroll
  for (int j = 1; j < kMaxParts; ++j)
    if (j < a.parts && int64_t(blockIdx.x) >= a.tile_first[j]) i = j;
  return i;
}

// V consecutive elements kept in their storage format: one 16-byte vector (V = 16 / sizeof(T)) or one element.
template <class T, int V>
using Raw = std::conditional_t<V == 1, T, uint4>;

template <class T, int V>
__device__ __forceinline__ void to_floats(const Raw<T, V>& r, float (&f)[V]) {
  if constexpr (std::is_same_v<T, int8_t>) {
    if constexpr (V == 1) {
      f[0] = float(r);
    } else {
      // Byte b as the float 2^23 + (b + 128): the biased byte (b ^ 0x80) under the exponent bits 0x4B, one byte
      // permute, then one subtraction of 2^23 + 128 (exact). Four int-to-float conversions would run at a quarter of
      // the rate.
      const uint32_t w[4] = {r.x ^ 0x80808080u, r.y ^ 0x80808080u, r.z ^ 0x80808080u, r.w ^ 0x80808080u};
#pragma unroll
      for (int i = 0; i < 16; ++i)
        f[i] = __uint_as_float(__byte_perm(w[i / 4], 0x4B000000u, 0x7540u | (i % 4))) - 8388736.f;
    }
  } else if constexpr (V == 1) {
    f[0] = cuda::to_f<T>(r);
  } else {
    cuda::unpack16<T>(r, f);
  }
}

// The x elements that meet one W vector of V elements of type W, as floats, from shared memory: one element, or
// V * sizeof(T) / 16 vectors of 16 bytes (one when W is T). Wide: each vector read as one 16-byte load (fewer
// instructions); else element by element (fewer registers: at 8 rows of x and int8 W 80 against 88, at 16 rows 128
// against 144, each a block less per multiprocessor).
template <class T, class W, int V, bool kWide>
__device__ __forceinline__ void x_floats(const T* p, float (&f)[V]) {
  if constexpr (V == 1) {
    f[0] = cuda::to_f<T>(*p);
  } else {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int i = 0; i < V / kPer; ++i) {
      float g[kPer];
      if constexpr (kWide) {
        const uint4 v = reinterpret_cast<const uint4*>(p)[i];  // unpack16 would read a reference element-wise
        cuda::unpack16<T>(v, g);
      } else {
        cuda::unpack16<T>(reinterpret_cast<const uint4*>(p)[i], g);
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j) f[i * kPer + j] = g[j];
    }
  }
}

// Elements of x per 16-byte staging load: 16 / sizeof(T) on the vector path (V > 1), else 1.
template <class T, int V>
constexpr int kStageVec = V == 1 ? 1 : 16 / int(sizeof(T));

template <class T, int V>
__device__ __forceinline__ Raw<T, V> load_w(const T* p) {
  if constexpr (V == 1) {
    return __ldg(p);
  } else {
    return cuda::load_stream16(p);
  }
}

template <class T, int V>
__device__ __forceinline__ Raw<T, V> load_smem(const T* p) {
  if constexpr (V == 1) {
    return *p;
  } else {
    return *reinterpret_cast<const uint4*>(p);
  }
}

// Stages rows m0 .. m0 + MT of x, columns k .. k + len, into xs ([MT][tile_k]); rows past M and columns past len are
// zeros (they multiply W rows that are never written, or columns no W vector reaches).
template <class T, int MT, int V>
__device__ __forceinline__ void stage_x(const Args& a, T* xs, int64_t m0, int64_t k, int64_t len) {
  const T* x = static_cast<const T*>(a.x);
  const int per_row = a.tile_k / V;
  for (int i = threadIdx.x; i < MT * per_row; i += kThreads) {
    const int m = i / per_row, c = (i - m * per_row) * V;
    Raw<T, V> v{};
    if (m0 + m < a.M && c < len) {
      const T* p = x + (m0 + m) * a.x_stride + k + c;
      if constexpr (V == 1) {
        v = *p;
      } else {
        v = __ldg(reinterpret_cast<const uint4*>(p));
      }
    }
    *reinterpret_cast<Raw<T, V>*>(xs + m * a.tile_k + c) = v;
  }
}

// One step of the warp's stride for all its rows: acc[r][m] += W[r][k .. k + V) . x[m][k .. k + V).
template <class T, class W, int MT, int V>
__device__ __forceinline__ void fma_step(const Raw<W, V> (&wv)[kRowsPerWarp], const T* xs, int tile_k, int c,
                                         float (&acc)[kRowsPerWarp][MT]) {
  float wf[kRowsPerWarp][V];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) to_floats<W, V>(wv[r], wf[r]);
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    float xf[V];
    if constexpr (std::is_same_v<T, W>) {
      to_floats<T, V>(load_smem<T, V>(xs + m * tile_k + c), xf);
    } else {
      x_floats<T, W, V, (MT <= 2)>(xs + m * tile_k + c, xf);
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int j = 0; j < V; ++j) acc[r][m] = fmaf(wf[r][j], xf[j], acc[r][m]);
  }
}

// y[row, n] from its finished sum: times the row of W's scale for int8 W, plus the bias, rounded once.
template <class T, class W>
__device__ __forceinline__ void write_y(const Args& a, int part, int64_t row, int64_t n, float s) {
  if constexpr (!std::is_same_v<T, W>) s *= a.w_scale[n];
  const T* bias = static_cast<const T*>(a.bias[part]);
  const float b = bias ? cuda::to_f<T>(bias[n]) : 0.f;
  static_cast<T*>(a.y)[row * a.y_stride + a.y_first[part] + n] = cuda::from_f<T>(s + b);
}

// K split over the blocks of one cluster (gridDim.y of them): each block has left its sums in shares ([row of W in
// the block][row of x], kRows x MT), and the cluster's first block adds them up in split order, reading the others'
// through distributed shared memory, then writes y.
template <class T, class W, int kRows, int MT>
__device__ __forceinline__ void add_cluster_shares(const Args& a, int part, int64_t tile, int64_t m0, int64_t N,
                                                   float* shares) {
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (cluster.block_rank() == 0) {
    for (int t = threadIdx.x; t < kRows * MT; t += kThreads) {
      const int64_t n = tile * kRows + t / MT, row = m0 + t % MT;
      if (n >= N || row >= a.M) continue;
      float sum = 0.f;
      for (unsigned rank = 0; rank < gridDim.y; ++rank) sum += cluster.map_shared_rank(shares, rank)[t];
      write_y<T, W>(a, part, row, n, sum);
    }
  }
  cluster.sync();  // every block's shared memory stays until the first block has read it
}

// grid: (ceil(N / kBlockRows), splits, row chunks of MT), clusters of (1, splits, 1) when K is split; dynamic shared
// memory MT * tile_k * sizeof(T). W: the weight's element type (T, or int8_t with a scale per row); V: elements of W
// per load (16 bytes, or one).
template <class T, int MT, int V, class W = T>
__global__ void __launch_bounds__(kThreads) gemv(const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* xs = reinterpret_cast<T*>(smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t m0 = a.m0 + int64_t(blockIdx.z) * MT;
  const int64_t k_begin = int64_t(blockIdx.y) * a.k_split;
  const int64_t k_end = k_begin + a.k_split < a.K ? k_begin + a.k_split : a.K;
  const int part = part_of_block(a);
  const int64_t N = a.rows[part], tile = int64_t(blockIdx.x) - a.tile_first[part];  // this part's rows, block
  const int64_t n0 = (tile * kWarps + warp) * kRowsPerWarp;                         // rows of the part's W
  const W* w = static_cast<const W*>(a.w[part]);
  const W* wrow[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)  // rows past N read the last row again and are not written
    wrow[r] = w + (n0 + r < N ? n0 + r : N - 1) * a.w_stride[part];

  constexpr int kStride = 32 * V;  // elements a warp covers per step
  // Launched as a programmatic dependent (gemv_cuda.cu): until the kernel ahead has finished, only the first step's
  // lines of W are fetched into L2 (W is not what a decode step's previous kernel writes, and an L2 line is current
  // either way), so the weight stream starts while that kernel drains; x and every write wait.
  if (n0 < N)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        if (k_begin + lane * V + u * kStride < k_end) cuda::prefetch_l2(wrow[r] + k_begin + lane * V + u * kStride);
  cuda::grid_dependency_wait();
  float acc[kRowsPerWarp][MT] = {};
  for (int64_t t0 = k_begin; t0 < k_end; t0 += a.tile_k) {
    const int len = int(k_end - t0 < a.tile_k ? k_end - t0 : a.tile_k);
    __syncthreads();  // the previous tile's readers are done
    stage_x<T, MT, kStageVec<T, V>>(a, xs, m0, t0, len);
    __syncthreads();
    if (n0 >= N) continue;  // a warp past the last row still stages x with the others
    int c = lane * V;
    for (; c + (kUnroll - 1) * kStride < len; c += kUnroll * kStride) {
      Raw<W, V> wv[kUnroll][kRowsPerWarp];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) wv[u][r] = load_w<W, V>(wrow[r] + t0 + c + u * kStride);
      if constexpr (V > 1 && MT == 1) {
        // ptxas would issue the later steps' loads only after the first steps' arithmetic (two or three round trips
        // to memory where one would do, and fewer bytes in flight); the first use now needs every load, so all of
        // them go out first. With more rows of x the registers this takes would cost occupancy instead (at 2 rows of x
        // and int8 W: 116 registers against 64).
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r)
            if (u + r > 0) cuda::load_together(wv[0][0].x, wv[u][r].x);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) fma_step<T, W, MT, V>(wv[u], xs, a.tile_k, c + u * kStride, acc);
    }
    for (; c < len; c += kStride) {
      Raw<W, V> wv[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) wv[r] = load_w<W, V>(wrow[r] + t0 + c);
      fma_step<T, W, MT, V>(wv, xs, a.tile_k, c, acc);
    }
  }
  cuda::allow_dependents();  // the next kernel may launch and wait for this grid's writes

  constexpr int kSums = kRowsPerWarp * MT, kLanesPerSum = 32 / kSums;
  float s = 0.f;
  if (n0 < N) {  // warp-uniform
    float v[kSums];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int m = 0; m < MT; ++m) v[r * MT + m] = acc[r][m];
    s = cuda::reduce_scatter<kSums>(v, 32);  // lane l holds sum l / kLanesPerSum
  }
  const bool owner = n0 < N && lane % kLanesPerSum == 0;
  const int idx = lane / kLanesPerSum, r = idx / MT, m = idx % MT;
  if (gridDim.y == 1) {
    if (owner && n0 + r < N && m0 + m < a.M) write_y<T, W>(a, part, m0 + m, n0 + r, s);
    return;
  }
  __shared__ float shares[kBlockRows * MT];  // [row of W in the block][row of x]
  if (owner) shares[(warp * kRowsPerWarp + r) * MT + m] = s;
  add_cluster_shares<T, W, kBlockRows, MT>(a, part, tile, m0, N, shares);
}

// ---- tensor cores: 5 to 16 rows of x ----------------------------------------------------------------------------
//
// A warp owns 16 rows of W (a block of 8 warps 128) and computes their products with MT (8 or 16) rows of x as
// m16n8k16 tiles, W as the row-major A (16 rows x 16 of K) and x as the column-major B (16 of K x 8 rows of x). The
// order of K inside a product is free as long as A and B agree, so each lane's 16-byte load of W (8 consecutive
// elements of one row) goes into the A registers as it is: lane (g, q) = (lane / 4, lane % 4) loads elements
// 8q .. 8q + 7 of a 32-element chunk of rows g and g + 8, the first four of each row feed one mma (A slots 2q, 2q + 1,
// 2q + 8, 2q + 9) and the last four a second one, and the lane's B registers are the same elements of x row g, one
// 16-byte load from shared memory. Per 32 elements of K a lane issues two loads of W, MT / 8 loads of x and
// MT / 4 mmas, against M FMAs per element on the CUDA cores. Rows of x past M are zeros in shared memory.
//
// int8 W (weight-only int8, from 3 rows of x): a lane's 16-byte load holds 16 weights, elements 16q .. 16q + 15 of a
// 64-element chunk; they become two 16-byte vectors of T (int8 values are exact in bf16 and fp16), each taking the
// place of one 16-bit load above with the x elements of the same K, and the row's scale multiplies the finished sum.
// Where the CUDA-core kernel reads x element by element from 3 rows (registers), this reads it 16 bytes at a time.
constexpr int kMmaRowsPerWarp = 16;
constexpr int kMmaBlockRows = kWarps * kMmaRowsPerWarp;
constexpr int kMmaChunk = 32;  // elements of K per lane group and step
constexpr int kMmaPad = 32;    // extra elements per staged row of x: rows 64 bytes apart in banks, no conflict

// W's 16 int8 values as two 16-byte vectors of T (8 each, in order): exact, through the float trick of to_floats.
template <class T>
__device__ __forceinline__ void widen_int8(const uint4& raw, uint4 (&out)[2]) {
  float f[16];
  to_floats<int8_t, 16>(raw, f);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float half[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) half[i] = f[8 * h + i];
    out[h] = cuda::pack16<T>(half);
  }
}

template <class T, int MT, class W = T>
__global__ void __launch_bounds__(kThreads) gemv_mma(const Args a) {
  static_assert(MT == 8 || MT == 16, "one or two n8 tiles of x rows");
  constexpr int kTiles = MT / 8;
  constexpr bool kInt8 = std::is_same_v<W, int8_t>;
  constexpr int kLaneElems = 16 / sizeof(W);  // elements of W per lane per step: 8 (16-bit), 16 (int8)
  extern __shared__ __align__(16) unsigned char smem[];
  T* xs = reinterpret_cast<T*>(smem);
  const int xs_stride = a.tile_k + kMmaPad;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int64_t m0 = a.m0 + int64_t(blockIdx.z) * MT;
  const int64_t k_begin = int64_t(blockIdx.y) * a.k_split;
  const int64_t k_end = k_begin + a.k_split < a.K ? k_begin + a.k_split : a.K;
  const int part = part_of_block(a);
  const int64_t N = a.rows[part], tile = int64_t(blockIdx.x) - a.tile_first[part];
  const int64_t n0 = (tile * kWarps + warp) * kMmaRowsPerWarp;  // the warp's first row of the part's W
  const W* w = static_cast<const W*>(a.w[part]);
  const W* wrow[2];  // rows g and g + 8; rows past N read the last row again and are not written
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t n = n0 + g + 8 * h;
    wrow[h] = w + (n < N ? n : N - 1) * a.w_stride[part] + kLaneElems * q;
  }

  constexpr int kStride = 4 * kLaneElems;  // elements of a row the warp covers per step (kMmaChunk for 16-bit W)
  if (n0 < N)  // the first steps' lines of W into L2 while the kernel ahead drains (as in gemv)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (k_begin + kLaneElems * q + u * kStride < k_end) cuda::prefetch_l2(wrow[h] + k_begin + u * kStride);
  cuda::grid_dependency_wait();

  float acc[kTiles][4] = {};
  auto step16 = [&](const uint4(&wv)[2], const T* xk) {  // 8 elements of K of rows g and g + 8, as T
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const uint4 xv = *reinterpret_cast<const uint4*>(xk + (8 * j + g) * xs_stride);
      const uint32_t lo[4] = {wv[0].x, wv[1].x, wv[0].y, wv[1].y}, hi[4] = {wv[0].z, wv[1].z, wv[0].w, wv[1].w};
      cuda::mma_16816<T>(acc[j], lo, xv.x, xv.y);
      cuda::mma_16816<T>(acc[j], hi, xv.z, xv.w);
    }
  };
  auto step = [&](const uint4(&wv)[2], const T* xk) {
    if constexpr (kInt8) {
      uint4 wide[2][2];  // [row g, g + 8][first, second 8 elements]
#pragma unroll
      for (int h = 0; h < 2; ++h) widen_int8<T>(wv[h], wide[h]);
#pragma unroll
      for (int e = 0; e < 2; ++e) step16({wide[0][e], wide[1][e]}, xk + 8 * e);
    } else {
      step16(wv, xk);
    }
  };
  for (int64_t t0 = k_begin; t0 < k_end; t0 += a.tile_k) {
    const int len = int(k_end - t0 < a.tile_k ? k_end - t0 : a.tile_k);
    __syncthreads();  // the previous tile's readers are done
    {                 // rows m0 .. m0 + MT of x, columns t0 .. t0 + len, zeros past M and len
      const T* x = static_cast<const T*>(a.x);
      constexpr int kV = 8;
      const int per_row = a.tile_k / kV;
      for (int i = threadIdx.x; i < MT * per_row; i += kThreads) {
        const int m = i / per_row, c = (i - m * per_row) * kV;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (m0 + m < a.M && c < len) v = __ldg(reinterpret_cast<const uint4*>(x + (m0 + m) * a.x_stride + t0 + c));
        *reinterpret_cast<uint4*>(xs + m * xs_stride + c) = v;
      }
    }
    __syncthreads();
    if (n0 >= N) continue;  // a warp past the last row still stages x with the others
    const T* xq = xs + kLaneElems * q;
    int c = 0;
    for (; c + kUnroll * kStride <= len; c += kUnroll * kStride) {
      uint4 wv[kUnroll][2];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[u][h] = cuda::load_stream16(wrow[h] + t0 + c + u * kStride);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) step(wv[u], xq + c + u * kStride);
    }
    for (; c < len; c += kStride) {  // len is a multiple of kLaneElems: a lane's elements are all in or all out
      uint4 wv[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
      if (c + kLaneElems * q < len)
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[h] = cuda::load_stream16(wrow[h] + t0 + c);
      step(wv, xq + c);
    }
  }
  cuda::allow_dependents();

  // Lane (g, q) holds, per n8 tile j, rows g and g + 8 of the warp's W against rows 8j + 2q and 8j + 2q + 1 of x.
  auto each = [&](auto&& f) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(g + 8 * (e / 2), 8 * j + 2 * q + e % 2, acc[j][e]);
  };
  if (gridDim.y == 1) {
    if (n0 < N)
      each([&](int r, int m, float s) {
        if (n0 + r < N && m0 + m < a.M) write_y<T, W>(a, part, m0 + m, n0 + r, s);
      });
    return;
  }
  __shared__ float shares[kMmaBlockRows * MT];  // [row of W in the block][row of x]
  if (n0 < N) each([&](int r, int m, float s) { shares[(warp * kMmaRowsPerWarp + r) * MT + m] = s; });
  add_cluster_shares<T, W, kMmaBlockRows, MT>(a, part, tile, m0, N, shares);
}

}  // namespace tigon::gemv::kern
