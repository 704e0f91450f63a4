// tigon::Error: the exception of the C++ layer (tigon.hpp) and of the library's own internals.
#pragma once

#include <stdexcept>
#include <string>

#include "tigon/tigon.h"

namespace tigon {

class Error : public std::runtime_error {
 public:
  Error(tigon_status_t status, const std::string& msg) : std::runtime_error(msg), status_(status) {}
  tigon_status_t status() const { return status_; }

 private:
  tigon_status_t status_;
};

}  // namespace tigon
