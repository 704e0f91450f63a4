// The second half of every deterministic reduction over rows (dW, dB): per-block fp32 partial rows, summed column by
// column in a fixed order into the parameter's dtype. The same bits every run, no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/tensor.h"

namespace tigon::cuda {

// out[c] = sum over r < rows of partial[r * cols + c], rounded once to out_dtype (fp32, fp16 or bf16).
void column_sum(const float* partial, int64_t rows, int64_t cols, void* out, DType out_dtype, cudaStream_t stream);

// Two such sums over partial arrays of the same shape in one launch (LayerNorm's dW and dB), each with its own output
// dtype; the same bits as two column_sum calls.
void column_sum2(const float* partial_a, void* out_a, DType a_dtype, const float* partial_b, void* out_b, DType b_dtype,
                 int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace tigon::cuda
