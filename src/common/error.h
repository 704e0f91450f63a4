// Errors inside the library are C++ exceptions; api_guard() at every extern "C" entry turns them into a status code
// and a thread-local message that tigon_last_error() returns.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "tigon/error.hpp"
#include "tigon/tigon.h"

namespace tigon {

// Builds a message from any streamable pieces: fail_arg("weight", "expected ", n, " elements").
template <class... Ts>
std::string cat(const Ts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// Invalid argument, named: "argument 'weight': expected 4096 elements, got 4095".
template <class... Ts>
[[noreturn]] void fail_arg(const char* arg, const Ts&... parts) {
  throw Error(TIGON_ERROR_INVALID_ARGUMENT, cat("argument '", arg, "': ", parts...));
}

// An argument of the wrong dtype: "argument 'x': dtype int64 ...". Same status as fail_arg; the message's "': dtype "
// is the convention front ends read to raise a type error (Python's TypeError) rather than a value error.
template <class... Ts>
[[noreturn]] void fail_dtype(const char* arg, const Ts&... parts) {
  fail_arg(arg, "dtype ", parts...);
}

template <class... Ts>
[[noreturn]] void fail(tigon_status_t status, const Ts&... parts) {
  throw Error(status, cat(parts...));
}

void set_last_error(const std::string& msg);

// Runs body(); maps exceptions to status codes and records "<function>: <message>".
template <class F>
tigon_status_t api_guard(const char* function, F&& body) noexcept {
  try {
    body();
    return TIGON_SUCCESS;
  } catch (const Error& e) {
    set_last_error(cat(function, ": ", e.what()));
    return e.status();
  } catch (const std::exception& e) {
    set_last_error(cat(function, ": internal error: ", e.what()));
    return TIGON_ERROR_INTERNAL;
  } catch (...) {
    set_last_error(cat(function, ": internal error: unknown exception"));
    return TIGON_ERROR_INTERNAL;
  }
}

}  // namespace tigon
