// Tile shapes, clusters and schedules of the MoE grouped GEMMs that src/moe/ ships (bf16), timed on the six GEMMs of
// one Qwen3-30B-A3B experts layer at 8192 tokens (H 2048, I 768, 128 experts, top-8: 65536 routed rows, the experts'
// row counts drawn from a skewed router as trained routers are). The library ships 128 x 256 cooperative tiles, no
// cluster; this program is how a change to that is chosen. Each configuration's output is compared with the first's.
// Diagnostic only, not part of the library.
//
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DTIGON_WITH_CUDA
//   -DTIGON_CUDA_ARCHS_STRING=\"90a\" \
//     -Isrc -Iinclude -I<cutlass>/include -o build/moe_gemm_tiles bench/micro/moe_gemm_tiles.cu src/common/device.cpp
//   build/moe_gemm_tiles
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "moe/moe_gemm_sm90.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "micro_util.cuh"

namespace {

using Element = cutlass::bfloat16_t;
using tigon::moe::GemmKind;
using tigon::moe::GroupedGemm;

constexpr int kTokens = 8192, kTopK = 8, kExperts = 128, kHidden = 2048, kInter = 768;
constexpr int64_t kRows = int64_t(kTokens) * kTopK;

// Each token's k distinct experts from a Zipf-like popularity (the busiest expert gets ~4x the mean), as counts.
std::vector<int64_t> skewed_offsets(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<double> weight(kExperts);
  for (int e = 0; e < kExperts; ++e) weight[e] = 1.0 / std::pow(1.0 + e, 0.6);
  std::shuffle(weight.begin(), weight.end(), rng);
  std::vector<int64_t> count(kExperts, 0);
  for (int t = 0; t < kTokens; ++t) {
    std::vector<double> w = weight;
    for (int j = 0; j < kTopK; ++j) {
      std::discrete_distribution<int> pick(w.begin(), w.end());
      const int e = pick(rng);
      ++count[e];
      w[e] = 0;  // distinct experts per token
    }
  }
  std::vector<int64_t> offsets(kExperts + 1, 0);
  std::partial_sum(count.begin(), count.end(), offsets.begin() + 1);
  return offsets;
}

struct Gemm {
  const char* name;
  GemmKind kind;
  int64_t m, n, k;  // n, k fixed for projections (m per expert); m, n fixed for weight gradients (k per expert)
};

// The layer's six GEMMs (forward, then backward as src/moe/moe_cuda.cu runs them).
const Gemm kGemms[] = {
    {"gate_up x W^T", GemmKind::kForward, 0, 2 * kInter, kHidden},
    {"down h W^T", GemmKind::kForward, 0, kHidden, kInter},
    {"dh = g W_d", GemmKind::kData, 0, kInter, kHidden},
    {"d_down g^T (w h)", GemmKind::kWeight, kHidden, kInter, 0},
    {"dx = dgu W_gu", GemmKind::kData, 0, kHidden, 2 * kInter},
    {"d_gate_up dgu^T x", GemmKind::kWeight, 2 * kInter, kHidden, 0},
};

struct Buffers {
  Element *a, *b, *d;
  int64_t* offsets;
  void* workspace;
};

GroupedGemm problem(const Gemm& gm, const Buffers& buf) {
  GroupedGemm g;
  g.kind = gm.kind, g.dtype = tigon::DType::kBFloat16, g.experts = kExperts, g.offsets = buf.offsets;
  g.m = gm.m, g.n = gm.n, g.k = gm.k, g.a = buf.a, g.b = buf.b, g.d = buf.d;
  if (gm.kind == GemmKind::kWeight) {
    g.lda = gm.m, g.ldb = gm.n, g.ldd = gm.n;  // A rows [P, m], B rows [P, n], D_e [m, n]
  } else {
    g.lda = gm.k, g.ldb = gm.kind == GemmKind::kForward ? gm.k : gm.n, g.ldd = gm.n;
  }
  return g;
}

size_t out_elems(const Gemm& gm) {
  return gm.kind == GemmKind::kWeight ? size_t(kExperts) * gm.m * gm.n : size_t(kRows) * gm.n;
}

template <class K>
void row(const char* config, const Buffers& buf, std::vector<std::vector<float>>& ref) {
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  std::printf("%-30s", config);
  for (size_t i = 0; i < sizeof(kGemms) / sizeof(kGemms[0]); ++i) {
    const Gemm& gm = kGemms[i];
    const GroupedGemm g = problem(gm, buf);
    const size_t n = out_elems(gm);
    CHECK(cudaMemset(buf.d, 0xff, n * sizeof(Element)));  // NaN: a tile never written shows
    float us = -1;
    try {
      us = time_us([&] { K::gemm(g, buf.workspace, dev, nullptr); }, 20);
    } catch (const std::exception& e) {
      std::printf(" %12s", "refused");
      continue;
    }
    const double flop = 2.0 * double(kRows) * double(gm.kind == GemmKind::kWeight ? gm.m * gm.n : gm.n * gm.k);
    std::vector<float> out = read_floats(buf.d, n);
    if (ref[i].empty()) ref[i] = out;
    double worst = 0;
    for (size_t q = 0; q < n; q += 97)
      worst = std::max(worst, double(std::fabs(out[q] - ref[i][q])) / (1e-2 + std::fabs(ref[i][q])));
    std::printf(" %6.1f us %4.0f%s", us, flop / us * 1e-6, worst > 2e-2 || std::isnan(worst) ? "!" : " ");
  }
  std::printf("\n");
}

}  // namespace

int main() {
  const std::vector<int64_t> offsets = skewed_offsets(7);
  int64_t busiest = 0;
  for (int e = 0; e < kExperts; ++e) busiest = std::max(busiest, offsets[e + 1] - offsets[e]);
  std::printf("moe_gemm_tiles: %d tokens x top-%d over %d experts (mean %lld rows, busiest %lld), H %d, I %d, bf16\n",
              kTokens, kTopK, kExperts, (long long)(kRows / kExperts), (long long)busiest, kHidden, kInter);
  std::printf("%-30s", "config (us, TFLOP/s; ! differs)");
  for (const Gemm& g : kGemms) std::printf(" %18s", g.name);
  std::printf("\n");

  Buffers buf{};
  const size_t rows_elems =
      size_t(kRows) * 2 * kInter > size_t(kRows) * kHidden ? size_t(kRows) * 2 * kInter : size_t(kRows) * kHidden;
  const size_t weight_elems = size_t(kExperts) * 2 * kInter * kHidden;
  CHECK(cudaMalloc(&buf.a, rows_elems * sizeof(Element)));
  CHECK(cudaMalloc(&buf.b, std::max(rows_elems, weight_elems) * sizeof(Element)));
  CHECK(cudaMalloc(&buf.d, std::max(rows_elems, weight_elems) * sizeof(Element)));
  CHECK(cudaMalloc(&buf.offsets, offsets.size() * sizeof(int64_t)));
  CHECK(cudaMemcpy(buf.offsets, offsets.data(), offsets.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&buf.workspace, 64 << 20));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (Element* p : {buf.a, buf.b}) {
    const size_t n = p == buf.a ? rows_elems : std::max(rows_elems, weight_elems);
    std::vector<Element> h(n);
    for (auto& v : h) v = Element(0.05f * nd(rng));
    CHECK(cudaMemcpy(p, h.data(), n * sizeof(Element), cudaMemcpyHostToDevice));
  }

  using namespace tigon::moe::sm90;
  std::vector<std::vector<float>> ref(sizeof(kGemms) / sizeof(kGemms[0]));
  row<Kinds<Element>>("128x256 coop (shipped)", buf, ref);
  row<Kinds<Element, 128, 128>>("128x128 coop", buf, ref);
  row<Kinds<Element, 256, 128>>("256x128 coop", buf, ref);
  row<Kinds<Element, 128, 128, 2>>("128x128 coop, cluster 2x1", buf, ref);
  row<Kinds<Element, 64, 128, 1, true>>("64x128 pingpong", buf, ref);
  row<Kinds<Element, 64, 256, 1, true>>("64x256 pingpong", buf, ref);
  CHECK(cudaDeviceSynchronize());
  return 0;
}
