// Embedding's CPU reference (through the C API) against naive loops: rows, NaN for an index out of range, the weight
// gradient with repeated indices, padding and out-of-range positions, int32 indices; and C API validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tigon/embedding.h"

using namespace tigon_test;
namespace dt = tigon::dtype;

namespace {

TEST(EmbeddingReference, RowsAndGradient) {
  std::mt19937 rng(3);
  const int64_t vocab = 7, h = 5;
  std::vector<int64_t> idx{2, 0, 2, 6, 9, 2, 3};  // 9 is out of range
  std::vector<int32_t> idx32(idx.begin(), idx.end());
  const int64_t n = int64_t(idx.size());
  HostMat w(DType::kBFloat16, vocab, h), y(DType::kBFloat16, n, h), dy(DType::kBFloat16, n, h);
  HostMat dw(DType::kFloat32, vocab, h, h + 2);
  w.fill_random(rng);
  dy.fill_random(rng);
  y.poison();
  dw.poison();
  const tigon::TensorView iv(idx.data(), {n}, dt::int64), iv32(idx32.data(), {n}, dt::int32);
  ASSERT_EQ(tigon_embedding_fwd(iv, w.view(), y.view(), nullptr), TIGON_SUCCESS) << tigon_last_error();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < h; ++c) {
      if (idx[size_t(i)] < vocab)
        EXPECT_EQ(y.at(i, c), w.at(idx[size_t(i)], c));
      else
        EXPECT_TRUE(std::isnan(y.at(i, c)));
    }
  size_t bytes = 1;
  ASSERT_EQ(tigon_embedding_bwd_workspace_size(iv, w.view(), &bytes), TIGON_SUCCESS);
  EXPECT_EQ(bytes, 0u);
  for (const auto& view : {iv, iv32}) {
    ASSERT_EQ(tigon_embedding_bwd(view, dy.view(), dw.view(), {0}, nullptr, 0, nullptr), TIGON_SUCCESS)
        << tigon_last_error();
    for (int64_t v = 0; v < vocab; ++v)
      for (int64_t c = 0; c < h; ++c) {
        double want = 0;
        for (int64_t i = 0; i < n; ++i)
          if (idx[size_t(i)] == v && v != 0) want += dy.at(i, c);
        EXPECT_NEAR(dw.at(v, c), want, 1e-6) << v << "," << c;
      }
  }
}

void expect_error(tigon_status_t st, const char* arg) {
  EXPECT_EQ(st, TIGON_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tigon_last_error()).find(std::string("argument '") + arg + "'"), std::string::npos)
      << tigon_last_error();
}

TEST(EmbeddingApi, RejectsBadArguments) {
  std::vector<int64_t> idx{1, 2};
  std::vector<float> fidx{1.f, 2.f};
  const tigon::TensorView iv(idx.data(), {2}, dt::int64), fv(fidx.data(), {2}, dt::float32);
  HostMat w(DType::kFloat32, 4, 3), y(DType::kFloat32, 2, 3), y4(DType::kFloat32, 2, 4), h(DType::kFloat16, 2, 3);
  HostMat i32(DType::kInt32, 4, 3), dw16(DType::kFloat16, 4, 3);
  expect_error(tigon_embedding_fwd(nullptr, w.view(), y.view(), nullptr), "indices");
  expect_error(tigon_embedding_fwd(fv, w.view(), y.view(), nullptr), "indices");
  expect_error(tigon_embedding_fwd(iv, i32.view(), y.view(), nullptr), "weight");
  expect_error(tigon_embedding_fwd(iv, w.view(), y4.view(), nullptr), "y");
  expect_error(tigon_embedding_fwd(iv, w.view(), h.view(), nullptr), "y");
  expect_error(tigon_embedding_bwd(iv, y4.view(), w.view(), {-1}, nullptr, 0, nullptr), "dy");
  expect_error(tigon_embedding_bwd(iv, y.view(), dw16.view(), {-1}, nullptr, 0, nullptr), "dweight");
  expect_error(tigon_embedding_bwd(iv, y.view(), w.view(), {4}, nullptr, 0, nullptr), "params.padding_idx");
  expect_error(tigon_embedding_bwd(iv, y.view(), w.view(), {-2}, nullptr, 0, nullptr), "params.padding_idx");
  expect_error(tigon_embedding_bwd_workspace_size(iv, w.view(), nullptr), "bytes");
}

}  // namespace
