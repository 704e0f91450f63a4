// Distillation C API: argument validation, then the CPU reference or the CUDA path by the tensors' device.
#include <cmath>
#include <cstdint>

#include "common/device.h"
#include "common/error.h"
#include "common/tensor.h"
#include "distill/distill.h"
#include "tigon/distill.h"

namespace tigon::distill {
namespace {

void check_params(const tigon_distill_params& p) {
  if (p.divergence < TIGON_DIVERGENCE_KL || p.divergence > TIGON_DIVERGENCE_TVD)
    fail_arg("divergence", "must be 0 (KL), 1 (JSD) or 2 (TVD), got ", p.divergence);
  if (p.teacher < TIGON_DISTILL_TEACHER_LOGITS || p.teacher > TIGON_DISTILL_TEACHER_PROBS)
    fail_arg("teacher_mode", "must be 0 (logits), 1 (log-probabilities) or 2 (probabilities), got ", p.teacher);
  if (p.reduction < TIGON_DISTILL_REDUCTION_NONE || p.reduction > TIGON_DISTILL_REDUCTION_BATCHMEAN)
    fail_arg("reduction", "must be 0 (none), 1 (mean), 2 (sum) or 3 (batchmean), got ", p.reduction);
  if (!(p.beta >= 0.f && p.beta <= 1.f)) fail_arg("beta", "must be in [0, 1], got ", p.beta);
  if (!(p.temperature > 0.f) || !std::isfinite(p.temperature))
    fail_arg("temperature", "must be finite and > 0, got ", p.temperature);
}

// A [rows, cols] operand in `like`'s dtype on `on`'s device.
RowMatrix check_rows(const tigon_tensor* t, const char* arg, const tigon_tensor& on, const RowMatrix& like) {
  const tigon_tensor& tt = require(t, arg);
  check_same_device(on, "student", tt, arg);
  const RowMatrix m = as_rows(tt, arg);
  if (m.rows != like.rows || m.cols != like.cols)
    fail_arg(arg, "must have ", like.rows, " rows of ", like.cols, " like student, got ", m.rows, " rows of ", m.cols);
  check_dtype_in(m.dtype, arg, {like.dtype});
  return m;
}

}  // namespace

Kind kind_of(const tigon_distill_params& p) {
  if (p.divergence == TIGON_DIVERGENCE_TVD) return Kind::kTVD;
  if (p.divergence == TIGON_DIVERGENCE_KL || p.beta == 0.f) return Kind::kForwardKL;
  return p.beta == 1.f ? Kind::kReverseKL : Kind::kJSD;
}

size_t fwd_workspace_bytes(int64_t rows) { return size_t(4 + rows) * sizeof(float); }

}  // namespace tigon::distill

using namespace tigon;
using namespace tigon::distill;

extern "C" {

tigon_status_t tigon_distill_fwd_workspace_size(const tigon_tensor* student, size_t* bytes) {
  return api_guard("tigon_distill_fwd_workspace_size", [&] {
    if (bytes == nullptr) fail_arg("bytes", "is required but was NULL");
    const tigon_tensor& st = require(student, "student");
    const RowMatrix m = as_rows(st, "student");
    *bytes = is_cuda(st) ? fwd_workspace_bytes(m.rows) : 0;
  });
}

tigon_status_t tigon_distill_fwd(const tigon_tensor* student, const tigon_tensor* teacher, const tigon_tensor* labels,
                                 const tigon_tensor* loss, const tigon_tensor* grad, tigon_distill_params params,
                                 void* workspace, size_t workspace_bytes, void* stream) {
  return api_guard("tigon_distill_fwd", [&] {
    check_params(params);
    const tigon_tensor& st = require(student, "student");
    FwdProblem p;
    p.student = as_rows(st, "student");
    check_dtype_in(p.student.dtype, "student", {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
    if (p.student.cols == 0) fail_arg("student", "needs at least one class (last dimension is 0)");
    const int64_t rows = p.student.rows;
    p.teacher = check_rows(teacher, "teacher", st, p.student);
    if (p.teacher.data == p.student.data && rows > 0) fail_arg("teacher", "must not be the student's own memory");

    if (labels) {
      const tigon_tensor& lt = require(labels, "labels");
      check_same_device(st, "student", lt, "labels");
      const DType d = dtype_of(lt, "labels");
      check_dtype_in(d, "labels", {DType::kInt64, DType::kInt32});
      p.labels64 = d == DType::kInt64;
      p.labels = as_vector(lt, "labels", rows);
    }

    const int64_t n_out = params.reduction == TIGON_DISTILL_REDUCTION_NONE ? rows : 1;
    const tigon_tensor& ot = require(loss, "loss");
    check_same_device(st, "student", ot, "loss");
    check_dtype_in(dtype_of(ot, "loss"), "loss", {DType::kFloat32});
    p.loss = static_cast<float*>(as_vector(ot, "loss", n_out));

    if (grad) {
      p.grad = check_rows(grad, "grad", st, p.student);
      for (const RowMatrix* m : {&p.student, &p.teacher})
        if (p.grad.data == m->data && p.grad.row_stride != m->row_stride)
          fail_arg("grad", "may alias the student or the teacher only with the same strides");
      if (rows == 0) p.grad.data = nullptr;
    }

    p.kind = kind_of(params);
    p.teacher_mode = params.teacher;
    p.reduction = params.reduction;
    p.beta = params.beta;
    p.temperature = params.temperature;
    p.ignore_index = params.ignore_index;
    if (is_cuda(st)) {
      TIGON_ON_CUDA(st, {
        const size_t need = fwd_workspace_bytes(rows);
        if (workspace_bytes < need || workspace == nullptr)
          fail_arg("workspace", "needs ", need, " bytes (tigon_distill_fwd_workspace_size), got ", workspace_bytes);
        if ((reinterpret_cast<uintptr_t>(workspace) & 7u) != 0) fail_arg("workspace", "must be 8-byte aligned");
        fwd_cuda(p, workspace, stream);
      });
    } else {
      fwd_cpu(p);
    }
  });
}

}  // extern "C"
