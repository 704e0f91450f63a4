// Tile shapes and cluster shapes of the CUTLASS sm90 implicit-GEMM convolution that src/conv2d/ ships (bf16,
// bias + ReLU epilogue), timed on ResNet-50's layers at batch 64, channels-last. The library ships 128 x 128 tiles
// (128 x 64 where K <= 64), no cluster; this program is how a change to that is chosen. Each configuration's output is
// compared with the first one's. Diagnostic only, not part of the library.
//
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude -I<cutlass>/include \
//     -I<cutlass>/tools/util/include -o build/conv2d_tiles bench/micro/conv2d_tiles.cu
// (-DNDEBUG: CUTLASS's device asserts are calls, across which ptxas serialises the wgmma pipeline)
//   build/conv2d_tiles
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "conv2d/conv2d_sm90.cuh"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "micro_util.cuh"

namespace {

using namespace cute;
using Element = cutlass::bfloat16_t;

template <int M, int N, int CM>
using Config = tigon::conv2d::sm90::Config<Element, cutlass::epilogue::thread::ReLu, M, N, CM>;

struct Layer {
  int n, c, h, w, k, r, pad, stride;
  float cudnn_us;  // the bench's bare cuDNN convolution on an H200, for reference (0: not measured)
};

struct Buffers {
  Element *x, *w, *bias, *y;
};

// Median µs of the configuration on the layer (a launch that CUTLASS refuses prints and returns -1), y written.
template <class C>
float run(const Layer& l, const Buffers& b) {
  tigon::conv2d::Problem p;
  p.n = l.n, p.c = l.c, p.h = l.h, p.w = l.w, p.k = l.k, p.r = l.r, p.s = l.r;
  p.pad_h = p.pad_w = l.pad, p.stride_h = p.stride_w = l.stride, p.relu = true;
  p.x = b.x, p.weight = b.w, p.bias = b.bias, p.y = b.y;
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  const auto args =
      tigon::conv2d::sm90::arguments<C>(p, dev, cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev));
  typename C::Conv op;
  if (op.can_implement(args) != cutlass::Status::kSuccess || op.initialize(args, nullptr) != cutlass::Status::kSuccess)
    return -1.f;
  return time_us([&] { op.run(); }, 30);
}

template <class C>
void row(const char* name, const Layer& l, const Buffers& b, size_t ny, const std::vector<float>& ref) {
  CHECK(cudaMemset(b.y, 0xff, ny * sizeof(Element)));  // NaN: a kernel that writes nothing shows
  const float us = run<C>(l, b);
  if (us < 0) {
    std::printf("  %-22s refused\n", name);
    return;
  }
  const std::vector<float> y = read_floats(b.y, ny);
  float err = 0.f;
  for (size_t i = 0; i < ny; ++i) err = std::fmax(err, std::fabs(y[i] - ref[i]) / (1.f + std::fabs(ref[i])));
  const double flop = 2.0 * ny * l.c * l.r * l.r;
  std::printf("  %-22s %8.1f us  %6.0f TFLOP/s  %5.2fx cuDNN  max rel diff %.1e\n", name, us, flop / us * 1e-6,
              l.cudnn_us > 0 ? us / l.cudnn_us : 0.0, err);
}

}  // namespace

int main() {
  const Layer layers[] = {
      {64, 64, 56, 56, 64, 3, 1, 1, 39.3f},   {64, 128, 28, 28, 128, 3, 1, 1, 28.6f},
      {64, 256, 14, 14, 256, 3, 1, 1, 27.8f}, {64, 512, 7, 7, 512, 3, 1, 1, 28.1f},
      {64, 64, 56, 56, 256, 1, 0, 1, 0.f},    {64, 256, 56, 56, 64, 1, 0, 1, 0.f},
      {64, 1024, 14, 14, 256, 1, 0, 1, 0.f},  {64, 256, 14, 14, 1024, 1, 0, 1, 0.f},
  };
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const Layer& l : layers) {
    const int p = (l.h + 2 * l.pad - l.r) / l.stride + 1;
    const size_t nx = size_t(l.n) * l.h * l.w * l.c, nw = size_t(l.k) * l.r * l.r * l.c, ny = size_t(l.n) * p * p * l.k;
    std::vector<Element> hx(nx), hw(nw), hb(l.k);
    for (auto& v : hx) v = Element(u(rng));
    for (auto& v : hw) v = Element(u(rng) * 0.05f);
    for (auto& v : hb) v = Element(u(rng));
    Buffers b{};
    CHECK(cudaMalloc(&b.x, nx * sizeof(Element)));
    CHECK(cudaMalloc(&b.w, nw * sizeof(Element)));
    CHECK(cudaMalloc(&b.bias, l.k * sizeof(Element)));
    CHECK(cudaMalloc(&b.y, ny * sizeof(Element)));
    CHECK(cudaMemcpy(b.x, hx.data(), nx * sizeof(Element), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b.w, hw.data(), nw * sizeof(Element), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b.bias, hb.data(), l.k * sizeof(Element), cudaMemcpyHostToDevice));
    std::printf("N %d C %d %dx%d K %d R %d pad %d stride %d\n", l.n, l.c, l.h, l.w, l.k, l.r, l.pad, l.stride);
    run<Config<128, 128, 1>>(l, b);
    const std::vector<float> ref = read_floats(b.y, ny);
    row<Config<128, 128, 1>>("128x128", l, b, ny, ref);
    row<Config<128, 64, 1>>("128x64", l, b, ny, ref);
    row<Config<64, 64, 1>>("64x64", l, b, ny, ref);
    row<Config<64, 128, 1>>("64x128", l, b, ny, ref);
    row<Config<128, 128, 2>>("128x128 cluster 2x1", l, b, ny, ref);
    row<Config<128, 64, 2>>("128x64 cluster 2x1", l, b, ny, ref);
    row<Config<128, 256, 1>>("128x256", l, b, ny, ref);
    CHECK(cudaFree(b.x));
    CHECK(cudaFree(b.w));
    CHECK(cudaFree(b.bias));
    CHECK(cudaFree(b.y));
  }
  return 0;
}
