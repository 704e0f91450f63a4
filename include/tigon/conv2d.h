/* 2-D convolution with its epilogue fused (torch.nn.functional.conv2d, groups = 1, then + residual, then ReLU):
 *   y = act(conv2d(x, weight) + bias[k] + residual),  act: TIGON_ACT_NONE or TIGON_ACT_RELU.
 * A ResNet block's conv + BatchNorm (folded into weight and bias for inference) + shortcut add + ReLU is one call.
 *
 * Layout: channels last. x is [N, C, H, W] with channels-last strides (C the innermost, dense: strides
 * [H*W*C, 1, W*C, C]), weight [K, C, R, S] likewise ([R*S*C, 1, S*C, C]), y and residual [N, K, P, Q] likewise, with
 * P = (H + 2*pad_h - dil_h*(R - 1) - 1) / stride_h + 1 and Q from W the same way. bias is a contiguous [K] (NULL: 0),
 * residual NULL for none. x, weight, bias, residual and y share one dtype: fp16 or bf16 (fp32 on the CPU too).
 *
 * CUDA (sm_90): the bias, residual and ReLU are applied to the fp32 accumulator before the one rounding to the output
 * dtype. A 1 x 1 filter with unit stride and no padding is a plain GEMM over the channels and runs as one (the
 * library's persistent sm_90 GEMM). Other filters run through cuDNN 9's graph API (the convolution and the pointwise
 * ops as one fused engine; cuDNN is loaded at run time, e.g. PyTorch's, never linked) when it loads and has an engine
 * that keeps fp32 accumulation, with the workspace the caller passes; else as an implicit GEMM (CUTLASS 3: TMA
 * im2col loads, warp-specialized wgmma). A problem's first call or workspace query through cuDNN builds its plan
 * (host work, kept for the process): make it outside a CUDA graph capture. It needs C and
 * K multiples of 8 (16-byte rows), padding <= 128 and filter taps (R - 1) * dil_h, (S - 1) * dil_w < 255; other
 * problems are refused with an error naming the argument. CPU: a float64-accumulating reference. No allocation, no
 * host synchronisation: capturable in a CUDA graph. Forward only (inference).
 */
#ifndef TIGON_CONV2D_H_
#define TIGON_CONV2D_H_

#include "tigon/activation.h"
#include "tigon/tigon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int32_t stride_h, stride_w;     /* >= 1 */
  int32_t pad_h, pad_w;           /* >= 0, zero padding on both sides */
  int32_t dilation_h, dilation_w; /* >= 1 */
  int32_t activation;             /* tigon_activation_t: TIGON_ACT_NONE or TIGON_ACT_RELU */
} tigon_conv2d_params;

/* Bytes of workspace tigon_conv2d_fwd needs for these tensors and params (0 on the CPU, for 1 x 1 GEMMs and where
 * cuDNN does not run the problem). On CUDA it builds the problem's cuDNN plan if none is kept yet (host work). */
TIGON_API tigon_status_t tigon_conv2d_fwd_workspace_size(const tigon_tensor* x, const tigon_tensor* weight,
                                                         const tigon_tensor* bias, const tigon_tensor* residual,
                                                         const tigon_tensor* y, tigon_conv2d_params params,
                                                         size_t* bytes);
/* y = act(conv2d(x, weight) + bias + residual). bias, residual may be NULL. workspace: device memory of at least
 * tigon_conv2d_fwd_workspace_size bytes (NULL and 0 where that is 0). stream: a cudaStream_t, ignored on CPU. */
TIGON_API tigon_status_t tigon_conv2d_fwd(const tigon_tensor* x, const tigon_tensor* weight, const tigon_tensor* bias,
                                          const tigon_tensor* residual, const tigon_tensor* y,
                                          tigon_conv2d_params params, void* workspace, size_t workspace_bytes,
                                          void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_CONV2D_H_ */
