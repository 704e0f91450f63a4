#include "common/tensor.h"

#include <initializer_list>
#include <sstream>

namespace tigon {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kInt8: return "int8";
  }
  return "?";
}

std::string shape_string(const tigon_tensor& t) {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < t.ndim; ++i) os << (i ? ", " : "") << t.shape[i];
  os << "]";
  return os.str();
}

DType dtype_of(const tigon_tensor& t, const char* arg) {
  const tigon_dtype d = t.dtype;
  if (d.lanes == 1) {
    if (d.code == TIGON_DTYPE_CODE_FLOAT && d.bits == 32) return DType::kFloat32;
    if (d.code == TIGON_DTYPE_CODE_FLOAT && d.bits == 16) return DType::kFloat16;
    if (d.code == TIGON_DTYPE_CODE_BFLOAT && d.bits == 16) return DType::kBFloat16;
    if (d.code == TIGON_DTYPE_CODE_INT && d.bits == 32) return DType::kInt32;
    if (d.code == TIGON_DTYPE_CODE_INT && d.bits == 64) return DType::kInt64;
    if (d.code == TIGON_DTYPE_CODE_INT && d.bits == 8) return DType::kInt8;
  }
  fail_dtype(arg, "(code ", int(d.code), ", bits ", int(d.bits), ", lanes ", int(d.lanes), ") is not supported");
}

int64_t numel(const tigon_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

const tigon_tensor& require(const tigon_tensor* t, const char* arg) {
  if (t == nullptr) fail_arg(arg, "is required but was NULL");
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr)) fail_arg(arg, "has ndim ", t->ndim, " and no shape");
  for (int i = 0; i < t->ndim; ++i)
    if (t->shape[i] < 0) fail_arg(arg, "has a negative size in shape ", shape_string(*t));
  if (t->device.device_type != TIGON_DEVICE_CPU && t->device.device_type != TIGON_DEVICE_CUDA)
    fail_arg(arg, "device type ", t->device.device_type, " is neither CPU (1) nor CUDA (2)");
  if (t->data == nullptr && numel(*t) > 0) fail_arg(arg, "has elements but a NULL data pointer");
  return *t;
}

static char* first_element(const tigon_tensor& t) { return static_cast<char*>(t.data) + t.byte_offset; }

RowMatrix as_rows(const tigon_tensor& t, const char* arg) {
  if (t.ndim < 1) fail_arg(arg, "must have at least 1 dimension, got a scalar");
  RowMatrix m;
  m.dtype = dtype_of(t, arg);
  m.data = first_element(t);
  m.cols = t.shape[t.ndim - 1];
  m.rows = 1;
  for (int i = 0; i + 1 < t.ndim; ++i) m.rows *= t.shape[i];
  if (t.strides == nullptr) {
    m.row_stride = m.cols;
    return m;
  }
  if (m.cols > 1 && t.strides[t.ndim - 1] != 1)
    fail_arg(arg, "last dimension must be contiguous (stride 1), got stride ", t.strides[t.ndim - 1]);
  // The leading dimensions must step through rows evenly: stride[i] == stride[i+1] * shape[i+1] for every i < ndim-2
  // whose size exceeds 1 (a size-1 dimension's stride is irrelevant).
  int64_t row_stride = -1;
  for (int i = t.ndim - 2; i >= 0; --i) {
    if (t.shape[i] == 1) continue;
    if (row_stride < 0) {
      row_stride = t.strides[i];
    } else {
      // expected stride of dim i given the inner leading dims collapse to `rows_inner` rows of `row_stride`
      int64_t rows_inner = 1;
      for (int j = i + 1; j + 1 < t.ndim; ++j) rows_inner *= t.shape[j];
      if (t.strides[i] != row_stride * rows_inner)
        fail_arg(arg, "leading dimensions must flatten to rows with one stride; shape ", shape_string(t),
                 " has stride ", t.strides[i], " at dim ", i, " (expected ", row_stride * rows_inner, ")");
    }
  }
  m.row_stride = row_stride < 0 ? m.cols : row_stride;
  if (m.rows > 1 && m.row_stride < m.cols)
    fail_arg(arg, "row stride ", m.row_stride, " is smaller than the row length ", m.cols, " (overlapping rows)");
  return m;
}

void* as_vector(const tigon_tensor& t, const char* arg, int64_t n) {
  if (numel(t) != n) fail_arg(arg, "expected ", n, " elements, got shape ", shape_string(t));
  if (t.strides != nullptr) {
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expect)
        fail_arg(arg, "must be contiguous, got strides that skip elements for shape ", shape_string(t));
      expect *= t.shape[i];
    }
  }
  return first_element(t);
}

void check_same_device(const tigon_tensor& a, const char* arg_a, const tigon_tensor& b, const char* arg_b) {
  const bool same = a.device.device_type == b.device.device_type &&
                    (a.device.device_type == TIGON_DEVICE_CPU || a.device.device_id == b.device.device_id);
  if (!same)
    fail_arg(arg_b, "is on device (", b.device.device_type, ", ", b.device.device_id, ") but '", arg_a, "' is on (",
             a.device.device_type, ", ", a.device.device_id, "); all tensors must share one device");
}

void* param_vector(const tigon_tensor* t, const char* arg, const tigon_tensor& ref, const char* ref_arg, int64_t n,
                   DType x_dtype, DType* dt, bool match) {
  const tigon_tensor& v = require(t, arg);
  check_same_device(ref, ref_arg, v, arg);
  const DType got = dtype_of(v, arg);
  if (match)
    check_dtype_in(got, arg, {*dt});
  else
    check_dtype_in(got, arg, {x_dtype, DType::kFloat32});
  *dt = got;
  return as_vector(v, arg, n);
}

RowMatrix rows_like(const tigon_tensor* t, const char* arg, const tigon_tensor& ref, const char* ref_arg,
                    const RowMatrix& rm) {
  const tigon_tensor& tt = require(t, arg);
  check_same_device(ref, ref_arg, tt, arg);
  const RowMatrix m = as_rows(tt, arg);
  if (m.dtype != rm.dtype)
    fail_dtype(arg, dtype_name(m.dtype), " differs from '", ref_arg, "' (", dtype_name(rm.dtype),
               "); every tensor of the op has one dtype");
  if (m.rows != rm.rows || m.cols != rm.cols)
    fail_arg(arg, "must have ", rm.rows, " rows of ", rm.cols, " like '", ref_arg, "', got ", m.rows, " rows of ",
             m.cols, " (shape ", shape_string(tt), ")");
  return m;
}

void check_exact_alias(const RowMatrix& out, const char* out_arg, const RowMatrix& in, const char* in_arg) {
  if (out.data == in.data && out.rows > 1 && out.row_stride != in.row_stride)
    fail_arg(out_arg, "aliases '", in_arg, "' with a different row stride (", out.row_stride, " vs ", in.row_stride,
             "); an output may only be written exactly over an input");
}

void check_dtype_in(DType got, const char* arg, std::initializer_list<DType> allowed) {
  std::string list;
  for (DType d : allowed) {
    if (d == got) return;
    list += list.empty() ? "" : ", ";
    list += dtype_name(d);
  }
  fail_dtype(arg, dtype_name(got), " is not supported here (expected one of: ", list, ")");
}

void check_workspace(const void* workspace, size_t bytes, size_t need, const char* size_fn) {
  if (bytes < need || (need > 0 && workspace == nullptr))
    fail_arg("workspace", "needs ", need, " bytes (", size_fn, "), got ", bytes, workspace ? "" : " at NULL");
}

}  // namespace tigon
