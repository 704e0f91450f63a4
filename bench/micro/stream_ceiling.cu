// How fast can an SM kernel stream the cross entropy pass's bytes (one read and one write of 2.1 GB, in place), and
// which access style gets there? The row kernel runs ~1076 us where a device copy (the copy engine) takes ~990
// (docs/performance/cross-entropy.md); ce_stream.cu's plain streaming kernels stopped at ~1061. This sweeps what those
// did not: the cache hints of loads and stores, how many bytes are in flight, and a bulk-copy (TMA) kernel that moves
// the bytes through shared memory with bulk loads and bulk stores, like the copy engine, with no per-thread stores at
// all. Diagnostic only, not part of the library. CUDA events, median of 15, random bytes.
//
// Measured on an H200 at git cd8bea0: copy engine 989-993 us, reads alone 499-504, writes alone 482
// (their sum is the copy's time); every in-place streaming kernel 1059-1083 us whatever its cache hints, from 32 KB in
// flight per SM up; the bulk-copy kernel 1114-1135 us with its default hints, 1072-1078 with an evict_first store or
// an evict_normal load. No SM kernel here reached the copy engine.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -o build/stream_ceiling
//   bench/micro/stream_ceiling.cu build/stream_ceiling [MB]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_util.cuh"
#include "common/async_copy.cuh"

namespace {

namespace tc = tigon::cuda;

// Loads: 0 plain, 1 .cs (streaming), 2 L2::256B prefetch, 3 L2 evict_first, 4 .nc no L1 + 256B prefetch.
template <int L>
__device__ __forceinline__ uint4 load(const uint4* p, uint64_t pol) {
  uint4 v;
  if constexpr (L == 0)
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if constexpr (L == 1)
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if constexpr (L == 2)
    asm volatile("ld.global.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  else if constexpr (L == 3)
    asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
  else
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  return v;
}

// Stores: 0 plain (write-back), 1 .cg (the row kernel's), 2 .cs, 3 L2 evict_first, 4 L2 evict_last, 5 no L1.
template <int S>
__device__ __forceinline__ void store(uint4* p, const uint4& v, uint64_t pol) {
  if constexpr (S == 0)
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  else if constexpr (S == 1)
    asm volatile("st.global.cg.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  else if constexpr (S == 2)
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  else if constexpr (S == 3 || S == 4)
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w), "l"(pol)
                 : "memory");
  else
    asm volatile("st.global.L1::no_allocate.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}

// Grid-stride in place, U independent loads in flight per thread.
template <int U, int L, int S>
__global__ void stream(uint4* x, int64_t n) {
  const uint64_t lpol = tc::l2_evict_first(), spol = S == 4 ? tc::l2_evict_last() : tc::l2_evict_first();
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += U * step) {
    uint4 v[U];
#pragma unroll
    for (int j = 0; j < U; ++j)
      if (i + j * step < n) v[j] = load<L>(x + i + j * step, lpol);
#pragma unroll
    for (int j = 0; j < U; ++j)
      if (i + j * step < n) {
        v[j].x ^= 1u;
        store<S>(x + i + j * step, v[j], spol);
      }
  }
}

// Reads only (a sum, so the loads are not dropped) / writes only: the two one-way ceilings.
template <int U>
__global__ void read_only(const uint4* x, int64_t n, uint32_t* sink) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  uint32_t s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += U * step) {
    uint4 v[U];
#pragma unroll
    for (int j = 0; j < U; ++j)
      if (i + j * step < n) v[j] = load<2>(x + i + j * step, 0);
#pragma unroll
    for (int j = 0; j < U; ++j)
      if (i + j * step < n) s ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (s == 0x9e3779b9u) sink[0] = s;  // never, in practice
}
__global__ void write_only(uint4* x, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step)
    __stcg(x + i, make_uint4(uint32_t(i), 1, 2, 3));
}

// A persistent copy through shared memory by the bulk copy engine alone, in place: each block a ring of `stages`
// buffers of `chunk` bytes; one thread loads chunk c into a stage (completion on its mbarrier), then bulk-stores it
// back and, once that store has read the stage, refills it with the block's next chunk. Chunks are dealt
// grid-stride (block b: b, b + G, ...; the whole grid sweeps the buffer together, a narrow front) or in one
// contiguous run per block (wide: G fronts far apart). SH: the store's L2 hint (0 none, 1 evict_first, 2
// evict_last); LH: the load's (0 evict_first, 1 evict_normal).
template <int SH, int LH>
__global__ void tma_copy(char* x, int64_t nchunks, int chunk, int stages, int contiguous) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ uint64_t bars[16];
  if (threadIdx.x != 0) return;
  const int64_t G = gridDim.x, b = blockIdx.x;
  const int64_t per = (nchunks + G - 1) / G;
  const int64_t first = contiguous ? b * per : b, stride = contiguous ? 1 : G;
  const int64_t last = contiguous ? min(nchunks, first + per) : nchunks;  // exclusive
  const int64_t mine = first < last ? (last - first + stride - 1) / stride : 0;
  uint64_t lpol = tc::l2_evict_first(), spol = SH == 2 ? tc::l2_evict_last() : tc::l2_evict_first();
  if (LH == 1) lpol = tc::l2_evict_normal();
  for (int s = 0; s < stages; ++s) tc::mbar_init(&bars[s], 1);
  tc::mbar_init_fence();
  const auto issue_load = [&](int64_t i) {
    const int s = int(i % stages);
    tc::mbar_arrive_expect_tx(&bars[s], uint32_t(chunk));
    tc::bulk_copy_g2s(ring + size_t(s) * chunk, x + (first + i * stride) * chunk, uint32_t(chunk), &bars[s], lpol);
  };
  for (int64_t i = 0; i < min(int64_t(stages), mine); ++i) issue_load(i);
  for (int64_t i = 0; i < mine; ++i) {
    const int s = int(i % stages);
    tc::mbar_wait(&bars[s], uint32_t((i / stages) & 1));
    char* dst = x + (first + i * stride) * chunk;
    const uint32_t src = tc::smem_addr(ring + size_t(s) * chunk);
    if constexpr (SH == 0)
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(chunk)
                   : "memory");
    else
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(dst),
                   "r"(src), "r"(chunk), "l"(spol)
                   : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // The previous chunk's store has read its stage: refill that stage with the chunk `stages` after it.
    if (i >= 1) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      if (i - 1 + stages < mine) issue_load(i - 1 + stages);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

__global__ void fill_random(uint4* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t h = uint64_t(i) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    x[i] = make_uint4(uint32_t(h), uint32_t(h >> 32), uint32_t(h * 3), uint32_t(h >> 17));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t mb = argc > 1 ? std::atoll(argv[1]) : 2004;  // 2004 MiB = 8192 x 128256 bf16 logits
  const int64_t bytes = mb << 20, nvec = bytes / 16;
  uint4 *x = nullptr, *y = nullptr;
  uint32_t* sink = nullptr;
  CHECK(cudaMalloc(&x, bytes));
  CHECK(cudaMalloc(&y, bytes));
  CHECK(cudaMalloc(&sink, 4));
  fill_random<<<4096, 256>>>(x, nvec);
  CHECK(cudaDeviceSynchronize());
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double moved = 2.0 * double(bytes);
  const auto report = [&](const char* name, float us, double b = 0) {
    std::printf("%-52s %8.1f us %7.0f GB/s\n", name, us, (b > 0 ? b : moved) / (us * 1e-6) / 1e9);
    std::fflush(stdout);
  };
  char name[128];

  report("memcpy d2d (copy engine), out of place",
         time_us([&] { CHECK(cudaMemcpyAsync(y, x, size_t(bytes), cudaMemcpyDeviceToDevice)); }));
  report("read only (L2::256B, 4 x 256 / SM, U=4)", time_us([&] { read_only<4><<<sms * 4, 256>>>(x, nvec, sink); }),
         double(bytes));
  report("write only (.cg, 4 x 256 / SM)", time_us([&] { write_only<<<sms * 4, 256>>>(y, nvec); }), double(bytes));

  using K = void (*)(uint4*, int64_t);
  struct Hint {
    const char* name;
    K k;
  };
  // Cache hints at the previous best shape (4 x 256 threads per SM, 4 loads in flight).
  const Hint hints[] = {
      {"ld plain / st plain", stream<4, 0, 0>},
      {"ld plain / st .cg", stream<4, 0, 1>},
      {"ld .cs / st .cs", stream<4, 1, 2>},
      {"ld 256B / st .cg", stream<4, 2, 1>},
      {"ld 256B / st evict_first", stream<4, 2, 3>},
      {"ld 256B / st evict_last", stream<4, 2, 4>},
      {"ld 256B / st no L1", stream<4, 2, 5>},
      {"ld evict_first / st .cg", stream<4, 3, 1>},
      {"ld evict_first / st evict_first", stream<4, 3, 3>},
      {"ld nc 256B / st .cg", stream<4, 4, 1>},
      {"ld nc 256B / st .cs", stream<4, 4, 2>},
  };
  for (const Hint& h : hints) {
    std::snprintf(name, sizeof name, "stream U4 4x256/SM %s", h.name);
    report(name, time_us([&] { h.k<<<sms * 4, 256>>>(x, nvec); }));
  }
  // Bytes in flight: threads per SM x loads per thread (ld 256B / st .cg).
  struct Shape {
    int blocks, threads;
  };
  for (const Shape s : {Shape{1, 256}, Shape{2, 256}, Shape{1, 1024}, Shape{2, 1024}, Shape{8, 256}}) {
    for (int u : {1, 2, 4, 8}) {
      if (u == 8 && s.threads > 256) continue;  // over 64 registers a thread: not launchable at 1024 threads
      const K k = u == 1 ? stream<1, 2, 1> : u == 2 ? stream<2, 2, 1> : u == 4 ? stream<4, 2, 1> : stream<8, 2, 1>;
      std::snprintf(name, sizeof name, "stream U%d %dx%d/SM (%lld KB in flight/SM) 256B/.cg", u, s.blocks, s.threads,
                    (long long)s.blocks * s.threads * u * 16 / 1024);
      report(name, time_us([&] { k<<<sms * s.blocks, s.threads>>>(x, nvec); }));
    }
  }
  // The bulk copy engine through shared memory, in place.
  int smem_max = 0;
  CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  using TK = void (*)(char*, int64_t, int, int, int);
  const TK tks[] = {tma_copy<0, 0>, tma_copy<1, 0>, tma_copy<2, 0>, tma_copy<0, 1>, tma_copy<2, 1>};
  const char* tk_names[] = {"", " st evict_first", " st evict_last", " ld normal", " ld normal st evict_last"};
  for (const TK k : tks) CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max - 1024));
  struct Tma {
    int per_sm, chunk_kb, stages, contiguous, hint;
  };
  const Tma tmas[] = {
      {1, 16, 8, 0, 0}, {1, 32, 6, 0, 0}, {1, 64, 3, 0, 0}, {1, 32, 4, 0, 0}, {1, 16, 12, 0, 0}, {2, 16, 6, 0, 0},
      {2, 32, 3, 0, 0}, {3, 16, 4, 0, 0}, {4, 8, 6, 0, 0},  {1, 32, 6, 1, 0}, {1, 32, 6, 0, 1},  {1, 32, 6, 0, 2},
      {1, 32, 6, 0, 3}, {1, 32, 6, 0, 4}, {2, 16, 6, 0, 2}, {2, 16, 6, 0, 4},
  };
  for (const Tma& t : tmas) {
    const int chunk = t.chunk_kb * 1024;
    const size_t smem = size_t(chunk) * t.stages;
    if (int(smem) > smem_max - 1024 || t.per_sm * (smem + 2048) > 233472) continue;
    const int64_t nchunks = bytes / chunk;
    const TK k = tks[t.hint];
    std::snprintf(name, sizeof name, "tma copy %dx/SM %2d KB x %2d stages %s%s", t.per_sm, t.chunk_kb, t.stages,
                  t.contiguous ? "contiguous" : "grid-stride", tk_names[t.hint]);
    report(name, time_us([&] {
             k<<<sms * t.per_sm, 32, smem>>>(reinterpret_cast<char*>(x), nchunks, chunk, t.stages, t.contiguous);
           }));
  }
  report("memcpy d2d (copy engine), out of place, again",
         time_us([&] { CHECK(cudaMemcpyAsync(y, x, size_t(bytes), cudaMemcpyDeviceToDevice)); }));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(sink));
  return 0;
}
