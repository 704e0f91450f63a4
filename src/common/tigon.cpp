// Library-wide entry points: version, build features, last error.
#include <string>

#include "common/error.h"
#include "tigon/tigon.h"

namespace tigon {

namespace {
thread_local std::string last_error;
}

void set_last_error(const std::string& msg) { last_error = msg; }

}  // namespace tigon

#define TIGON_STR2(x) #x
#define TIGON_STR(x) TIGON_STR2(x)

extern "C" {

const char* tigon_version(void) {
  return TIGON_STR(TIGON_VERSION_MAJOR) "." TIGON_STR(TIGON_VERSION_MINOR) "." TIGON_STR(TIGON_VERSION_PATCH)
#ifdef TIGON_WITH_CUDA
      " (cuda: " TIGON_CUDA_ARCHS_STRING ")";
#else
      " (cpu only)";
#endif
}

int tigon_has_cuda(void) {
#ifdef TIGON_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

const char* tigon_last_error(void) { return tigon::last_error.c_str(); }

const char* tigon_status_string(tigon_status_t status) {
  switch (status) {
    case TIGON_SUCCESS: return "success";
    case TIGON_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case TIGON_ERROR_NOT_SUPPORTED: return "not supported";
    case TIGON_ERROR_CUDA: return "CUDA error";
    case TIGON_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

}  // extern "C"
