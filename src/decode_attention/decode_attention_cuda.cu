// Decode attention CUDA path: the plan (tensor-core or CUDA-core kernel, query rows per unit, cache chunks), dtype
// and head-dim dispatch, combine; and the cache append. The tensor-core kernel, the combine and the append launch as
// programmatic dependents of the kernel before them: each is resident and waiting when the one ahead ends, instead of
// launching then.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/cluster_launch.h"
#include "common/cuda_check.h"
#include "common/cuda_types.cuh"
#include "common/device.h"
#include "decode_attention/decode_attention.h"
#include "decode_attention/decode_attention_kernels.cuh"
#include "decode_attention/decode_attention_mma.cuh"

namespace tigon::decode_attention {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// From the shapes and the multiprocessor count alone: never from cache_seqlens, which only the device reads.
struct Plan {
  int rows = 1;  // query rows per block (CUDA cores: a power of two up to kMaxRows) or per warp (tensor cores: 16)
  int64_t row_blocks = 1;
  int64_t splits = 1, chunk = 1;
};

// CUDA cores: blocks wanted per multiprocessor (a block keeps 128 lanes x 8 loads of 16 bytes in flight, and about 4
// are resident), and the shortest chunk (every key slot busy for a few steps of 4 keys).
constexpr int64_t kTargetBlocksPerSm = 4;
constexpr int64_t kMinChunk = 256;
// Tensor cores: warps in flight per multiprocessor (two blocks of 4 warps; 96 KB of shared memory each at D 128), and
// the shortest chunk: 8 tiles, so a warp's 3-stage ring runs full for most of its chunk. Shorter chunks (64 keys at
// batch 1, 8k context) spent as long filling the ring and combining the partials as streaming the keys.
constexpr int64_t kMmaWarpsPerSm = 2 * mma::kWarps;
constexpr int64_t kMmaMinChunk = 8 * mma::kTileKeys;

bool uses_mma(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

Plan make_plan(const Shape& s, int sms) {
  Plan p;
  const int64_t rows = s.group() * s.tq;
  if (uses_mma(s.head_dim)) {  // one wave of warps over every (sequence, head, row block, chunk)
    p.rows = mma::kRows;
    p.row_blocks = ceil_div(rows, p.rows);
    const int64_t units = s.batch * s.heads_kv * p.row_blocks;
    p.splits = std::clamp<int64_t>(kMmaWarpsPerSm * sms / units, 1, std::max<int64_t>(1, s.s_max / kMmaMinChunk));
    p.chunk = ceil_div(ceil_div(s.s_max, p.splits), mma::kTileKeys) * mma::kTileKeys;
    p.splits = std::max<int64_t>(1, ceil_div(s.s_max, p.chunk));
    return p;
  }
  while (p.rows < kern::kMaxRows && p.rows < rows) p.rows *= 2;
  p.row_blocks = ceil_div(rows, p.rows);
  const int64_t blocks = s.batch * s.heads_kv * p.row_blocks;
  p.splits = std::clamp<int64_t>(ceil_div(kTargetBlocksPerSm * sms, blocks), 1, ceil_div(s.s_max, kMinChunk));
  p.chunk = std::max<int64_t>(1, ceil_div(s.s_max, p.splits));
  p.splits = std::max<int64_t>(1, ceil_div(s.s_max, p.chunk));
  return p;
}

template <class T, int D>
void combine(const kern::Args& a, cudaStream_t stream) {
  if (!a.part_out) return;
  cuda::launch_pdl(dim3(unsigned(int64_t(a.batch) * a.heads_q * a.tq)), dim3(D), 0, stream, kern::combine<T, D>, a);
}

template <class T, int D>
void launch_mma(const kern::Args& a, int dev, cudaStream_t stream) {
  constexpr int smem = mma::smem_bytes<D>();  // past the default 48 KB at D 128
  cuda::allow_max_smem(reinterpret_cast<const void*>(mma::decode<T, D>), cuda::device_limits(), dev);
  const int64_t units = int64_t(a.batch) * a.heads_kv * a.row_blocks * a.splits;
  cuda::launch_pdl(dim3(unsigned(ceil_div(units, mma::kWarps))), dim3(mma::kWarps * 32), smem, stream,
                   mma::decode<T, D>, a);
  combine<T, D>(a, stream);
}

template <class T, int D, int RB>
void launch_rows(const kern::Args& a, const Plan& p, cudaStream_t stream) {
  const dim3 grid(unsigned(p.splits * a.batch), unsigned(a.heads_kv * p.row_blocks));
  kern::decode<T, D, RB><<<grid, kern::kThreads, 0, stream>>>(a);
  TIGON_CUDA_CHECK_LAUNCH();
  combine<T, D>(a, stream);
}

template <class T, int D>
void launch_dim(const kern::Args& a, const Plan& p, cudaStream_t stream) {
  switch (p.rows) {
    case 1: return launch_rows<T, D, 1>(a, p, stream);
    case 2: return launch_rows<T, D, 2>(a, p, stream);
    case 4: return launch_rows<T, D, 4>(a, p, stream);
    default: return launch_rows<T, D, 8>(a, p, stream);
  }
}

template <class T>
void launch(const kern::Args& a, const Plan& p, int64_t head_dim, int device, cudaStream_t stream) {
  switch (head_dim) {
    case 64: return launch_mma<T, 64>(a, device, stream);
    case 80: return launch_dim<T, 80>(a, p, stream);
    case 96: return launch_dim<T, 96>(a, p, stream);
    case 128: return launch_mma<T, 128>(a, device, stream);
    case 256: return launch_dim<T, 256>(a, p, stream);
    default: fail(TIGON_ERROR_INTERNAL, "decode attention: unexpected head_dim ", head_dim);
  }
}

// The cache append: thread i copies kBytes of one head row of k_new and of v_new (rows in (sequence, token, head)
// order) to the row's cache position, read here on the device.
template <int kBytes>
__global__ void __launch_bounds__(256) append_kernel(AppendProblem p, int64_t units_per_row, int elt) {
  cuda::grid_dependency_wait();  // the new rows are the kernel ahead's output (a decode step's RoPE)
  cuda::allow_dependents();
  using U = std::conditional_t<kBytes == 16, uint4, std::conditional_t<kBytes == 4, uint32_t, uint16_t>>;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.batch * p.tq * p.heads * units_per_row) return;
  int64_t r = i / units_per_row;
  const int64_t e = (i - r * units_per_row) * (kBytes / elt);  // first element of the row
  const int64_t h = r % p.heads;
  r /= p.heads;
  const int64_t t = r % p.tq, b = r / p.tq;
  const int64_t pos = int64_t(p.seqlens[b]) - p.tq + t;
  if (pos < 0 || pos >= p.s_max) return;
  auto at = [&](const Tensor4& x, int64_t s) {
    return static_cast<char*>(x.data) + (b * x.batch_stride + s * x.seq_stride + h * x.head_stride + e) * elt;
  };
  *reinterpret_cast<U*>(at(p.k, pos)) = *reinterpret_cast<const U*>(at(p.k_new, t));
  *reinterpret_cast<U*>(at(p.v, pos)) = *reinterpret_cast<const U*>(at(p.v_new, t));
}

// 16-byte copies where every row start is 16-byte aligned (data and each stride of a dimension longer than 1).
bool rows_aligned16(const AppendProblem& p) {
  const int elt = dtype_bytes(p.dtype);
  auto aligned = [&](const Tensor4& x, int64_t seq) {
    auto ok = [&](int64_t extent, int64_t stride) { return extent <= 1 || stride * elt % 16 == 0; };
    return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && ok(p.batch, x.batch_stride) && ok(seq, x.seq_stride) &&
           ok(p.heads, x.head_stride);
  };
  return p.head_dim * elt % 16 == 0 && aligned(p.k_new, p.tq) && aligned(p.v_new, p.tq) && aligned(p.k, p.s_max) &&
         aligned(p.v, p.s_max);
}

}  // namespace

void append_cuda(const AppendProblem& p, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int elt = dtype_bytes(p.dtype);
  const bool vec = rows_aligned16(p);
  const int64_t units_per_row = vec ? p.head_dim * elt / 16 : p.head_dim;
  const int64_t blocks = ceil_div(p.batch * p.tq * p.heads * units_per_row, 256);
  if (blocks > INT32_MAX) fail_arg("k_new", "too many rows for one CUDA launch: ", p.batch * p.tq * p.heads);
  const dim3 grid(static_cast<unsigned>(blocks)), block(256);
  if (vec)
    cuda::launch_pdl(grid, block, 0, stream, append_kernel<16>, p, units_per_row, elt);
  else if (elt == 4)
    cuda::launch_pdl(grid, block, 0, stream, append_kernel<4>, p, units_per_row, elt);
  else
    cuda::launch_pdl(grid, block, 0, stream, append_kernel<2>, p, units_per_row, elt);
}

size_t cuda_workspace_bytes(const Shape& s, int device) {
  if (s.batch == 0 || s.tq == 0) return 0;
  const Plan p = make_plan(s, sm_count(device));
  if (p.splits == 1) return 0;
  return size_t(s.batch * s.heads_q * s.tq) * size_t(p.splits) * size_t(s.head_dim + 1) * sizeof(float);
}

void run_cuda(const Problem& pr, void* workspace, size_t, void* stream_ptr) {
  const Shape& s = pr.s;
  int device = 0;
  TIGON_CUDA_CHECK(cudaGetDevice(&device));
  const Plan p = make_plan(s, sm_count(device));
  float* part_out = p.splits > 1 ? static_cast<float*>(workspace) : nullptr;
  float* part_lse = part_out ? part_out + s.batch * s.heads_q * s.tq * p.splits * s.head_dim : nullptr;
  const kern::Args a{pr.q.data,
                     pr.k.data,
                     pr.v.data,
                     pr.seqlens,
                     pr.starts,
                     pr.out.data,
                     pr.lse,
                     part_out,
                     part_lse,
                     pr.q.batch_stride,
                     pr.q.seq_stride,
                     pr.q.head_stride,
                     pr.k.batch_stride,
                     pr.k.seq_stride,
                     pr.k.head_stride,
                     pr.v.batch_stride,
                     pr.v.seq_stride,
                     pr.v.head_stride,
                     pr.out.batch_stride,
                     pr.out.seq_stride,
                     pr.out.head_stride,
                     int(s.batch),
                     int(s.tq),
                     int(s.heads_q),
                     int(s.heads_kv),
                     int(s.group()),
                     int(s.s_max),
                     int(p.splits),
                     int(p.chunk),
                     int(p.row_blocks),
                     s.scale,
                     s.softcap,
                     int(s.window_left)};
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  switch (s.dtype) {
    case DType::kBFloat16: return launch<__nv_bfloat16>(a, p, s.head_dim, device, stream);
    case DType::kFloat16: return launch<__half>(a, p, s.head_dim, device, stream);
    default: fail(TIGON_ERROR_INTERNAL, "decode attention: unexpected dtype ", dtype_name(s.dtype));
  }
}

}  // namespace tigon::decode_attention
