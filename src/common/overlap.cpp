#include "common/overlap.h"

#include <algorithm>
#include <utility>

#include "common/error.h"
#include "common/tensor.h"

namespace tigon {
namespace {

char* first_element(const tigon_tensor& t) { return static_cast<char*>(t.data) + t.byte_offset; }

int64_t byte_span(const tigon_tensor& t, const std::vector<int64_t>& s, uintptr_t* lo) {
  *lo = reinterpret_cast<uintptr_t>(first_element(t));
  int64_t last = 0;
  for (int i = 0; i < t.ndim; ++i) last += (t.shape[i] - 1) * s[i];
  return (last + 1) * ((t.dtype.bits + 7) / 8);
}

// Whether sum_i n_i * stride_i == r for some |n_i| < shape_i, dims taken by decreasing stride. Exact for layouts whose
// dims nest (each stride at least the span of the smaller ones), which is every layout torch makes.
bool lattice_hits(const std::vector<std::pair<int64_t, int64_t>>& dims, size_t i, int64_t r) {
  if (i == dims.size()) return r == 0;
  const auto [stride, size] = dims[i];
  const int64_t f = r >= 0 ? r / stride : -((-r + stride - 1) / stride);  // floor(r / stride)
  for (int64_t n : {f, f + 1})
    if (n > -size && n < size && lattice_hits(dims, i + 1, r - n * stride)) return true;
  return false;
}

}  // namespace

std::vector<int64_t> strides_of(const tigon_tensor& t) {
  std::vector<int64_t> s(t.ndim);
  int64_t step = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    s[i] = t.strides ? t.strides[i] : step;
    step *= t.shape[i];
  }
  return s;
}

bool overlap(const tigon_tensor& a, const tigon_tensor& b) {
  if (numel(a) == 0 || numel(b) == 0) return false;
  const std::vector<int64_t> sa = strides_of(a), sb = strides_of(b);
  uintptr_t la, lb;
  const int64_t na = byte_span(a, sa, &la), nb = byte_span(b, sb, &lb);
  if (la + uintptr_t(na) <= lb || lb + uintptr_t(nb) <= la) return false;
  // Two views of one buffer with the same layout (say dq and dk sliced out of one dqkv gradient) overlap only where
  // their offset is a difference of two element positions.
  const int elem = (a.dtype.bits + 7) / 8;
  const bool same_layout =
      a.ndim == b.ndim && a.dtype.bits == b.dtype.bits && sa == sb && std::equal(a.shape, a.shape + a.ndim, b.shape);
  const int64_t delta = int64_t(la - lb);
  if (!same_layout || delta % elem != 0) return true;
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] > 1 && sa[i] > 0) dims.push_back({sa[i], a.shape[i]});
  std::sort(dims.begin(), dims.end(), [](auto x, auto y) { return x.first > y.first; });
  return lattice_hits(dims, 0, delta / elem);
}

// An output whose own elements overlap (a stride-0 or interleaved dim) would be written twice.
void check_distinct_elements(const tigon_tensor& t, const char* name) {
  if (numel(t) == 0) return;
  const std::vector<int64_t> s = strides_of(t);
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] > 1) dims.push_back({s[i], t.shape[i]});
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;
  for (auto [stride, size] : dims) {
    if (stride < span) fail_arg(name, "has overlapping elements (shape ", shape_string(t), ", strides not nested)");
    span = stride * size;
  }
}

void check_no_overlap(std::initializer_list<Span> outputs, const Span* inputs, size_t n) {
  for (const Span& o : outputs) {
    if (o.t == nullptr) continue;
    check_distinct_elements(*o.t, o.name);
    for (const Span* i = inputs; i != inputs + n; ++i)
      if (i->t && overlap(*o.t, *i->t))
        fail_arg(o.name, "overlaps input '", i->name, "'; outputs need their own memory");
    for (const Span& other : outputs) {
      if (&other == &o) break;
      if (other.t && overlap(*o.t, *other.t)) fail_arg(o.name, "overlaps output '", other.name, "'");
    }
  }
}

}  // namespace tigon
