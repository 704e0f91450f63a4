// Checks and views over tigon_tensor shared by every op family. Ops see their tensors as RowMatrix: rows x cols with
// one row stride, which is what a [..., cols] tensor with uniform leading strides is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "tigon/tigon.h"

namespace tigon {

enum class DType { kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kInt8 };

const char* dtype_name(DType t);
inline int dtype_bytes(DType t) {
  switch (t) {
    case DType::kInt8: return 1;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}
std::string shape_string(const tigon_tensor& t);

// The tensor's dtype, or an error naming `arg` for a dtype Tigon does not know.
DType dtype_of(const tigon_tensor& t, const char* arg);

inline bool is_cuda(const tigon_tensor& t) { return t.device.device_type == TIGON_DEVICE_CUDA; }

// Non-null tensor with non-null data (unless it has no elements) on a CPU or CUDA device.
const tigon_tensor& require(const tigon_tensor* t, const char* arg);

int64_t numel(const tigon_tensor& t);

struct RowMatrix {
  void* data = nullptr;  // first element (byte_offset applied)
  DType dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0;  // elements between rows
};

// [..., cols] with last stride 1 and leading dimensions that flatten to a single row stride >= cols.
RowMatrix as_rows(const tigon_tensor& t, const char* arg);

// 1-D (or any shape) contiguous tensor with exactly n elements.
void* as_vector(const tigon_tensor& t, const char* arg, int64_t n);

// Same device, dtype, rows and row length as `ref` (named ref_arg, read as rm); its own row stride.
RowMatrix rows_like(const tigon_tensor* t, const char* arg, const tigon_tensor& ref, const char* ref_arg,
                    const RowMatrix& rm);

// An output that shares its first element with an input must be that input exactly (elementwise kernels read each
// element before writing it, so only exact aliases are safe).
void check_exact_alias(const RowMatrix& out, const char* out_arg, const RowMatrix& in, const char* in_arg);

void check_same_device(const tigon_tensor& a, const char* arg_a, const tigon_tensor& b, const char* arg_b);

// An op's per-channel parameter (or its gradient): a contiguous vector of n elements on ref's device, of x_dtype or
// fp32, or exactly *dt when `match` (a second parameter that must share the first's dtype). Its dtype goes to *dt.
void* param_vector(const tigon_tensor* t, const char* arg, const tigon_tensor& ref, const char* ref_arg, int64_t n,
                   DType x_dtype, DType* dt, bool match);
void check_dtype_in(DType got, const char* arg, std::initializer_list<DType> allowed);

// A workspace of at least `need` bytes (non-NULL when need > 0); the error names size_fn, which reports the size.
void check_workspace(const void* workspace, size_t bytes, size_t need, const char* size_fn);

}  // namespace tigon
