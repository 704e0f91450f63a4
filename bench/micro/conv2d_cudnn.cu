// cuDNN's own fused convolution, y = ReLU(conv(x, w) + bias [+ z]), against its bare convolution, on ResNet-50's
// layers at batch 64 (bf16, channels-last): whether cuDNN's fusion runs at the bare convolution's speed, the bar the
// library's CUTLASS kernel misses by 7-8% (docs/performance/conv2d.md). Every algorithm cuDNN lists is tried; the
// fastest that runs is shown, and its output compared with the bare convolution followed by bias and ReLU on the host.
// Diagnostic only, not part of the library.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -I<cudnn>/include -o build/conv2d_cudnn bench/micro/conv2d_cudnn.cu \
//     -L<cudnn>/lib -l:libcudnn.so.9
//   LD_LIBRARY_PATH=<cudnn>/lib build/conv2d_cudnn
// (<cudnn>: the nvidia-cudnn wheel's nvidia/cudnn folder, which PyTorch's CUDA wheels install.)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "micro_util.cuh"

#define CUDNN(x)                                                                              \
  do {                                                                                        \
    cudnnStatus_t s = (x);                                                                    \
    if (s != CUDNN_STATUS_SUCCESS) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

using T = __nv_bfloat16;

struct Layer {
  int n, c, h, w, k, r, pad;
};

struct Descs {
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnActivationDescriptor_t relu;
};

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  static const char* names[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct", "fft", "fft_tiling",
                                "winograd",      "winograd_nonfused"};
  return int(a) < 8 ? names[int(a)] : "?";
}

}  // namespace

int main() {
  const Layer layers[] = {{64, 64, 56, 56, 64, 3, 1},   {64, 128, 28, 28, 128, 3, 1}, {64, 256, 14, 14, 256, 3, 1},
                          {64, 512, 7, 7, 512, 3, 1},   {64, 64, 56, 56, 256, 1, 0},  {64, 256, 56, 56, 64, 1, 0},
                          {64, 1024, 14, 14, 256, 1, 0}};
  cudnnHandle_t handle;
  CUDNN(cudnnCreate(&handle));
  std::printf("cuDNN %zu, bf16, NHWC, fp32 accumulation; median us by CUDA events\n", cudnnGetVersion());
  const size_t ws_bytes = size_t(512) << 20;
  void* ws = nullptr;
  CHECK(cudaMalloc(&ws, ws_bytes));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const Layer& l : layers) {
    const int p = l.h + 2 * l.pad - l.r + 1;  // stride 1
    const size_t nx = size_t(l.n) * l.h * l.w * l.c, nw = size_t(l.k) * l.r * l.r * l.c, ny = size_t(l.n) * p * p * l.k;
    std::vector<T> hx(nx), hw(nw), hb(l.k), hz(ny);
    for (auto& v : hx) v = __float2bfloat16(u(rng));
    for (auto& v : hw) v = __float2bfloat16(u(rng) * 0.05f);
    for (auto& v : hb) v = __float2bfloat16(u(rng));
    for (auto& v : hz) v = __float2bfloat16(u(rng));
    T *x, *w, *b, *y, *z;
    CHECK(cudaMalloc(&x, nx * sizeof(T)));
    CHECK(cudaMalloc(&w, nw * sizeof(T)));
    CHECK(cudaMalloc(&b, l.k * sizeof(T)));
    CHECK(cudaMalloc(&y, ny * sizeof(T)));
    CHECK(cudaMalloc(&z, ny * sizeof(T)));
    CHECK(cudaMemcpy(x, hx.data(), nx * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(w, hw.data(), nw * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, hb.data(), l.k * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(z, hz.data(), ny * sizeof(T), cudaMemcpyHostToDevice));

    Descs d{};
    CUDNN(cudnnCreateTensorDescriptor(&d.x));
    CUDNN(cudnnCreateTensorDescriptor(&d.y));
    CUDNN(cudnnCreateTensorDescriptor(&d.bias));
    CUDNN(cudnnCreateFilterDescriptor(&d.w));
    CUDNN(cudnnCreateConvolutionDescriptor(&d.conv));
    CUDNN(cudnnCreateActivationDescriptor(&d.relu));
    CUDNN(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, l.n, l.c, l.h, l.w));
    CUDNN(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, l.n, l.k, p, p));
    CUDNN(cudnnSetTensor4dDescriptor(d.bias, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, 1, l.k, 1, 1));
    CUDNN(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, l.k, l.c, l.r, l.r));
    CUDNN(cudnnSetConvolution2dDescriptor(d.conv, l.pad, l.pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN(cudnnSetConvolutionMathType(d.conv, CUDNN_TENSOR_OP_MATH));
    CUDNN(cudnnSetActivationDescriptor(d.relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));

    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                 &found, perf));
    const float one = 1.f, zero = 0.f;
    struct Best {
      float us = 1e30f;
      cudnnConvolutionFwdAlgo_t algo{};
    } bare, fused, fused_z;
    for (int i = 0; i < found; ++i) {
      const cudnnConvolutionFwdAlgo_t a = perf[i].algo;
      size_t need = 0;
      if (cudnnGetConvolutionForwardWorkspaceSize(handle, d.x, d.w, d.conv, d.y, a, &need) != CUDNN_STATUS_SUCCESS ||
          need > ws_bytes)
        continue;
      auto run_bare = [&] {
        return cudnnConvolutionForward(handle, &one, d.x, x, d.w, w, d.conv, a, ws, ws_bytes, &zero, d.y, y);
      };
      auto run_fused = [&](const float* alpha2, const T* zz) {
        return cudnnConvolutionBiasActivationForward(handle, &one, d.x, x, d.w, w, d.conv, a, ws, ws_bytes, alpha2, d.y,
                                                     zz, d.bias, b, d.relu, d.y, y);
      };
      if (run_bare() == CUDNN_STATUS_SUCCESS) {
        const float us = time_us([&] { run_bare(); });
        if (us < bare.us) bare = {us, a};
      }
      if (run_fused(&zero, y) == CUDNN_STATUS_SUCCESS) {
        const float us = time_us([&] { run_fused(&zero, y); });
        if (us < fused.us) fused = {us, a};
      }
      if (run_fused(&one, z) == CUDNN_STATUS_SUCCESS) {
        const float us = time_us([&] { run_fused(&one, z); });
        if (us < fused_z.us) fused_z = {us, a};
      }
    }
    CHECK(cudaDeviceSynchronize());
    // the fused output (with z) against the bare convolution + bias + z and ReLU done on the host
    float err = -1.f;
    if (bare.us < 1e30f && fused_z.us < 1e30f) {
      CUDNN(cudnnConvolutionForward(handle, &one, d.x, x, d.w, w, d.conv, bare.algo, ws, ws_bytes, &zero, d.y, y));
      const std::vector<float> conv = read_floats(y, ny);
      CUDNN(cudnnConvolutionBiasActivationForward(handle, &one, d.x, x, d.w, w, d.conv, fused_z.algo, ws, ws_bytes,
                                                  &one, d.y, z, d.bias, b, d.relu, d.y, y));
      const std::vector<float> out = read_floats(y, ny);
      err = 0.f;
      for (size_t i = 0; i < ny; ++i) {
        const float want = std::fmax(conv[i] + __bfloat162float(hb[i % l.k]) + __bfloat162float(hz[i]), 0.f);
        err = std::fmax(err, std::fabs(out[i] - want) / (1.f + std::fabs(want)));
      }
    }
    std::printf("N %d C %d %dx%d K %d R %d pad %d\n", l.n, l.c, l.h, l.w, l.k, l.r, l.pad);
    auto show = [&](const char* what, const Best& r) {
      if (r.us >= 1e30f)
        std::printf("  %-34s no algorithm ran\n", what);
      else
        std::printf("  %-34s %8.1f us  %5.2fx bare  (%s)\n", what, r.us, r.us / bare.us, algo_name(r.algo));
    };
    show("bare convolution", bare);
    show("conv + bias + ReLU", fused);
    show("conv + bias + residual + ReLU", fused_z);
    std::printf("  max rel diff of the fused output %.1e\n", err);
    CUDNN(cudnnDestroyTensorDescriptor(d.x));
    CUDNN(cudnnDestroyTensorDescriptor(d.y));
    CUDNN(cudnnDestroyTensorDescriptor(d.bias));
    CUDNN(cudnnDestroyFilterDescriptor(d.w));
    CUDNN(cudnnDestroyConvolutionDescriptor(d.conv));
    CUDNN(cudnnDestroyActivationDescriptor(d.relu));
    for (T* ptr : {x, w, b, y, z}) CHECK(cudaFree(ptr));
  }
  CHECK(cudaFree(ws));
  CUDNN(cudnnDestroy(handle));
  return 0;
}
