// Embedding on the GPU against the CPU reference through the same C API: rows (vector and element paths, NaN for an
// index out of range), the weight gradient in fp32 and in the weight's dtype with long runs of one index, padding,
// int32 indices, and its bits the same on a second run. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "test_util.h"
#include "tigon/embedding.h"

using namespace tigon_test;

namespace {

using Case = std::tuple<DType, DType, int64_t, int64_t, int64_t, bool>;  // dtype, dw dtype, vocab, H, N, int32 idx

class EmbeddingCuda : public ::testing::TestWithParam<Case> {};

TEST_P(EmbeddingCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dtype, gdt, vocab, h, n, i32] = GetParam();
  std::mt19937 rng(unsigned(vocab + h + n));
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = i % 3 == 0 ? 1 : pick(rng);  // index 1: a long run
  if (n > 5) idx[5] = vocab + 3;                                                // out of range
  std::vector<int32_t> idx32(idx.begin(), idx.end());
  const size_t ibytes = size_t(n) * (i32 ? 4 : 8);
  void* gidx = nullptr;
  ASSERT_EQ(cudaMalloc(&gidx, ibytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(gidx, i32 ? static_cast<void*>(idx32.data()) : idx.data(), ibytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  const tigon_dtype idt = i32 ? tigon::dtype::int32 : tigon::dtype::int64;
  const tigon::TensorView hiv(i32 ? static_cast<void*>(idx32.data()) : idx.data(), {n}, idt);
  const tigon::TensorView giv(gidx, {n}, idt, tigon::cuda(0));

  HostMat w(dtype, vocab, h), y(dtype, n, h), dy(dtype, n, h), dw(gdt, vocab, h);
  w.fill_random(rng);
  dy.fill_random(rng);
  y.poison();
  dw.poison();
  HostMat ry = y, rdw = dw;
  ASSERT_EQ(tigon_embedding_fwd(hiv, w.view(), ry.view(), nullptr), TIGON_SUCCESS);
  ASSERT_EQ(tigon_embedding_bwd(hiv, dy.view(), rdw.view(), {2}, nullptr, 0, nullptr), TIGON_SUCCESS);
  DevMat gw(w), gy(y), gdy(dy), gdw(dw);
  ASSERT_EQ(tigon_embedding_fwd(giv, gw.view(), gy.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
  size_t bytes = 0;
  ASSERT_EQ(tigon_embedding_bwd_workspace_size(giv, gw.view(), &bytes), TIGON_SUCCESS);
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, bytes), cudaSuccess);
  ASSERT_EQ(tigon_embedding_bwd(giv, gdy.view(), gdw.view(), {2}, ws, bytes, nullptr), TIGON_SUCCESS)
      << tigon_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const HostMat got_y = gy.fetch();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < h; ++c) {
      if (idx[size_t(i)] < vocab)
        ASSERT_EQ(got_y.at(i, c), ry.at(i, c)) << i << "," << c;
      else
        ASSERT_TRUE(std::isnan(got_y.at(i, c)));
    }
  // fp32 sums in the same order as the reference's fp64 ones: the reference's rounding, and the dtype's
  const double tol = gdt == DType::kFloat32 ? 1e-5 : 2 * rtol_of(gdt);
  const HostMat first = gdw.fetch();
  EXPECT_LE(worst_ratio(first, rdw, tol * std::sqrt(double(n)), tol), 1.0) << "dweight";
  ASSERT_EQ(tigon_embedding_bwd(giv, gdy.view(), gdw.view(), {2}, ws, bytes, nullptr), TIGON_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(worst_ratio(gdw.fetch(), first, 0, 0), 0.0) << "dweight run to run";
  cudaFree(ws);
  cudaFree(gidx);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmbeddingCuda,
    ::testing::Values(Case{DType::kBFloat16, DType::kBFloat16, 32000, 512, 4096, false},  // vectors
                      Case{DType::kBFloat16, DType::kFloat32, 1000, 4096, 700, true},     // int32, wide rows
                      Case{DType::kFloat16, DType::kFloat16, 50, 100, 3000, false},       // elements, few indices
                      Case{DType::kBFloat16, DType::kBFloat16, 100, 264, 9000, false},    // a run over 32+ chunks
                      Case{DType::kFloat32, DType::kFloat32, 7, 33, 20, true},
                      Case{DType::kBFloat16, DType::kFloat32, 300, 64, 0, false}),  // no indices: dW = 0
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return std::string(short_name(std::get<0>(c))) + "_g" + short_name(std::get<1>(c)) + "_" +
             std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_n" +
             std::to_string(std::get<4>(c)) + (std::get<5>(c) ? "_i32" : "");
    });

}  // namespace
