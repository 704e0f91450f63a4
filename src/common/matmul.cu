#include "common/matmul.h"

#include <cublasLt.h>

#include <array>
#include <map>

#include "common/cuda_check.h"
#include "common/error.h"

#define TIGON_CUBLAS_CHECK(call)                                                               \
  do {                                                                                         \
    cublasStatus_t tigon_st_ = (call);                                                         \
    if (tigon_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::tigon::fail(TIGON_ERROR_CUDA, #call, " failed: ", cublasLtGetStatusString(tigon_st_)); \
  } while (0)

namespace tigon::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: fail(TIGON_ERROR_INTERNAL, "matmul: unexpected dtype ", dtype_name(t));
  }
}

// The largest power of two (up to cuBLASLt's 256) that divides the address and, for a matrix, the bytes between its
// columns: every column starts that aligned, so kernels that need more (16-byte TMA rows) are excluded. A hidden size
// that is not a multiple of 8 (16-bit) or 4 (fp32) thus gets cuBLASLt's unaligned kernels instead of a failed launch.
uint32_t alignment(const void* p, int64_t ld_bytes = 0) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p) | uintptr_t(ld_bytes);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// How many of cuBLASLt's heuristic candidates choose() looks at.
constexpr int kMaxCandidates = 8;

int32_t tile_of(const cublasLtMatmulAlgo_t& algo) {
  int32_t tile = -1;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &written);
  return tile;
}

// Which of the heuristic's candidates a product takes. The first, except where a measurement says otherwise:
//  - A product into an fp32 D (fused linear + CE's dW, written over the first token chunk and added into, beta = 1,
//    over the rest) takes the first candidate with 256 x 128 tiles. On an H200, at 16384 x 4096 x 128256 in
//    5462-token chunks, the heuristic's first pick (320 x 128 tiles) took 8.36-8.63 ms per chunk, its third (256 x 128)
//    8.21-8.31 ms: the 8-byte fp32 epilogue favours the smaller tile. No
//    256 x 128 candidate: the first.
int choose(const Matmul& mm, const cublasLtMatmulHeuristicResult_t* results, int found) {
  if (mm.d == DType::kFloat32 && mm.ab != DType::kFloat32)
    for (int i = 0; i < found; ++i)
      if (tile_of(results[i].algo) == CUBLASLT_MATMUL_TILE_256x128) return i;
  return 0;
}

// Everything the algorithm choice depends on.
using Key = std::array<int64_t, 18>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct Cache {
  std::map<int, cublasLtHandle_t> handles;  // per device
  std::map<Key, Plan> plans;
};

// Per thread, so no locks, and never destroyed: destroying cuBLASLt objects at thread or process exit can run after
// the CUDA driver has shut down. The objects are a few kB per distinct GEMM shape.
Cache& cache() {
  static thread_local Cache* c = new Cache;
  return *c;
}

cublasLtHandle_t handle(int device) {
  cublasLtHandle_t& h = cache().handles[device];
  if (h == nullptr) TIGON_CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

template <class V>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  TIGON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

const Plan& plan_for(const Key& key, const Matmul& mm, cublasLtHandle_t h, size_t workspace_bytes) {
  auto it = cache().plans.find(key);
  if (it != cache().plans.end()) return it->second;
  Plan p;
  TIGON_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(mm.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(mm.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  if (mm.bias) {
    set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS));
    set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, mm.bias);  // its alignment counts in the choice below
  }
  const cudaDataType_t ab = cuda_type(mm.ab), d = cuda_type(mm.d);
  TIGON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, mm.trans_a ? mm.k : mm.m, mm.trans_a ? mm.m : mm.k, mm.lda));
  TIGON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, mm.trans_b ? mm.n : mm.k, mm.trans_b ? mm.k : mm.n, mm.ldb));
  TIGON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, d, mm.m, mm.n, mm.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  TIGON_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes;
  const uint32_t align[4] = {uint32_t(key[13]), uint32_t(key[14]), uint32_t(key[15]), uint32_t(key[15])};
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align[0], 4);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align[1], 4);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align[2], 4);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align[3], 4);
  // Up to kMaxCandidates of the heuristic's candidates, best first; choose() takes one.
  std::array<cublasLtMatmulHeuristicResult_t, kMaxCandidates> results{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.a, p.b, p.d, p.d, pref, kMaxCandidates, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    fail(TIGON_ERROR_NOT_SUPPORTED, "cuBLASLt has no algorithm for ", dtype_name(mm.ab), " -> ", dtype_name(mm.d),
         " m=", mm.m, " n=", mm.n, " k=", mm.k, " (lda ", mm.lda, ", ldb ", mm.ldb, ", ldd ", mm.ldd,
         "): ", cublasLtGetStatusString(st));
  p.algo = results[choose(mm, results.data(), found)].algo;
  return cache().plans.emplace(key, p).first->second;
}

}  // namespace

void matmul(const Matmul& mm, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (mm.m == 0 || mm.n == 0) return;
  if (mm.k == 0) {  // an empty sum: D stays (accumulate) or becomes zero
    if (!mm.accumulate)
      TIGON_CUDA_CHECK(cudaMemset2DAsync(mm.dst, size_t(mm.ldd) * dtype_bytes(mm.d), 0,
                                         size_t(mm.m) * dtype_bytes(mm.d), size_t(mm.n), stream));
    return;
  }
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t ab_bytes = dtype_bytes(mm.ab);
  const Key key = {device,
                   int64_t(mm.ab),
                   int64_t(mm.d),
                   mm.trans_a,
                   mm.trans_b,
                   mm.m,
                   mm.n,
                   mm.k,
                   mm.lda,
                   mm.ldb,
                   mm.ldd,
                   mm.accumulate,
                   mm.bias ? alignment(mm.bias) : 0,
                   alignment(mm.a, mm.lda * ab_bytes),
                   alignment(mm.b, mm.ldb * ab_bytes),
                   alignment(mm.dst, mm.ldd * dtype_bytes(mm.d)),
                   int64_t(workspace_bytes),
                   alignment(workspace)};
  const cublasLtHandle_t h = handle(device);
  const Plan& p = plan_for(key, mm, h, workspace_bytes);
  if (mm.bias) set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, mm.bias);
  const float alpha = 1.f, beta = mm.accumulate ? 1.f : 0.f;
  TIGON_CUBLAS_CHECK(cublasLtMatmul(h, p.desc, &alpha, mm.a, p.a, mm.b, p.b, &beta, mm.dst, p.d, mm.dst, p.d, &p.algo,
                                    workspace, workspace_bytes, stream));
}

}  // namespace tigon::cuda
