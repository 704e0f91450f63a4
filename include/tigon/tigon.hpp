// Header-only C++ layer over the C API: TensorView (a tigon_tensor that owns its shape and strides), exceptions
// instead of status codes, and Buffer, an owning allocation for workspaces and examples (host memory, or device
// memory when <cuda_runtime.h> is included before this header).
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tigon/activation.h"
#include "tigon/conv2d.h"
#include "tigon/cross_entropy.h"
#include "tigon/distill.h"
#include "tigon/dyt.h"
#include "tigon/embedding.h"
#include "tigon/error.hpp"
#include "tigon/fused_linear_cross_entropy.h"
#include "tigon/gemv.h"
#include "tigon/group_norm.h"
#include "tigon/int8.h"
#include "tigon/layer_norm.h"
#include "tigon/linear_act.h"
#include "tigon/poly_norm.h"
#include "tigon/rms_norm.h"
#include "tigon/rope.h"
#include "tigon/softmax.h"
#include "tigon/sparsemax.h"
#include "tigon/swiglu.h"
#include "tigon/tigon.h"

namespace tigon {

inline void check(tigon_status_t status) {
  if (status != TIGON_SUCCESS) throw Error(status, tigon_last_error());
}

namespace dtype {
constexpr tigon_dtype float32{TIGON_DTYPE_CODE_FLOAT, 32, 1};
constexpr tigon_dtype float16{TIGON_DTYPE_CODE_FLOAT, 16, 1};
constexpr tigon_dtype bfloat16{TIGON_DTYPE_CODE_BFLOAT, 16, 1};
constexpr tigon_dtype int32{TIGON_DTYPE_CODE_INT, 32, 1};
constexpr tigon_dtype int64{TIGON_DTYPE_CODE_INT, 64, 1};
constexpr tigon_dtype int8{TIGON_DTYPE_CODE_INT, 8, 1};
}  // namespace dtype

constexpr tigon_device cpu() { return {TIGON_DEVICE_CPU, 0}; }
constexpr tigon_device cuda(int id = 0) { return {TIGON_DEVICE_CUDA, id}; }

// A non-owning view of a tensor's data that owns its shape and strides (strides in elements; empty = contiguous).
class TensorView {
 public:
  TensorView(void* data, std::vector<int64_t> shape, tigon_dtype dt, tigon_device dev = cpu(),
             std::vector<int64_t> strides = {})
      : shape_(std::move(shape)), strides_(std::move(strides)) {
    if (!strides_.empty() && strides_.size() != shape_.size())
      throw std::invalid_argument("TensorView: strides must have one entry per dimension");
    t_.data = data;
    t_.device = dev;
    t_.ndim = int32_t(shape_.size());
    t_.dtype = dt;
    t_.byte_offset = 0;
    relink();
  }
  TensorView(const TensorView& o) : t_(o.t_), shape_(o.shape_), strides_(o.strides_) { relink(); }
  TensorView& operator=(const TensorView& o) {
    t_ = o.t_;
    shape_ = o.shape_;
    strides_ = o.strides_;
    relink();
    return *this;
  }

  const tigon_tensor* get() const { return &t_; }
  operator const tigon_tensor*() const { return &t_; }
  void* data() const { return t_.data; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    return n;
  }

 private:
  void relink() {
    t_.shape = shape_.data();
    t_.strides = strides_.empty() ? nullptr : strides_.data();
  }
  tigon_tensor t_{};
  std::vector<int64_t> shape_, strides_;
};

// Owning memory: host (malloc) or, when the CUDA runtime header is visible, device (cudaMalloc).
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, tigon_device dev) : bytes_(bytes), dev_(dev) {
    if (bytes == 0) return;
    if (dev.device_type == TIGON_DEVICE_CPU) {
      ptr_ = std::malloc(bytes);
      if (!ptr_) throw std::bad_alloc();
    } else {
#ifdef CUDART_VERSION
      if (cudaMalloc(&ptr_, bytes) != cudaSuccess) throw std::bad_alloc();
#else
      throw std::runtime_error("tigon::Buffer: include <cuda_runtime.h> before tigon.hpp for device memory");
#endif
    }
  }
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    swap(o);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }

  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void swap(Buffer& o) {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(dev_, o.dev_);
  }
  void release() {
    if (!ptr_) return;
    if (dev_.device_type == TIGON_DEVICE_CPU) std::free(ptr_);
#ifdef CUDART_VERSION
    else
      cudaFree(ptr_);
#endif
    ptr_ = nullptr;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  tigon_device dev_{TIGON_DEVICE_CPU, 0};
};

// ---- RMSNorm ------------------------------------------------------------------------------------------------------
struct RMSNormParams {
  float eps = 1e-6f;
  float offset = 0.f;
  tigon_rms_norm_casting_t casting_mode = TIGON_RMS_NORM_LLAMA;
  operator tigon_rms_norm_params() const { return {eps, offset, int32_t(casting_mode)}; }
};

inline void rms_norm_fwd(const TensorView& x, const TensorView* weight, const TensorView& y, const TensorView* rstd,
                         RMSNormParams params = {}, void* stream = nullptr) {
  check(tigon_rms_norm_fwd(x, weight ? weight->get() : nullptr, y, rstd ? rstd->get() : nullptr, params, stream));
}

inline size_t rms_norm_bwd_workspace_size(const TensorView& x, const TensorView* weight) {
  size_t bytes = 0;
  check(tigon_rms_norm_bwd_workspace_size(x, weight ? weight->get() : nullptr, &bytes));
  return bytes;
}

inline void rms_norm_bwd(const TensorView& dy, const TensorView& x, const TensorView* weight, const TensorView& rstd,
                         const TensorView& dx, const TensorView* dw, RMSNormParams params, void* workspace,
                         size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_rms_norm_bwd(dy, x, weight ? weight->get() : nullptr, rstd, dx, dw ? dw->get() : nullptr, params,
                           workspace, workspace_bytes, stream));
}

// ---- the other op families: the C entry points with optional tensors as pointers and errors as exceptions --------
namespace detail {
inline const tigon_tensor* opt(const TensorView* t) { return t ? t->get() : nullptr; }
}  // namespace detail

// RMSNorm with the residual add fused in front: h = x + residual, y = rmsnorm(h) (h may be x or residual).
inline void add_rms_norm_fwd(const TensorView& x, const TensorView& residual, const TensorView* weight,
                             const TensorView& y, const TensorView& h, const TensorView* rstd,
                             RMSNormParams params = {}, void* stream = nullptr) {
  check(tigon_add_rms_norm_fwd(x, residual, detail::opt(weight), y, h, detail::opt(rstd), params, stream));
}

// dx = RMSNorm's gradient on h + dh (dh optional), the gradient of x and residual; workspace as rms_norm_bwd's for h.
inline void add_rms_norm_bwd(const TensorView& dy, const TensorView* dh, const TensorView& h, const TensorView* weight,
                             const TensorView& rstd, const TensorView& dx, const TensorView* dw, RMSNormParams params,
                             void* workspace, size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_add_rms_norm_bwd(dy, detail::opt(dh), h, detail::opt(weight), rstd, dx, detail::opt(dw), params,
                               workspace, workspace_bytes, stream));
}

inline void layer_norm_fwd(const TensorView& x, const TensorView* weight, const TensorView* bias, const TensorView& y,
                           const TensorView* mean, const TensorView* rstd, float eps = 1e-5f, void* stream = nullptr) {
  check(tigon_layer_norm_fwd(x, detail::opt(weight), detail::opt(bias), y, detail::opt(mean), detail::opt(rstd),
                             tigon_layer_norm_params{eps}, stream));
}

inline size_t layer_norm_bwd_workspace_size(const TensorView& x) {
  size_t bytes = 0;
  check(tigon_layer_norm_bwd_workspace_size(x, &bytes));
  return bytes;
}

inline void layer_norm_bwd(const TensorView& dy, const TensorView& x, const TensorView* weight, const TensorView& mean,
                           const TensorView& rstd, const TensorView& dx, const TensorView* dw, const TensorView* db,
                           void* workspace, size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_layer_norm_bwd(dy, x, detail::opt(weight), mean, rstd, dx, detail::opt(dw), detail::opt(db), workspace,
                             workspace_bytes, stream));
}

inline void dyt_fwd(const TensorView& x, const TensorView& alpha, const TensorView& gamma, const TensorView* beta,
                    const TensorView& y, void* stream = nullptr) {
  check(tigon_dyt_fwd(x, alpha, gamma, detail::opt(beta), y, stream));
}

inline size_t dyt_bwd_workspace_size(const TensorView& x) {
  size_t bytes = 0;
  check(tigon_dyt_bwd_workspace_size(x, &bytes));
  return bytes;
}

inline void dyt_bwd(const TensorView& dy, const TensorView& x, const TensorView& alpha, const TensorView& gamma,
                    const TensorView* dx, const TensorView* dalpha, const TensorView* dgamma, const TensorView* dbeta,
                    void* workspace, size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_dyt_bwd(dy, x, alpha, gamma, detail::opt(dx), detail::opt(dalpha), detail::opt(dgamma),
                      detail::opt(dbeta), workspace, workspace_bytes, stream));
}

inline void embedding_fwd(const TensorView& indices, const TensorView& weight, const TensorView& y,
                          void* stream = nullptr) {
  check(tigon_embedding_fwd(indices, weight, y, stream));
}

inline size_t embedding_bwd_workspace_size(const TensorView& indices, const TensorView& weight) {
  size_t bytes = 0;
  check(tigon_embedding_bwd_workspace_size(indices, weight, &bytes));
  return bytes;
}

inline void embedding_bwd(const TensorView& indices, const TensorView& dy, const TensorView& dweight,
                          tigon_embedding_params params, void* workspace, size_t workspace_bytes,
                          void* stream = nullptr) {
  check(tigon_embedding_bwd(indices, dy, dweight, params, workspace, workspace_bytes, stream));
}

inline void group_norm_fwd(const TensorView& x, const TensorView* weight, const TensorView* bias, const TensorView& y,
                           const TensorView& mean, const TensorView& rstd, tigon_group_norm_params params,
                           void* stream = nullptr) {
  check(tigon_group_norm_fwd(x, detail::opt(weight), detail::opt(bias), y, mean, rstd, params, stream));
}

inline size_t group_norm_bwd_workspace_size(const TensorView& x, tigon_group_norm_params params) {
  size_t bytes = 0;
  check(tigon_group_norm_bwd_workspace_size(x, params, &bytes));
  return bytes;
}

inline void group_norm_bwd(const TensorView& dy, const TensorView& x, const TensorView* weight, const TensorView& mean,
                           const TensorView& rstd, const TensorView* dx, const TensorView* dweight,
                           const TensorView* dbias, tigon_group_norm_params params, void* workspace,
                           size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_group_norm_bwd(dy, x, detail::opt(weight), mean, rstd, detail::opt(dx), detail::opt(dweight),
                             detail::opt(dbias), params, workspace, workspace_bytes, stream));
}

inline void softmax_fwd(const TensorView& x, const TensorView& y, void* stream = nullptr) {
  check(tigon_softmax_fwd(x, y, stream));
}

inline void softmax_causal_fwd(const TensorView& x, const TensorView& y, void* stream = nullptr) {
  check(tigon_softmax_causal_fwd(x, y, stream));
}

inline void softmax_bwd(const TensorView& dy, const TensorView& y, const TensorView& dx, void* stream = nullptr) {
  check(tigon_softmax_bwd(dy, y, dx, stream));
}

inline void sparsemax_fwd(const TensorView& x, const TensorView& y, void* stream = nullptr) {
  check(tigon_sparsemax_fwd(x, y, stream));
}

inline void sparsemax_causal_fwd(const TensorView& x, const TensorView& y, void* stream = nullptr) {
  check(tigon_sparsemax_causal_fwd(x, y, stream));
}

inline void sparsemax_bwd(const TensorView& dy, const TensorView& y, const TensorView& dx, void* stream = nullptr) {
  check(tigon_sparsemax_bwd(dy, y, dx, stream));
}

inline void poly_norm_fwd(const TensorView& x, const TensorView& weight, const TensorView& bias, const TensorView& y,
                          const TensorView* rstd, float eps = 1e-6f, void* stream = nullptr) {
  check(tigon_poly_norm_fwd(x, weight, bias, y, detail::opt(rstd), tigon_poly_norm_params{eps}, stream));
}

inline size_t poly_norm_bwd_workspace_size(const TensorView& x) {
  size_t bytes = 0;
  check(tigon_poly_norm_bwd_workspace_size(x, &bytes));
  return bytes;
}

inline void poly_norm_bwd(const TensorView& dy, const TensorView& x, const TensorView& weight, const TensorView& rstd,
                          const TensorView* dx, const TensorView* dweight, const TensorView* dbias, void* workspace,
                          size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_poly_norm_bwd(dy, x, weight, rstd, detail::opt(dx), detail::opt(dweight), detail::opt(dbias), workspace,
                            workspace_bytes, stream));
}

inline void rope_fwd(const TensorView& x, const TensorView& cos, const TensorView& sin, const TensorView& out,
                     tigon_rope_params params, void* stream = nullptr) {
  check(tigon_rope_fwd(x, cos, sin, out, params, stream));
}

inline void rope_bwd(const TensorView& dy, const TensorView& cos, const TensorView& sin, const TensorView& dx,
                     tigon_rope_params params, void* stream = nullptr) {
  check(tigon_rope_bwd(dy, cos, sin, dx, params, stream));
}

inline void rope_qk_fwd(const TensorView& q, const TensorView& k, const TensorView& cos, const TensorView& sin,
                        const TensorView& q_out, const TensorView& k_out, tigon_rope_params params,
                        void* stream = nullptr) {
  check(tigon_rope_qk_fwd(q, k, cos, sin, q_out, k_out, params, stream));
}

inline void rope_qk_bwd(const TensorView& dq_out, const TensorView& dk_out, const TensorView& cos,
                        const TensorView& sin, const TensorView& dq, const TensorView& dk, tigon_rope_params params,
                        void* stream = nullptr) {
  check(tigon_rope_qk_bwd(dq_out, dk_out, cos, sin, dq, dk, params, stream));
}

inline void swiglu_fwd(const TensorView& a, const TensorView& b, const TensorView& c, tigon_swiglu_params params,
                       void* stream = nullptr) {
  check(tigon_swiglu_fwd(a, b, c, params, stream));
}

inline void swiglu_bwd(const TensorView& dc, const TensorView& a, const TensorView& b, const TensorView& da,
                       const TensorView& db, tigon_swiglu_params params, void* stream = nullptr) {
  check(tigon_swiglu_bwd(dc, a, b, da, db, params, stream));
}

inline size_t cross_entropy_fwd_workspace_size(const TensorView& logits) {
  size_t bytes = 0;
  check(tigon_cross_entropy_fwd_workspace_size(logits, &bytes));
  return bytes;
}

inline void cross_entropy_fwd(const TensorView& logits, const TensorView& target, const TensorView* weight,
                              const TensorView& loss, const TensorView* z_loss, const TensorView* accuracy,
                              const TensorView* predicted, const TensorView* grad, tigon_cross_entropy_params params,
                              void* workspace, size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_cross_entropy_fwd(logits, target, detail::opt(weight), loss, detail::opt(z_loss), detail::opt(accuracy),
                                detail::opt(predicted), detail::opt(grad), params, workspace, workspace_bytes, stream));
}

inline void cross_entropy_bwd(const TensorView& grad, const TensorView& grad_output, void* stream = nullptr) {
  check(tigon_cross_entropy_bwd(grad, grad_output, stream));
}

inline size_t distill_fwd_workspace_size(const TensorView& student) {
  size_t bytes = 0;
  check(tigon_distill_fwd_workspace_size(student, &bytes));
  return bytes;
}

// The backward is cross_entropy_bwd (the gradient times grad_output, in place).
inline void distill_fwd(const TensorView& student, const TensorView& teacher, const TensorView* labels,
                        const TensorView& loss, const TensorView* grad, tigon_distill_params params, void* workspace,
                        size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_distill_fwd(student, teacher, detail::opt(labels), loss, detail::opt(grad), params, workspace,
                          workspace_bytes, stream));
}

// Workspace bytes (0 on the CPU) and tokens per chunk.
inline std::pair<size_t, int64_t> fused_linear_cross_entropy_workspace_size(
    const TensorView& x, const TensorView& weight, tigon_fused_linear_cross_entropy_params params) {
  size_t bytes = 0;
  int64_t rows = 0;
  check(tigon_fused_linear_cross_entropy_workspace_size(x, weight, params, &bytes, &rows));
  return {bytes, rows};
}

inline void fused_linear_cross_entropy_fwd(const TensorView& x, const TensorView& weight, const TensorView* bias,
                                           const TensorView& target, const TensorView* class_weight,
                                           const TensorView* grad_output, const TensorView& loss,
                                           const TensorView* z_loss, const TensorView* accuracy,
                                           const TensorView* predicted, const TensorView* dx, const TensorView* dw,
                                           const TensorView* db, tigon_fused_linear_cross_entropy_params params,
                                           void* workspace, size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_fused_linear_cross_entropy_fwd(x, weight, detail::opt(bias), target, detail::opt(class_weight),
                                             detail::opt(grad_output), loss, detail::opt(z_loss), detail::opt(accuracy),
                                             detail::opt(predicted), detail::opt(dx), detail::opt(dw), detail::opt(db),
                                             params, workspace, workspace_bytes, stream));
}

inline void fused_linear_cross_entropy_bwd(const TensorView* dx, const TensorView* dw, const TensorView* db,
                                           const TensorView& grad_output, void* stream = nullptr) {
  check(tigon_fused_linear_cross_entropy_bwd(detail::opt(dx), detail::opt(dw), detail::opt(db), grad_output, stream));
}

inline size_t gemv_workspace_size(const TensorView& x, const TensorView& weight) {
  size_t bytes = 0;
  check(tigon_gemv_workspace_size(x, weight, &bytes));
  return bytes;
}

inline void gemv(const TensorView& x, const TensorView& weight, const TensorView* bias, const TensorView& y,
                 void* workspace = nullptr, size_t workspace_bytes = 0, void* stream = nullptr) {
  check(tigon_gemv(x, weight, detail::opt(bias), y, workspace, workspace_bytes, stream));
}

inline void quantize_rows(const TensorView& x, const TensorView& q, const TensorView& scale, void* stream = nullptr) {
  check(tigon_quantize_rows(x, q, scale, stream));
}

inline size_t int8_linear_workspace_size(const TensorView& q_x, const TensorView& q_w) {
  size_t bytes = 0;
  check(tigon_int8_linear_workspace_size(q_x, q_w, &bytes));
  return bytes;
}

inline void int8_linear(const TensorView& q_x, const TensorView& scale_x, const TensorView& q_w,
                        const TensorView& scale_w, const TensorView* bias, const TensorView& out,
                        tigon_int8_linear_params params, void* workspace = nullptr, size_t workspace_bytes = 0,
                        void* stream = nullptr) {
  check(tigon_int8_linear(q_x, scale_x, q_w, scale_w, detail::opt(bias), out, params, workspace, workspace_bytes,
                          stream));
}

inline size_t gemv_int8_workspace_size(const TensorView& x, const TensorView& q_w) {
  size_t bytes = 0;
  check(tigon_gemv_int8_workspace_size(x, q_w, &bytes));
  return bytes;
}

inline void gemv_int8(const TensorView& x, const TensorView& q_w, const TensorView& scale_w, const TensorView* bias,
                      const TensorView& y, void* workspace = nullptr, size_t workspace_bytes = 0,
                      void* stream = nullptr) {
  check(tigon_gemv_int8(x, q_w, scale_w, detail::opt(bias), y, workspace, workspace_bytes, stream));
}

inline void activation_fwd(const TensorView& x, const TensorView& y, tigon_activation_params params,
                           void* stream = nullptr) {
  check(tigon_activation_fwd(x, y, params, stream));
}

inline void activation_bwd(const TensorView& dy, const TensorView& saved, const TensorView& dx,
                           tigon_activation_params params, void* stream = nullptr) {
  check(tigon_activation_bwd(dy, saved, dx, params, stream));
}

// Workspace bytes (0 on the CPU) of linear_act_fwd and linear_act_bwd.
inline std::pair<size_t, size_t> linear_act_workspace_size(const TensorView& x, const TensorView& weight,
                                                           tigon_linear_act_params params) {
  size_t fwd = 0, bwd = 0;
  check(tigon_linear_act_fwd_workspace_size(x, weight, params, &fwd));
  check(tigon_linear_act_bwd_workspace_size(x, weight, params, &bwd));
  return {fwd, bwd};
}

inline void linear_act_fwd(const TensorView& x, const TensorView& weight, const TensorView* bias,
                           const TensorView* residual, const TensorView& out, const TensorView* z,
                           tigon_linear_act_params params, void* workspace, size_t workspace_bytes,
                           void* stream = nullptr) {
  check(tigon_linear_act_fwd(x, weight, detail::opt(bias), detail::opt(residual), out, detail::opt(z), params,
                             workspace, workspace_bytes, stream));
}

inline void linear_act_bwd(const TensorView& dy, const TensorView& x, const TensorView& weight, const TensorView* z,
                           const TensorView* y, const TensorView* dz, const TensorView* dx, const TensorView* dw,
                           const TensorView* db, tigon_linear_act_params params, void* workspace,
                           size_t workspace_bytes, void* stream = nullptr) {
  check(tigon_linear_act_bwd(dy, x, weight, detail::opt(z), detail::opt(y), detail::opt(dz), detail::opt(dx),
                             detail::opt(dw), detail::opt(db), params, workspace, workspace_bytes, stream));
}

inline size_t conv2d_fwd_workspace_size(const TensorView& x, const TensorView& weight, const TensorView* bias,
                                        const TensorView* residual, const TensorView& y, tigon_conv2d_params params) {
  size_t bytes = 0;
  check(tigon_conv2d_fwd_workspace_size(x, weight, detail::opt(bias), detail::opt(residual), y, params, &bytes));
  return bytes;
}

inline void conv2d_fwd(const TensorView& x, const TensorView& weight, const TensorView* bias,
                       const TensorView* residual, const TensorView& y, tigon_conv2d_params params,
                       void* workspace = nullptr, size_t workspace_bytes = 0, void* stream = nullptr) {
  check(tigon_conv2d_fwd(x, weight, detail::opt(bias), detail::opt(residual), y, params, workspace, workspace_bytes,
                         stream));
}

}  // namespace tigon
