// The second half of every deterministic reduction over rows (dW, dB): per-block fp32 partial rows, summed column by
// column in a fixed order into the parameter's dtype. The same bits every run, no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/tensor.h"

namespace tigon::cuda {

// out[c] = sum over r < rows of partial[r * cols + c], rounded once to out_dtype (fp32, fp16 or bf16).
void column_sum(const float* partial, int64_t rows, int64_t cols, void* out, DType out_dtype, cudaStream_t stream);

}  // namespace tigon::cuda
