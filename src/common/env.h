// Tuning and measuring knobs from the environment (TIGON_*). Callers keep the answer in a function-local static, so
// each knob is read once per process.
#pragma once

#include <cstdlib>

namespace tigon {

// An integer knob (0 when unset).
inline int env_int(const char* name) {
  const char* e = std::getenv(name);
  return e ? std::atoi(e) : 0;
}

}  // namespace tigon
