// The MoE grouped GEMMs on sm_90: CUTLASS 3's grouped ("pointer array") GEMM, TMA loads into swizzled shared memory,
// wgmma, the persistent cooperative schedule (two consumer warpgroups per 128 x 256 tile, the group scheduler walking
// every expert's tiles), fp32 accumulation, one rounding in the TMA-store epilogue (no source operand).
//
// The per-expert problem sizes, addresses and strides come from a setup kernel that reads the expert offsets on the
// device, and CUTLASS takes them without host-side sizes: nothing synchronises. Instantiated once per dtype
// (moe_gemm_sm90_<dtype>.cu); the three kinds differ only in the operands' major modes.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <type_traits>

#include "common/cuda_check.h"
#include "common/device.h"
#include "common/error.h"
#include "moe/moe_gemm.h"

namespace tigon::moe::sm90 {

using namespace cute;
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per expert
using Row = cutlass::layout::RowMajor;
using Col = cutlass::layout::ColumnMajor;

// The library's plan: 128 x 256 tiles, 64-deep stages, the cooperative schedule, no cluster: on an H200 it ran the six
// GEMMs of a Qwen3-30B-A3B experts layer at 444-617 TFLOP/s against 414-498 for 128 x 128 tiles, ahead of 256 x 128,
// a 2 x 1 cluster and the ping-pong schedule (bench/micro/moe_gemm_tiles.cu varies TileM / TileN / ClusterM /
// Pingpong; docs/performance/moe.md has the table).
template <class Element, class LayoutA, class LayoutB, int TileM = 128, int TileN = 256, int ClusterM = 1,
          bool Pingpong = false>
struct Config {
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<Element>::value;  // 16-byte rows for TMA
  using TileShape = Shape<Int<TileM>, Int<TileN>, _64>;
  using ClusterShape = Shape<Int<ClusterM>, _1, _1>;
  using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<Pingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                              cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, Row*, kAlign, Element, Row*, kAlign,
      EpilogueSchedule, cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA*, kAlign, Element, LayoutB*, kAlign, float,
      TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
};

// A stride whose one dynamic mode (among the first two) is the leading dimension ld; the unit and batch modes are
// static.
template <class Stride>
__device__ Stride leading(int64_t ld) {
  Stride s{};
  if constexpr (std::is_same_v<std::remove_cv_t<std::remove_reference_t<decltype(get<0>(s))>>, int64_t>)
    get<0>(s) = ld;
  else
    get<1>(s) = ld;
  return s;
}

// The per-expert arguments of one grouped GEMM, laid out in the workspace.
template <class C, class Element>
struct Meta {
  typename ProblemShape::UnderlyingProblemShape* shapes;
  const Element** a;
  const Element** b;
  Element** d;
  typename C::StrideA* sa;
  typename C::StrideB* sb;
  typename C::StrideD* sd;
};

inline size_t align256(size_t n) { return (n + 255) / 256 * 256; }

template <class C, class Element>
size_t meta_bytes(int64_t experts) {
  const size_t e = size_t(experts);
  return align256(e * sizeof(typename ProblemShape::UnderlyingProblemShape)) + 3 * align256(e * sizeof(void*)) +
         align256(e * sizeof(typename C::StrideA)) + align256(e * sizeof(typename C::StrideB)) +
         align256(e * sizeof(typename C::StrideD));
}

template <class C, class Element>
Meta<C, Element> meta_at(void* workspace, int64_t experts) {
  const size_t e = size_t(experts);
  char* p = static_cast<char*>(workspace);
  auto take = [&](size_t bytes) {
    char* q = p;
    p += align256(bytes);
    return q;
  };
  Meta<C, Element> m;
  m.shapes = reinterpret_cast<typename ProblemShape::UnderlyingProblemShape*>(
      take(e * sizeof(typename ProblemShape::UnderlyingProblemShape)));
  m.a = reinterpret_cast<const Element**>(take(e * sizeof(void*)));
  m.b = reinterpret_cast<const Element**>(take(e * sizeof(void*)));
  m.d = reinterpret_cast<Element**>(take(e * sizeof(void*)));
  m.sa = reinterpret_cast<typename C::StrideA*>(take(e * sizeof(typename C::StrideA)));
  m.sb = reinterpret_cast<typename C::StrideB*>(take(e * sizeof(typename C::StrideB)));
  m.sd = reinterpret_cast<typename C::StrideD*>(take(e * sizeof(typename C::StrideD)));
  return m;
}

// One thread per expert: its problem size and operand addresses from the offsets. An expert without rows gets an
// empty problem (M = 0: no tiles), so a weight gradient's D_e is left for the caller to zero.
template <class C, class Element, GemmKind kKind>
__global__ void setup(Meta<C, Element> m, GroupedGemm g) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= g.experts) return;
  const int64_t first = g.offsets[e], rows = g.offsets[e + 1] - first;
  const Element* a = static_cast<const Element*>(g.a);
  const Element* b = static_cast<const Element*>(g.b);
  Element* d = static_cast<Element*>(g.d);
  if constexpr (kKind == GemmKind::kWeight) {
    m.shapes[e] = make_shape(rows > 0 ? int(g.m) : 0, int(g.n), rows > 0 ? int(rows) : 8);
    m.a[e] = a + first * g.lda;  // A = (rows of [m_e, m])^T: M-major
    m.b[e] = b + first * g.ldb;  // B [K = m_e, N]: N-major
    m.d[e] = d + e * g.m * g.n;
  } else {
    m.shapes[e] = make_shape(int(rows), int(g.n), int(g.k));
    m.a[e] = a + first * g.lda;
    m.b[e] = b + e * g.n * g.k;
    m.d[e] = d + first * g.ldd;
  }
  m.sa[e] = leading<typename C::StrideA>(g.lda);
  m.sb[e] = leading<typename C::StrideB>(g.ldb);
  m.sd[e] = leading<typename C::StrideD>(g.ldd);
}

template <class C>
typename C::Gemm::Arguments arguments(int64_t experts, typename ProblemShape::UnderlyingProblemShape* shapes,
                                      const void* a, const void* sa, const void* b, const void* sb, void* d,
                                      const void* sd, int sms) {
  using Element = typename C::Gemm::ElementA;
  typename C::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = ProblemShape{int(experts), shapes, nullptr};  // sizes on the device only
  args.mainloop.ptr_A = static_cast<const Element**>(const_cast<void*>(a));
  args.mainloop.dA = static_cast<typename C::StrideA*>(const_cast<void*>(sa));
  args.mainloop.ptr_B = static_cast<const Element**>(const_cast<void*>(b));
  args.mainloop.dB = static_cast<typename C::StrideB*>(const_cast<void*>(sb));
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = static_cast<Element**>(d);
  args.epilogue.dD = static_cast<typename C::StrideD*>(const_cast<void*>(sd));
  args.hw_info.sm_count = sms;
  return args;
}

template <class C, class Element>
size_t workspace_of(int64_t experts, int device) {
  const auto args =
      arguments<C>(experts, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, sm_count(device));
  return meta_bytes<C, Element>(experts) + align256(C::Gemm::get_workspace_size(args));
}

template <class C, class Element, GemmKind kKind>
void run(const GroupedGemm& g, void* workspace, int device, cudaStream_t stream) {
  const Meta<C, Element> m = meta_at<C, Element>(workspace, g.experts);
  const int threads = 128;
  setup<C, Element, kKind><<<unsigned((g.experts + threads - 1) / threads), threads, 0, stream>>>(m, g);
  TIGON_CUDA_CHECK_LAUNCH();
  const auto args = arguments<C>(g.experts, m.shapes, m.a, m.sa, m.b, m.sb, m.d, m.sd, sm_count(device));
  void* cutlass_ws = static_cast<char*>(workspace) + meta_bytes<C, Element>(g.experts);
  typename C::Gemm op;
  if (op.can_implement(args) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_INTERNAL, "CUTLASS cannot run the MoE grouped GEMM with these arguments");
  if (op.initialize(args, cutlass_ws, stream) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_INTERNAL, "CUTLASS could not set up the MoE grouped GEMM");
  if (op.run(stream) != cutlass::Status::kSuccess)
    fail(TIGON_ERROR_CUDA, "CUTLASS could not launch the MoE grouped GEMM");
  TIGON_CUDA_CHECK_LAUNCH();
}

// The three kinds for one dtype: x W^T (A K-major, B K-major), dY W (B N-major), X^T dY (A M-major, B N-major).
template <class Element, int TileM = 128, int TileN = 256, int ClusterM = 1, bool Pingpong = false>
struct Kinds {
  using Forward = Config<Element, Row, Col, TileM, TileN, ClusterM, Pingpong>;
  using Data = Config<Element, Row, Row, TileM, TileN, ClusterM, Pingpong>;
  using Weight = Config<Element, Col, Row, TileM, TileN, ClusterM, Pingpong>;

  static size_t workspace(int64_t experts, int device) {
    const size_t f = workspace_of<Forward, Element>(experts, device), d = workspace_of<Data, Element>(experts, device),
                 w = workspace_of<Weight, Element>(experts, device);
    return f > d ? (f > w ? f : w) : (d > w ? d : w);
  }

  static void gemm(const GroupedGemm& g, void* workspace, int device, cudaStream_t stream) {
    switch (g.kind) {
      case GemmKind::kForward: run<Forward, Element, GemmKind::kForward>(g, workspace, device, stream); break;
      case GemmKind::kData: run<Data, Element, GemmKind::kData>(g, workspace, device, stream); break;
      case GemmKind::kWeight: run<Weight, Element, GemmKind::kWeight>(g, workspace, device, stream); break;
    }
  }
};

}  // namespace tigon::moe::sm90
