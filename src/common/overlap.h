// Memory overlap between tensors, for ops whose outputs need memory of their own: exact for the layouts torch makes
// (dimensions that nest), so views sliced out of one fused buffer without sharing elements are not overlaps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "tigon/tigon.h"

namespace tigon {

// Element strides of every dimension (the contiguous ones when t.strides is NULL).
std::vector<int64_t> strides_of(const tigon_tensor& t);

// Whether two tensors share an element.
bool overlap(const tigon_tensor& a, const tigon_tensor& b);

// An output whose own elements overlap (a stride-0 or interleaved dim) would be written twice: an error naming it.
void check_distinct_elements(const tigon_tensor& t, const char* name);

// A named tensor (NULL: absent) for check_no_overlap.
struct Span {
  const char* name;
  const tigon_tensor* t;
};

// Every output has distinct elements and shares none of the n inputs or another output; the error names the output.
void check_no_overlap(std::initializer_list<Span> outputs, const Span* inputs, size_t n);
template <size_t N>
void check_no_overlap(std::initializer_list<Span> outputs, const Span (&inputs)[N]) {
  check_no_overlap(outputs, inputs, N);
}

}  // namespace tigon
