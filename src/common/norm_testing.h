// Test-only selection of the normalizations' fallback kernels (RMSNorm, LayerNorm); host code without CUDA headers.
#pragma once

#include "tigon/tigon.h"

namespace tigon::row_plan {
// Set by tigon_testing_norm_uncached: every normalization plan takes the uncached kernels.
bool uncached_forced();
}  // namespace tigon::row_plan

extern "C" {
// Test-only entry (exported, not in the public headers): on != 0 makes RMSNorm and LayerNorm run their uncached
// kernels (one row per block iteration, any row length) where the library's plan would hold rows in registers, so
// tests reach that path at every shape; 0 restores the library's plan. Process-wide: set it between launches, and
// size the backward's workspace under the same setting.
TIGON_API tigon_status_t tigon_testing_norm_uncached(int on);
}
