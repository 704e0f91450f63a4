// cuDNN's own fused convolution, y = ReLU(conv(x, w) + bias [+ z]), against its bare convolution, on ResNet-50's
// layers at batch 64 (bf16, channels-last): whether cuDNN's fusion runs at the bare convolution's speed, the bar the
// library's CUTLASS kernel misses by 7-8% (docs/performance/conv2d.md). Two ways in: the legacy API
// (cudnnConvolutionBiasActivationForward; every algorithm it lists is tried, the fastest shown, its output checked
// against the bare convolution + bias + z + ReLU on the host) and the graph API (convolution -> add bias [-> add z] ->
// ReLU as one operation graph; the first sixteen engine configurations of heuristics modes A and B are tried, the
// first that runs and the fastest shown).
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
#include <stdexcept>
#include <string>
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

// ---- the graph (backend) API ----

// A failing call throws: the graph's attempt is reported and the program goes on to the next one.
void check(cudnnStatus_t st, const char* what) {
  if (st != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(st));
}
#define TRY(x) check((x), #x)

cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t) {
  cudnnBackendDescriptor_t d;
  TRY(cudnnBackendCreateDescriptor(t, &d));
  return d;
}
template <class V>
void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
         const V* v) {
  TRY(cudnnBackendSetAttribute(d, a, t, n, v));
}

// A tensor with dims in NCHW order and channels-last strides.
cudnnBackendDescriptor_t tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w, cudnnDataType_t dt,
                                bool is_virtual) {
  cudnnBackendDescriptor_t d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c}, align = 16;
  set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  TRY(cudnnBackendFinalize(d));
  return d;
}

cudnnBackendDescriptor_t pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                   cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  TRY(cudnnBackendFinalize(pw));
  cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  TRY(cudnnBackendFinalize(op));
  return op;
}

enum Uid : int64_t { kX = 1, kW, kB, kZ, kY, kConv, kAdd, kAdd2 };

// Median µs of the heuristic's first engine configuration that runs the graph (stage 0: bare convolution into y; 1:
// + bias, ReLU; 2: + bias, + z, ReLU) and of the fastest of its first 16 (first, best; -1 when none runs).
struct GraphTimes {
  float first = -1.f, best = -1.f;
  float first0 = -1.f, best0 = -1.f;  // among the configurations that need no workspace
  int best_index = -1, tried = 0;
};

GraphTimes graph_us_or_throw(cudnnHandle_t handle, const Layer& l, int p, int stage, cudnnBackendHeurMode_t heur_mode,
                             T* x, T* w, T* b, T* z, T* y, void* ws, size_t ws_bytes) {
  const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t tx = tensor(kX, l.n, l.c, l.h, l.w, bf16, false);
  cudnnBackendDescriptor_t tw = tensor(kW, l.k, l.c, l.r, l.r, bf16, false);
  cudnnBackendDescriptor_t ty = tensor(kY, l.n, l.k, p, p, bf16, false);
  cudnnBackendDescriptor_t tconv = stage == 0 ? ty : tensor(kConv, l.n, l.k, p, p, f32, true);
  cudnnBackendDescriptor_t conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2, one2[2] = {1, 1}, pad2[2] = {l.pad, l.pad};
  set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
  set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2);
  set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2);
  set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad2);
  set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad2);
  TRY(cudnnBackendFinalize(conv));
  cudnnBackendDescriptor_t conv_op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1.f, beta = 0.f;
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tconv);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  TRY(cudnnBackendFinalize(conv_op));
  std::vector<cudnnBackendDescriptor_t> ops = {conv_op};
  std::vector<int64_t> uids = {kX, kW, kY};
  std::vector<void*> ptrs = {x, w, y};
  if (stage > 0) {
    cudnnBackendDescriptor_t tb = tensor(kB, 1, l.k, 1, 1, bf16, false);
    cudnnBackendDescriptor_t tadd = tensor(kAdd, l.n, l.k, p, p, f32, true);
    ops.push_back(pointwise(CUDNN_POINTWISE_ADD, tconv, tb, tadd));
    uids.push_back(kB), ptrs.push_back(b);
    cudnnBackendDescriptor_t last = tadd;
    if (stage == 2) {
      cudnnBackendDescriptor_t tz = tensor(kZ, l.n, l.k, p, p, bf16, false);
      cudnnBackendDescriptor_t tadd2 = tensor(kAdd2, l.n, l.k, p, p, f32, true);
      ops.push_back(pointwise(CUDNN_POINTWISE_ADD, tadd, tz, tadd2));
      uids.push_back(kZ), ptrs.push_back(z);
      last = tadd2;
    }
    ops.push_back(pointwise(CUDNN_POINTWISE_RELU_FWD, last, nullptr, ty));
  }
  cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
  TRY(cudnnBackendFinalize(graph));
  cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
  TRY(cudnnBackendFinalize(heur));
  constexpr int kConfigs = 16;
  cudnnBackendDescriptor_t cfgs[kConfigs];
  for (auto& c : cfgs) c = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t n_cfg = 0;
  TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, kConfigs, &n_cfg,
                               cfgs));
  GraphTimes t;
  for (int64_t i = 0; i < n_cfg; ++i) {
    cudnnBackendDescriptor_t plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
    int64_t need = 0, got = 0;
    if (cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &need) ==
            CUDNN_STATUS_SUCCESS &&
        size_t(need) <= ws_bytes) {
      cudnnBackendDescriptor_t pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
      set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
      set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
      TRY(cudnnBackendFinalize(pack));
      if (cudnnBackendExecute(handle, plan, pack) == CUDNN_STATUS_SUCCESS && cudaDeviceSynchronize() == cudaSuccess) {
        const float us = time_us([&] { cudnnBackendExecute(handle, plan, pack); });
        if (t.first < 0) t.first = us;
        if (t.best < 0 || us < t.best) t.best = us, t.best_index = int(i);
        if (need == 0 && t.first0 < 0) t.first0 = us;
        if (need == 0 && (t.best0 < 0 || us < t.best0)) t.best0 = us;
        ++t.tried;
      }
      cudnnBackendDestroyDescriptor(pack);
    }
    cudnnBackendDestroyDescriptor(plan);
  }
  // descriptors of the graph are left to the process's end: a diagnostic's few hundred small objects
  return t;
}

GraphTimes graph_us(cudnnHandle_t handle, const Layer& l, int p, int stage, cudnnBackendHeurMode_t mode, T* x, T* w,
                    T* b, T* z, T* y, void* ws, size_t ws_bytes) {
  try {
    return graph_us_or_throw(handle, l, p, stage, mode, x, w, b, z, y, ws, ws_bytes);
  } catch (const std::exception& e) {
    std::printf("  (graph stage %d: %s)\n", stage, e.what());
    return {};
  }
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
    const char* stages[3] = {"graph: bare convolution", "graph: conv + bias + ReLU", "graph: conv + bias + z + ReLU"};
    for (int stage = 0; stage < 3; ++stage)
      for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B}) {
        const GraphTimes t = graph_us(handle, l, p, stage, mode, x, w, b, z, y, ws, ws_bytes);
        if (t.tried == 0)
          std::printf("  %-34s mode %c: no engine configuration ran\n", stages[stage],
                      mode == CUDNN_HEUR_MODE_A ? 'A' : 'B');
        else
          std::printf(
              "  %-34s mode %c: first %7.1f us, best %7.1f us (#%d of %d), no workspace: first %7.1f best %7.1f"
              "  %5.2fx legacy bare\n",
              stages[stage], mode == CUDNN_HEUR_MODE_A ? 'A' : 'B', t.first, t.best, t.best_index, t.tried, t.first0,
              t.best0, t.best / bare.us);
      }
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
