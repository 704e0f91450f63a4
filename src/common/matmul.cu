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
    case DType::kInt8: return CUDA_R_8I;
    case DType::kInt32: return CUDA_R_32I;
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
using Key = std::array<int64_t, 23>;
enum KeyField { kAlignA = 13, kAlignB = 14, kAlignD = 15, kAlignC = 22 };

// ok = false: cuBLASLt offered no algorithm (status says why); kept, so the next call does not ask again.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = true;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
};

cublasLtEpilogue_t epilogue_of(const Matmul& mm) {
  const bool bias = mm.bias != nullptr;
  switch (mm.act) {
    case Epilogue::kRelu: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Epilogue::kGelu:
      if (mm.aux) return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

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
  const bool imma = mm.ab == DType::kInt8;  // int8 x int8 -> int32: integer accumulation and alpha / beta
  TIGON_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, imma ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                                              imma ? CUDA_R_32I : CUDA_R_32F));
  set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(mm.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(mm.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  const cublasLtEpilogue_t epilogue = epilogue_of(mm);
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epilogue));
  // The pointers' alignments count in the choice below; each call sets its own pointers again.
  if (mm.bias) set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, mm.bias);
  if (mm.aux) {
    set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, mm.aux);
    set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(mm.ldaux));
  }
  const cudaDataType_t ab = cuda_type(mm.ab), d = cuda_type(mm.d);
  TIGON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, mm.trans_a ? mm.k : mm.m, mm.trans_a ? mm.m : mm.k, mm.lda));
  TIGON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, mm.trans_b ? mm.n : mm.k, mm.trans_b ? mm.k : mm.n, mm.ldb));
  TIGON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, d, mm.m, mm.n, mm.ldd));
  if (mm.c) TIGON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, d, mm.m, mm.n, mm.ldc));
  const cublasLtMatrixLayout_t c_layout = mm.c ? p.c : p.d;

  cublasLtMatmulPreference_t pref = nullptr;
  TIGON_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes;
  const uint32_t align[4] = {uint32_t(key[kAlignA]), uint32_t(key[kAlignB]), uint32_t(key[mm.c ? kAlignC : kAlignD]),
                             uint32_t(key[kAlignD])};
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align[0], 4);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align[1], 4);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align[2], 4);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align[3], 4);
  // Up to kMaxCandidates of the heuristic's candidates, best first; choose() takes one.
  std::array<cublasLtMatmulHeuristicResult_t, kMaxCandidates> results{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.a, p.b, c_layout, p.d, pref, kMaxCandidates, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    p.ok = false;
    p.status = st == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_NOT_SUPPORTED : st;
  } else {
    p.algo = results[choose(mm, results.data(), found)].algo;
  }
  return cache().plans.emplace(key, p).first->second;
}

Key key_of(const Matmul& mm, int device, size_t workspace_bytes, const void* workspace) {
  const int64_t ab_bytes = dtype_bytes(mm.ab), d_bytes = dtype_bytes(mm.d);
  Key key = {device,
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
             alignment(mm.dst, mm.ldd * d_bytes),
             int64_t(workspace_bytes),
             alignment(workspace),
             int64_t(mm.act),
             mm.aux ? mm.ldaux : -1,
             mm.aux ? alignment(mm.aux, mm.ldaux * d_bytes) : 0,
             mm.c ? mm.ldc : -1,
             mm.c ? alignment(mm.c, mm.ldc * d_bytes) : 0};
  static_assert(kAlignC == 22, "kAlignC names the last field");
  return key;
}

// The product, or false where cuBLASLt has no algorithm for it (the plan is made, or found, first).
bool run(const Matmul& mm, void* workspace, size_t workspace_bytes, cudaStream_t stream, bool must) {
  if (mm.m == 0 || mm.n == 0) return true;
  if (mm.k == 0) {  // an empty sum: D stays (accumulate) or becomes zero (no epilogue: callers give k > 0 with one)
    if (mm.act != Epilogue::kNone || mm.c) fail(TIGON_ERROR_INTERNAL, "matmul: an epilogue or C with k = 0");
    if (!mm.accumulate)
      TIGON_CUDA_CHECK(cudaMemset2DAsync(mm.dst, size_t(mm.ldd) * dtype_bytes(mm.d), 0,
                                         size_t(mm.m) * dtype_bytes(mm.d), size_t(mm.n), stream));
    return true;
  }
  if (mm.ab == DType::kInt8 && (mm.d != DType::kInt32 || mm.act != Epilogue::kNone || mm.bias || mm.c))
    fail(TIGON_ERROR_INTERNAL, "matmul: int8 A and B take an int32 D and no epilogue or C");
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  const cublasLtHandle_t h = handle(device);
  const Plan& p = plan_for(key_of(mm, device, workspace_bytes, workspace), mm, h, workspace_bytes);
  if (!p.ok) {
    if (!must) return false;
    fail(TIGON_ERROR_NOT_SUPPORTED, "cuBLASLt has no algorithm for ", dtype_name(mm.ab), " -> ", dtype_name(mm.d),
         " m=", mm.m, " n=", mm.n, " k=", mm.k, " (lda ", mm.lda, ", ldb ", mm.ldb, ", ldd ", mm.ldd, ", epilogue ",
         int(epilogue_of(mm)), "): ", cublasLtGetStatusString(p.status));
  }
  if (mm.bias) set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, mm.bias);
  if (mm.aux) set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, mm.aux);
  const float alpha_f = 1.f, beta_f = mm.accumulate || mm.c ? 1.f : 0.f;
  const int32_t alpha_i = 1, beta_i = mm.accumulate || mm.c ? 1 : 0;  // int8 A and B: int32 scaling
  const bool imma = mm.ab == DType::kInt8;
  const void* alpha = imma ? static_cast<const void*>(&alpha_i) : &alpha_f;
  const void* beta = imma ? static_cast<const void*>(&beta_i) : &beta_f;
  const void* c = mm.c ? mm.c : mm.dst;
  const cublasLtMatrixLayout_t c_layout = mm.c ? p.c : p.d;
  TIGON_CUBLAS_CHECK(cublasLtMatmul(h, p.desc, alpha, mm.a, p.a, mm.b, p.b, beta, c, c_layout, mm.dst, p.d, &p.algo,
                                    workspace, workspace_bytes, stream));
  return true;
}

}  // namespace

void matmul(const Matmul& mm, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  run(mm, workspace, workspace_bytes, stream, true);
}

bool try_matmul(const Matmul& mm, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return run(mm, workspace, workspace_bytes, stream, false);
}

}  // namespace tigon::cuda
