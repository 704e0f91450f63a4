// The gap between dependent small kernels in a CUDA graph, with and without programmatic dependent launch (PDL).
// A BERT-base layer at one sequence of 128 tokens is ~10 kernels of 2-6 us each, replayed from a graph: whatever a
// launch costs between two of them is paid ~120 times a forward. This times a chain of row-wise kernels over a
// [rows, width] bf16 tensor (each reads the previous one's output, as a layer norm after a GEMM does) captured as a
// graph, launched plainly and with the programmatic-serialization attribute (each kernel waits on its predecessor
// with griddepcontrol.wait after its own setup, and lets its successor launch once its stores are issued).
// Diagnostic only, not part of the library.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o build/pdl_chain bench/micro/pdl_chain.cu
#include <cuda_bf16.h>

#include <cstdio>

#include "micro_util.cuh"

namespace {

constexpr int kChain = 64;

// y = x * 1.0001 + 1 row by row, one block of 128 threads per row; pdl: wait for the producer before reading x, and
// allow the consumer to launch after the stores.
template <bool kPdl>
__global__ void row_op(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int width) {
  const size_t row = blockIdx.x;
  if constexpr (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = __bfloat162float(x[row * width + i]);
    y[row * width + i] = __float2bfloat16(v * 1.0001f + 1.f);
  }
  if constexpr (kPdl) asm volatile("griddepcontrol.launch_dependents;");
}

float chain_us(bool pdl, int rows, int width, __nv_bfloat16* a, __nv_bfloat16* b) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kChain; ++i) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(rows);
    cfg.blockDim = dim3(128);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = pdl ? attr : nullptr;
    cfg.numAttrs = pdl ? 1 : 0;
    const __nv_bfloat16* in = i % 2 ? b : a;
    __nv_bfloat16* out = i % 2 ? a : b;
    if (pdl)
      CHECK(cudaLaunchKernelEx(&cfg, row_op<true>, in, out, width));
    else
      CHECK(cudaLaunchKernelEx(&cfg, row_op<false>, in, out, width));
  }
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  // replayed on the default stream, where time_us records its events
  const float us = time_us([&] { CHECK(cudaGraphLaunch(exec, 0)); }, 11) / kChain;
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  return us;
}

}  // namespace

int main() {
  __nv_bfloat16 *a, *b;
  const size_t most = size_t(8192) * 768;
  CHECK(cudaMalloc(&a, most * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&b, most * sizeof(__nv_bfloat16)));
  CHECK(cudaMemset(a, 0, most * sizeof(__nv_bfloat16)));
  std::printf("chain of %d dependent row kernels in one CUDA graph; us per kernel (plain / PDL)\n", kChain);
  const int shapes[][2] = {{1, 768}, {128, 768}, {128, 3072}, {512, 768}, {8192, 768}};
  for (const auto& sh : shapes) {
    const float plain = chain_us(false, sh[0], sh[1], a, b), pdl = chain_us(true, sh[0], sh[1], a, b);
    std::printf("%5d x %4d: %6.2f / %6.2f us  (PDL saves %.2f us a kernel)\n", sh[0], sh[1], plain, pdl, plain - pdl);
  }
  return 0;
}
