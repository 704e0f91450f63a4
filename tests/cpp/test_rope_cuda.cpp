// RoPE CUDA kernels against the CPU reference, through the same C API: every dtype pair, both layouts and pair
// styles, partial rotary, padded (strided) heads, misaligned bases (scalar path), in place. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "rope_test_util.h"

using namespace tigon_test;

namespace {

// A device copy of a host tensor's whole buffer, optionally `shift` bytes in (one element: still element-aligned, no
// longer 16-byte aligned).
struct Dev {
  Host4& host;
  char* base = nullptr;
  size_t shift;
  Dev(Host4& h, size_t shift_bytes = 0) : host(h), shift(shift_bytes) {
    EXPECT_EQ(cudaMalloc(&base, h.bytes.size() + shift), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(base + shift, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(base); }
  void* ptr() { return base + shift; }
  Host4 fetch() {
    Host4 out = host;
    EXPECT_EQ(cudaMemcpy(out.bytes.data(), ptr(), out.bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

// dtype, fp32 tables, layout, interleaved, B, H, T, D, R, table batch, padded, misaligned x (scalar path)
using Case = std::tuple<DType, bool, int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool>;
class RopeCuda : public ::testing::TestWithParam<Case> {};

TEST_P(RopeCuda, MatchesReferenceForwardBackwardInPlace) {
  SKIP_WITHOUT_GPU();
  const auto [dt, cs32, layout, inter, B, H, T, D, R, Bc, padded, misaligned] = GetParam();
  std::mt19937 rng(31 + B + H + T + D + R);
  const bool bthd = layout == TIGON_ROPE_BTHD;
  const std::array<int64_t, 4> shape = bthd ? std::array<int64_t, 4>{B, T, H, D} : std::array<int64_t, 4>{B, H, T, D};
  // padded: heads sit in a wider buffer (a slice of a fused qkv), with 8 extra elements per row in the tables.
  const std::array<int64_t, 4> pad = padded ? std::array<int64_t, 4>{0, 3, 1, 8} : std::array<int64_t, 4>{0, 0, 0, 0};
  const DType ct = cs32 ? DType::kFloat32 : dt;
  Host4 x(dt, shape, pad), out(dt, shape), cos(ct, {1, Bc, T, R}, padded ? pad : std::array<int64_t, 4>{}),
      sin(ct, {1, Bc, T, R});
  x.fill_random(rng);
  fill_tables(cos, sin, inter, false, rng);
  out.poison();
  for (const bool bwd : {false, true}) {
    const tigon_rope_params p{inter ? 1 : 0, layout};
    auto call = [&](tigon::TensorView& xv, tigon::TensorView& cv, tigon::TensorView& sv, tigon::TensorView& ov) {
      return bwd ? tigon_rope_bwd(xv, cv, sv, ov, p, nullptr) : tigon_rope_fwd(xv, cv, sv, ov, p, nullptr);
    };
    Host4 ref = out;
    {
      auto xv = x.view(), ov = ref.view(), cv = table_view(cos), sv = table_view(sin);
      ASSERT_EQ(call(xv, cv, sv, ov), TIGON_SUCCESS) << tigon_last_error();
    }
    Dev gx(x, misaligned ? size_t(tigon::dtype_bytes(dt)) : 0), gout(out), gcos(cos), gsin(sin);
    auto xv = x.view(gx.ptr(), tigon::cuda(0)), ov = out.view(gout.ptr(), tigon::cuda(0));
    auto cv = table_view(cos, gcos.ptr(), tigon::cuda(0)), sv = table_view(sin, gsin.ptr(), tigon::cuda(0));
    ASSERT_EQ(call(xv, cv, sv, ov), TIGON_SUCCESS) << tigon_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const Host4 got = gout.fetch();
    double worst = 0;
    got.each([&](int64_t a, int64_t b, int64_t c, int64_t d) {
      const double g = got.at(a, b, c, d), r = ref.at(a, b, c, d);
      worst = std::isnan(g) ? INFINITY : std::max(worst, std::fabs(g - r) / (rtol_of(dt) * (1 + std::fabs(r))));
    });
    EXPECT_LE(worst, 1.0) << (bwd ? "backward" : "forward");

    // In place over x's own buffer: the same values, the pass-through dims untouched.
    ASSERT_EQ(call(xv, cv, sv, xv), TIGON_SUCCESS) << tigon_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const Host4 inplace = gx.fetch();
    inplace.each([&](int64_t a, int64_t b, int64_t c, int64_t d) {
      ASSERT_EQ(inplace.at(a, b, c, d), got.at(a, b, c, d))
          << "in place differs at " << a << "," << b << "," << c << "," << d;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RopeCuda,
    ::testing::Values(
        // vector path: Llama shapes, both layouts, bf16/fp16/fp32 tables
        Case{DType::kBFloat16, false, TIGON_ROPE_BHTD, false, 2, 8, 33, 128, 128, 1, false, false},
        Case{DType::kBFloat16, true, TIGON_ROPE_BTHD, false, 2, 4, 17, 128, 128, 2, true, false},
        Case{DType::kFloat16, false, TIGON_ROPE_BTHD, true, 1, 3, 9, 64, 64, 1, false, false},
        Case{DType::kFloat32, true, TIGON_ROPE_BHTD, false, 3, 2, 5, 128, 64, 3, true, false},
        Case{DType::kBFloat16, true, TIGON_ROPE_BHTD, true, 2, 2, 7, 96, 32, 1, true, false},
        Case{DType::kFloat16, true, TIGON_ROPE_BHTD, false, 1, 1, 1, 256, 256, 1, false, false},
        // scalar path: odd sizes, tiny heads, misaligned base, huge head dim (threads loop over units)
        Case{DType::kBFloat16, false, TIGON_ROPE_BHTD, false, 1, 2, 7, 8, 8, 1, false, false},
        Case{DType::kFloat16, true, TIGON_ROPE_BTHD, false, 2, 3, 7, 9, 6, 2, true, false},
        Case{DType::kBFloat16, false, TIGON_ROPE_BTHD, true, 1, 5, 3, 10, 2, 1, false, false},
        Case{DType::kFloat32, true, TIGON_ROPE_BHTD, true, 2, 2, 4, 128, 128, 1, false, true},
        Case{DType::kBFloat16, true, TIGON_ROPE_BTHD, false, 1, 2, 3, 128, 64, 1, true, true},
        Case{DType::kFloat32, true, TIGON_ROPE_BHTD, false, 1, 1, 2, 1030, 1024, 1, false, false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return std::string(short_name(std::get<0>(c))) + (std::get<1>(c) ? "_cs32" : "_csx") +
             (std::get<2>(c) ? "_bthd" : "_bhtd") + (std::get<3>(c) ? "_inter" : "_half") + "_T" +
             std::to_string(std::get<6>(c)) + "_D" + std::to_string(std::get<7>(c)) + "_R" +
             std::to_string(std::get<8>(c)) + "_Bc" + std::to_string(std::get<9>(c)) +
             (std::get<10>(c) ? "_padded" : "") + (std::get<11>(c) ? "_misaligned" : "");
    });

// q and k in one launch (different head counts and paddings) equal two reference calls; also in place.
using QkCase = std::tuple<DType, int, bool, int64_t>;  // dtype, layout, interleaved, rotary dim (D = 128)
class RopeQkCuda : public ::testing::TestWithParam<QkCase> {};

TEST_P(RopeQkCuda, OneLaunchForQAndKMatchesReference) {
  SKIP_WITHOUT_GPU();
  const auto [dt, layout, inter, R] = GetParam();
  const int64_t B = 2, Hq = 5, Hk = 2, T = 37, D = 128;
  const bool bthd = layout == TIGON_ROPE_BTHD;
  auto shape = [&](int64_t H) {
    return bthd ? std::array<int64_t, 4>{B, T, H, D} : std::array<int64_t, 4>{B, H, T, D};
  };
  std::mt19937 rng(7 + R);
  Host4 q(dt, shape(Hq), {0, 1, 0, 0}), k(dt, shape(Hk)), qo(dt, shape(Hq)), ko(dt, shape(Hk), {0, 0, 1, 8});
  Host4 cos(DType::kFloat32, {1, 1, T, R}), sin(DType::kFloat32, {1, 1, T, R});
  q.fill_random(rng);
  k.fill_random(rng);
  fill_tables(cos, sin, inter, true, rng);
  qo.poison();
  ko.poison();
  for (const bool bwd : {false, true}) {
    const tigon_rope_params p{inter ? 1 : 0, layout};
    Host4 rq = qo, rk = ko;
    {
      auto cv = table_view(cos), sv = table_view(sin);
      auto qv = q.view(), kv = k.view(), rqv = rq.view(), rkv = rk.view();
      ASSERT_EQ(bwd ? tigon_rope_bwd(qv, cv, sv, rqv, p, nullptr) : tigon_rope_fwd(qv, cv, sv, rqv, p, nullptr),
                TIGON_SUCCESS)
          << tigon_last_error();
      ASSERT_EQ(bwd ? tigon_rope_bwd(kv, cv, sv, rkv, p, nullptr) : tigon_rope_fwd(kv, cv, sv, rkv, p, nullptr),
                TIGON_SUCCESS)
          << tigon_last_error();
    }
    Dev gq(q), gk(k), gqo(qo), gko(ko), gcos(cos), gsin(sin);
    auto qv = q.view(gq.ptr(), tigon::cuda(0)), kv = k.view(gk.ptr(), tigon::cuda(0));
    auto qov = qo.view(gqo.ptr(), tigon::cuda(0)), kov = ko.view(gko.ptr(), tigon::cuda(0));
    auto cv = table_view(cos, gcos.ptr(), tigon::cuda(0)), sv = table_view(sin, gsin.ptr(), tigon::cuda(0));
    auto call = [&](tigon::TensorView& a, tigon::TensorView& b, tigon::TensorView& ao, tigon::TensorView& bo) {
      return bwd ? tigon_rope_qk_bwd(a, b, cv, sv, ao, bo, p, nullptr)
                 : tigon_rope_qk_fwd(a, b, cv, sv, ao, bo, p, nullptr);
    };
    ASSERT_EQ(call(qv, kv, qov, kov), TIGON_SUCCESS) << tigon_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (auto [dev, ref, name] : {std::tuple<Dev*, Host4*, const char*>{&gqo, &rq, "q"}, {&gko, &rk, "k"}}) {
      const Host4 got = dev->fetch();
      double worst = 0;
      got.each([&, ref = ref](int64_t a, int64_t b, int64_t c, int64_t d) {
        const double g = got.at(a, b, c, d), r = ref->at(a, b, c, d);
        worst = std::isnan(g) ? INFINITY : std::max(worst, std::fabs(g - r) / (rtol_of(dt) * (1 + std::fabs(r))));
      });
      EXPECT_LE(worst, 1.0) << name << (bwd ? " backward" : " forward");
    }
    ASSERT_EQ(call(qv, kv, qv, kv), TIGON_SUCCESS) << tigon_last_error();  // in place: the same values
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (auto [in, out, name] : {std::tuple<Dev*, Dev*, const char*>{&gq, &gqo, "q"}, {&gk, &gko, "k"}}) {
      const Host4 a = in->fetch(), b = out->fetch();
      a.each([&](int64_t i, int64_t j, int64_t l, int64_t m) {
        ASSERT_EQ(a.at(i, j, l, m), b.at(i, j, l, m)) << name << " in place differs";
      });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RopeQkCuda,
                         ::testing::Values(QkCase{DType::kBFloat16, TIGON_ROPE_BHTD, false, 128},
                                           QkCase{DType::kBFloat16, TIGON_ROPE_BTHD, false, 64},
                                           QkCase{DType::kFloat16, TIGON_ROPE_BHTD, true, 128},
                                           QkCase{DType::kFloat32, TIGON_ROPE_BTHD, true, 32}),
                         [](const ::testing::TestParamInfo<QkCase>& info) {
                           const QkCase& c = info.param;
                           return std::string(short_name(std::get<0>(c))) + (std::get<1>(c) ? "_bthd" : "_bhtd") +
                                  (std::get<2>(c) ? "_inter" : "_half") + "_R" + std::to_string(std::get<3>(c));
                         });

}  // namespace
