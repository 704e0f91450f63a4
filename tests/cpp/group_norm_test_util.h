// What GroupNorm's reference and GPU tests share: the case, its name, and [N, C, S] views of host matrices.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "test_util.h"
#include "tigon/group_norm.h"

namespace tigon_test {

struct GroupNormCase {
  DType dtype, param_dtype;
  int64_t n, c, groups, s;
  bool affine;  // weight and bias given
};

inline std::string group_norm_case_name(const ::testing::TestParamInfo<GroupNormCase>& info) {
  const GroupNormCase& c = info.param;
  return std::string(short_name(c.dtype)) + "_p" + short_name(c.param_dtype) + "_" + std::to_string(c.n) + "x" +
         std::to_string(c.c) + "x" + std::to_string(c.s) + "_g" + std::to_string(c.groups) + (c.affine ? "" : "_plain");
}

// x-shaped data ([N, C * S] in a HostMat, rows contiguous) seen as [N, C, S] ([N, C] when S is 1).
inline tigon::TensorView nchw(void* data, DType dt, const GroupNormCase& c, tigon_device dev = tigon::cpu()) {
  if (c.s == 1) return tigon::TensorView(data, {c.n, c.c}, to_dl(dt), dev);
  return tigon::TensorView(data, {c.n, c.c, c.s}, to_dl(dt), dev);
}

inline tigon_group_norm_params group_norm_params(const GroupNormCase& c) { return {1e-5f, c.groups}; }

}  // namespace tigon_test
