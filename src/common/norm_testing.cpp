#include "common/norm_testing.h"

#include <atomic>

#include "common/error.h"

namespace tigon::row_plan {
namespace {
std::atomic<bool> g_uncached{false};
}

bool uncached_forced() { return g_uncached.load(std::memory_order_relaxed); }
void set_uncached(bool on) { g_uncached.store(on, std::memory_order_relaxed); }

}  // namespace tigon::row_plan

extern "C" tigon_status_t tigon_testing_norm_uncached(int on) {
  return tigon::api_guard("tigon_testing_norm_uncached", [&] { tigon::row_plan::set_uncached(on != 0); });
}
