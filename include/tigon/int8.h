/* Int8 inference: per-row activation quantization, an int8 x int8 linear layer (W8A8) and a weight-only int8 GEMV.
 *
 * tigon_quantize_rows: symmetric per-row (per-token) quantization of x [M, K] (bf16, fp16 or fp32):
 *   scale[m] = max_k |x[m, k]| / 127 (fp32, one correctly rounded division), q[m, k] = round-half-even(x[m, k] /
 *   scale[m]) (fp32 division) clamped to [-127, 127]; an all-zero row has scale 0 and q 0. |x - q * scale| <=
 *   scale / 2 (plus the fp32 rounding of x / scale, under 1e-5 * scale). Rows holding inf or NaN give unspecified
 *   q. q is int8 [M, K] (any row stride >= K), scale fp32 [M] contiguous.
 *
 * tigon_int8_linear: out[m, n] = act(float(acc[m, n]) * scale_x[m] * scale_w[n] + bias[n]), acc[m, n] = sum_k
 *   q_x[m, k] * q_w[n, k] in exact int32 (K <= 2^17 keeps 127 * 127 * K inside int32), the product and the bias
 *   added in fp32 left to right, act (tigon_activation_t, torch's formulas, fp32) and one rounding to out's dtype.
 *   q_x int8 [M, K], q_w int8 [N, K] (nn.Linear's layout, quantized per output channel), scale_x fp32 [M],
 *   scale_w fp32 [N], bias NULL or [N] in out's dtype, out [M, N] bf16 or fp16 (fp32 too). CUDA path: one cuBLASLt
 *   int8 GEMM (CUBLAS_COMPUTE_32I, int32 D into the workspace), then one vectorised dequantize + bias + activation
 *   pass. cuBLASLt's int8 tensor-core (IMMA) kernels take row-major int8 operands only as its "TN" product (the
 *   weight transposed, x not) with 4-byte aligned pointers and leading dimensions and m, k multiples of 4; the C API
 *   therefore requires on every device: K % 4 == 0, N % 4 == 0, row strides of q_x and q_w multiples of 4, q_x and
 *   q_w 4-byte aligned (16 bytes is faster). M is free. Where cuBLASLt still offers no algorithm the call fails with
 *   TIGON_ERROR_NOT_SUPPORTED.
 *
 * tigon_gemv_int8: weight-only int8 for decoding, y[m, n] = (sum_k x[m, k] * q_w[n, k]) * scale_w[n] (+ bias[n]),
 *   fp32 accumulation, one rounding; x [M, K] bf16, fp16 or fp32 (built for M <= 16; any M is right), q_w int8 [N, K]
 *   (row stride >= K), scale_w fp32 [N], bias NULL or [N] and y [M, N] in x's dtype. The CUDA path is the GEMV
 *   kernel's (include/tigon/gemv.h) with an int8 weight: the weight is streamed once with 16-byte loads (16 weights
 *   each) when K % 16 == 0 and the rows of x and q_w are 16-byte aligned, element by element otherwise.
 *
 * Element counts may pass 2^31 (64-bit offsets). Outputs may not overlap inputs. Workspace: int8_linear needs
 * cuBLASLt's scratch (32 MiB) plus the int32 products (M * N * 4 bytes, 256-byte aligned); gemv_int8 none at present
 * (as tigon_gemv). Sizes depend on the shapes alone; 0 on the CPU. No allocation, no
 * synchronisation, every launch on the stream: capturable in a CUDA graph. The CPU reference computes in
 * int64 / fp64 with the same roundings.
 */
#ifndef TIGON_INT8_H_
#define TIGON_INT8_H_

#include "tigon/activation.h"
#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int32_t activation; /* tigon_activation_t */
} tigon_int8_linear_params;

/* q = round(x / scale), scale = max|x| / 127 per row. stream: a cudaStream_t, ignored on the CPU. */
TIGON_API tigon_status_t tigon_quantize_rows(const tigon_tensor* x, const tigon_tensor* q, const tigon_tensor* scale,
                                             void* stream);

/* Workspace bytes of tigon_int8_linear for q_x [M, K] and q_w [N, K] (0 on the CPU). */
TIGON_API tigon_status_t tigon_int8_linear_workspace_size(const tigon_tensor* q_x, const tigon_tensor* q_w,
                                                          size_t* bytes);

/* out = act(scale_x * scale_w * (q_x · q_wᵀ) + bias). bias may be NULL. */
TIGON_API tigon_status_t tigon_int8_linear(const tigon_tensor* q_x, const tigon_tensor* scale_x,
                                           const tigon_tensor* q_w, const tigon_tensor* scale_w,
                                           const tigon_tensor* bias, const tigon_tensor* out,
                                           tigon_int8_linear_params params, void* workspace, size_t workspace_bytes,
                                           void* stream);

/* Workspace bytes of tigon_gemv_int8 for x [M, K] and q_w [N, K] (0 at present, as tigon_gemv's). */
TIGON_API tigon_status_t tigon_gemv_int8_workspace_size(const tigon_tensor* x, const tigon_tensor* q_w, size_t* bytes);

/* y = (x · q_wᵀ) * scale_w (+ bias). bias may be NULL. */
TIGON_API tigon_status_t tigon_gemv_int8(const tigon_tensor* x, const tigon_tensor* q_w, const tigon_tensor* scale_w,
                                         const tigon_tensor* bias, const tigon_tensor* y, void* workspace,
                                         size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_INT8_H_ */
