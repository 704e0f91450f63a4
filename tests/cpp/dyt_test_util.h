// What DyT's reference and GPU tests share: the case tuple and its test name.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "test_util.h"

namespace tigon_test {

using DytCase =
    std::tuple<DType, DType, int64_t, int64_t, int64_t, bool>;  // x dtype, gamma dtype, rows, cols, pad, beta

inline std::string dyt_case_name(const ::testing::TestParamInfo<DytCase>& info) {
  const DytCase& c = info.param;
  return std::string(short_name(std::get<0>(c))) + "_p" + short_name(std::get<1>(c)) + "_" +
         std::to_string(std::get<2>(c)) + "x" + std::to_string(std::get<3>(c)) + "_pad" +
         std::to_string(std::get<4>(c)) + (std::get<5>(c) ? "_beta" : "");
}

}  // namespace tigon_test
