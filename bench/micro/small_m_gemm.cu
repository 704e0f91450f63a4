// Few-token linear layers through cuBLASLt: every heuristic candidate timed, to see how far the first pick (what
// the library takes) is from the best at BERT-base's shapes, where 128 tokens leave most SMs idle with big tiles.
// y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias), bf16 in and out, fp32 accumulation, a 32 MiB workspace (split-K may use it).
// Each candidate is timed as 20 launches replayed from one CUDA graph (device time per launch, as the encoder's
// graphs run them), median of 7. Diagnostic only, not part of the library.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o build/small_m_gemm bench/micro/small_m_gemm.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "micro_util.cuh"

namespace {

constexpr size_t kWorkspace = size_t(32) << 20;
constexpr int kCandidates = 32, kLaunches = 20;

struct Shape {
  int m, k, n;
  const char* what;
};

int32_t config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  int32_t v = -1;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written);
  return v;
}

float graph_us(cudaStream_t s, const std::function<void()>& launch) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kLaunches; ++i) launch();
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  // replayed on the default stream, where time_us records its events
  const float us = time_us([&] { CHECK(cudaGraphLaunch(exec, 0)); }, 7) / kLaunches;
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  return us;
}

}  // namespace

int main() {
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Shape shapes[] = {{128, 768, 2304, "QKV"},        {128, 768, 768, "attention out"},
                          {128, 768, 3072, "FFN up"},     {128, 3072, 768, "FFN down"},
                          {8192, 768, 2304, "QKV"},       {8192, 768, 768, "attention out"},
                          {8192, 768, 3072, "FFN up"},    {8192, 3072, 768, "FFN down"},
                          {512, 768, 2304, "QKV, 1x512"}, {512, 3072, 768, "FFN down, 1x512"}};
  void *x, *w, *y, *bias, *ws;
  CHECK(cudaMalloc(&x, size_t(8192) * 3072 * 2));
  CHECK(cudaMalloc(&w, size_t(3072) * 3072 * 2));
  CHECK(cudaMalloc(&y, size_t(8192) * 3072 * 2));
  CHECK(cudaMalloc(&bias, 3072 * 2));
  CHECK(cudaMalloc(&ws, kWorkspace));
  CHECK(cudaMemset(x, 0, size_t(8192) * 3072 * 2));
  CHECK(cudaMemset(w, 0, size_t(3072) * 3072 * 2));
  CHECK(cudaMemset(bias, 0, 3072 * 2));
  std::printf("bf16, %d SMs; us per launch in a graph; config: tile id, split-K, stages, cluster shape id\n",
              device_sms());
  for (const Shape& s : shapes)
    for (cublasLtEpilogue_t epi : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS}) {
      cublasLtMatmulDesc_t desc;
      cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
      const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n));
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
      const cudaDataType_t bias_type = CUDA_R_16BF;
      if (epi == CUBLASLT_EPILOGUE_BIAS) {
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type));
      }
      // column-major view: y^T [N, M] = w [K, N]^T · x^T [K, M]
      cublasLtMatrixLayout_t la, lb, lc;
      cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.n, s.k);
      cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, s.m, s.k);
      cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, s.m, s.n);
      cublasLtMatmulPreference_t pref;
      cublasLtMatmulPreferenceCreate(&pref);
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace,
                                           sizeof(kWorkspace));
      cublasLtMatmulHeuristicResult_t heur[kCandidates];
      int found = 0;
      cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, kCandidates, heur, &found);
      const float one = 1.f, zero = 0.f;
      float first = -1.f, best = -1.f;
      int best_i = -1;
      std::vector<float> times(found, -1.f);
      for (int i = 0; i < found; ++i) {
        auto launch = [&] {
          cublasLtMatmul(lt, desc, &one, w, la, x, lb, &zero, y, lc, y, lc, &heur[i].algo, ws, kWorkspace, stream);
        };
        launch();
        if (cudaStreamSynchronize(stream) != cudaSuccess || cudaGetLastError() != cudaSuccess) continue;
        times[i] = graph_us(stream, launch);
        if (i == 0) first = times[i];
        if (best < 0 || times[i] < best) best = times[i], best_i = i;
      }
      const double tflops = 2.0 * s.m * s.n * s.k / (best * 1e-6) / 1e12;
      std::printf(
          "%5d x %4d -> %4d %-16s %-7s first %6.2f us, best %6.2f us (#%d of %d, %.0f TFLOP/s), first/best %.2f\n", s.m,
          s.k, s.n, s.what, epi == CUBLASLT_EPILOGUE_BIAS ? "bias" : "bare", first, best, best_i, found, tflops,
          first / best);
      for (int i = 0; i < found && i < 12; ++i)
        std::printf("    #%-2d %6.2f us  tile %3d  splitK %2d  stages %3d  cluster %2d\n", i, times[i],
                    config(heur[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                    config(heur[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                    config(heur[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                    config(heur[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(desc);
    }
  return 0;
}
