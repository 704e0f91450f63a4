// Embedding C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <limits>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "embedding/embedding.h"
#include "tigon/embedding.h"

namespace tigon::embedding {
namespace {

// indices: int32 or int64, contiguous, any shape (flattened).
Indices indices_of(const tigon_tensor* t) {
  const tigon_tensor& u = require(t, "indices");
  Indices idx;
  idx.dtype = dtype_of(u, "indices");
  check_dtype_in(idx.dtype, "indices", {DType::kInt64, DType::kInt32});
  idx.n = numel(u);
  idx.data = as_vector(u, "indices", idx.n);
  return idx;
}

RowMatrix floats(const tigon_tensor* t, const char* arg) {
  const RowMatrix m = as_rows(require(t, arg), arg);
  check_dtype_in(m.dtype, arg, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  return m;
}

// [rows, cols] on ref's device with the given rows and cols (the dtype is the caller's check).
RowMatrix matrix(const tigon_tensor* t, const char* arg, const tigon_tensor& ref, const char* ref_arg, int64_t rows,
                 int64_t cols) {
  const tigon_tensor& u = require(t, arg);
  check_same_device(ref, ref_arg, u, arg);
  const RowMatrix m = floats(t, arg);
  if (m.rows != rows || m.cols != cols)
    fail_arg(arg, "must be ", rows, " rows of ", cols, ", got ", m.rows, " rows of ", m.cols, " (shape ",
             shape_string(u), ")");
  return m;
}

}  // namespace

}  // namespace tigon::embedding

using namespace tigon;
using namespace tigon::embedding;

extern "C" {

tigon_status_t tigon_embedding_fwd(const tigon_tensor* indices, const tigon_tensor* weight, const tigon_tensor* y,
                                   [[maybe_unused]] void* stream) {
  return api_guard("tigon_embedding_fwd", [&] {
    FwdProblem p;
    p.idx = indices_of(indices);
    p.weight = floats(weight, "weight");
    check_same_device(*indices, "indices", *weight, "weight");
    p.y = matrix(y, "y", *weight, "weight", p.idx.n, p.weight.cols);
    if (p.y.dtype != p.weight.dtype)
      fail_dtype("y", dtype_name(p.y.dtype), " differs from 'weight' (", dtype_name(p.weight.dtype), ")");
    if (p.idx.n == 0 || p.weight.cols == 0) return;
    if (is_cuda(*weight)) {
      TIGON_ON_CUDA(*weight, fwd_cuda(p, stream));
    } else {
      fwd_cpu(p);
    }
  });
}

tigon_status_t tigon_embedding_bwd_workspace_size(const tigon_tensor* indices, const tigon_tensor* weight,
                                                  size_t* bytes) {
  return api_guard("tigon_embedding_bwd_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    [[maybe_unused]] const Indices idx = indices_of(indices);
    [[maybe_unused]] const RowMatrix w = floats(weight, "weight");
    *bytes = 0;
    if (is_cuda(*weight)) TIGON_ON_CUDA(*weight, *bytes = cuda_workspace_bytes(idx.n, w.rows, w.cols));
  });
}

tigon_status_t tigon_embedding_bwd(const tigon_tensor* indices, const tigon_tensor* dy, const tigon_tensor* dweight,
                                   tigon_embedding_params params, [[maybe_unused]] void* workspace,
                                   [[maybe_unused]] size_t workspace_bytes, [[maybe_unused]] void* stream) {
  return api_guard("tigon_embedding_bwd", [&] {
    BwdProblem p;
    p.idx = indices_of(indices);
    p.dweight = floats(dweight, "dweight");
    check_same_device(*indices, "indices", *dweight, "dweight");
    p.dy = matrix(dy, "dy", *dweight, "dweight", p.idx.n, p.dweight.cols);
    if (p.dweight.dtype != p.dy.dtype && p.dweight.dtype != DType::kFloat32)
      fail_dtype("dweight", dtype_name(p.dweight.dtype), " must be dy's dtype (", dtype_name(p.dy.dtype),
                 ") or float32");
    if (params.padding_idx < -1 || params.padding_idx >= p.dweight.rows)
      fail_arg("params.padding_idx", "must be -1 (none) or a row of dweight in [0, ", p.dweight.rows, "), got ",
               params.padding_idx);
    p.padding_idx = params.padding_idx;
    if (is_cuda(*dweight)) {
      TIGON_ON_CUDA(*dweight, {
        if (p.idx.n > std::numeric_limits<int>::max())
          fail_arg("indices", "the CUDA backward sorts at most 2^31 - 1 indices, got ", p.idx.n);
        if (p.dweight.rows > std::numeric_limits<int>::max())
          fail_arg("dweight", "the CUDA backward takes at most 2^31 - 1 rows, got ", p.dweight.rows);
        check_workspace(workspace, workspace_bytes, cuda_workspace_bytes(p.idx.n, p.dweight.rows, p.dweight.cols),
                        "tigon_embedding_bwd_workspace_size");
        bwd_cuda(p, workspace, stream);
      });
    } else {
      bwd_cpu(p);
    }
  });
}

}  // extern "C"
