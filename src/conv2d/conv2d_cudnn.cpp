// Convolutions other than the 1 x 1 GEMMs through cuDNN's graph API, when cuDNN 9 is in the process or loadable:
// convolution -> + bias -> + residual -> ReLU as one operation graph, which cuDNN runs as one engine with the pointwise
// ops in its epilogue (fp32 accumulator, one rounding). The bar for a fused convolution is the bare cuDNN convolution's
// time; CUTLASS's implicit GEMM has no persistent schedule and trailed it by 3-60% on ResNet-50's 3 x 3 layers
// (docs/performance/conv2d.md), while cuDNN's fused engines ran within 1-3% of its own bare ones.
//
// cuDNN is loaded at run time (dlopen), never linked: the library stays loadable without it, and where it is absent,
// or finds no engine for a problem, the convolution runs on the CUTLASS kernel. One plan per problem, built on its
// first call or workspace query (heuristics mode A, its first engine configuration that keeps the inputs' precision
// and needs at most kMaxWorkspace bytes of workspace, which the caller passes) and kept for the process. The
// workspace matters: on ResNet-50's first 3 x 3 layer the first configuration that needs none ran 1.24x the bare
// convolution's time, the first one overall 1.01x (docs/performance/conv2d.md). Building is host work only; execution
// is one asynchronous call on the caller's stream, so replays in CUDA graphs work once a shape has been seen outside a
// capture.
#include "conv2d/conv2d.h"

#if defined(TIGON_WITH_CUDNN)

#include <cudnn_graph.h>
#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "common/error.h"

namespace tigon::conv2d {
namespace {

// ---- the entry points used, from libcudnn_graph.so.9 (or the libcudnn.so.9 front that forwards to it) ----------

struct Cudnn {
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnBackendCreateDescriptor) create_desc = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy_desc = nullptr;
  decltype(&cudnnBackendSetAttribute) set_attr = nullptr;
  decltype(&cudnnBackendGetAttribute) get_attr = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
  bool ok = false;
};

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

// The copy already in the process first (PyTorch's), then one the dynamic loader finds.
const Cudnn& cudnn() {
  static const Cudnn api = [] {
    Cudnn a;
    void* lib = nullptr;
    for (int flags : {RTLD_NOW | RTLD_NOLOAD, RTLD_NOW | RTLD_LOCAL})
      for (const char* name : {"libcudnn_graph.so.9", "libcudnn.so.9"})
        if (!lib) lib = dlopen(name, flags);
    if (!lib) return a;
    a.ok = bind(lib, "cudnnCreate", a.create) && bind(lib, "cudnnSetStream", a.set_stream) &&
           bind(lib, "cudnnGetErrorString", a.error_string) &&
           bind(lib, "cudnnBackendCreateDescriptor", a.create_desc) &&
           bind(lib, "cudnnBackendDestroyDescriptor", a.destroy_desc) &&
           bind(lib, "cudnnBackendSetAttribute", a.set_attr) && bind(lib, "cudnnBackendGetAttribute", a.get_attr) &&
           bind(lib, "cudnnBackendFinalize", a.finalize) && bind(lib, "cudnnBackendExecute", a.execute);
    return a;
  }();
  return api;
}

// A step of building a plan failed: the problem goes to the CUTLASS kernel (the reason is not an error of the call).
struct NoPlan {};

// Descriptors live as long as the plan that refers to them: one owner per plan.
struct Descriptors {
  std::vector<cudnnBackendDescriptor_t> all;
  ~Descriptors() {
    for (auto it = all.rbegin(); it != all.rend(); ++it) cudnn().destroy_desc(*it);
  }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    if (cudnn().create_desc(type, &d) != CUDNN_STATUS_SUCCESS) throw NoPlan{};
    all.push_back(d);
    return d;
  }
};

template <class V>
void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
         const V* values) {
  if (cudnn().set_attr(d, name, type, n, values) != CUDNN_STATUS_SUCCESS) throw NoPlan{};
}

void finalize(cudnnBackendDescriptor_t d) {
  if (cudnn().finalize(d) != CUDNN_STATUS_SUCCESS) throw NoPlan{};
}

enum Uid : int64_t { kX = 1, kW, kBias, kResidual, kY, kConv, kPlusBias, kPlusResidual };

// A tensor of dims [n, c, h, w] in channels-last layout (the only one the API takes).
cudnnBackendDescriptor_t tensor(Descriptors& ds, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w,
                                cudnnDataType_t type, bool is_virtual) {
  cudnnBackendDescriptor_t d = ds.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c}, alignment = 16;
  set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  finalize(d);
  return d;
}

// y = mode(x [, b]) in fp32.
cudnnBackendDescriptor_t pointwise(Descriptors& ds, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                   cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t pw = ds.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
  set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
  finalize(pw);
  cudnnBackendDescriptor_t op = ds.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  finalize(op);
  return op;
}

// An engine that converts the 16-bit inputs down or reduces in lower precision than fp32 would not match the
// CUTLASS kernel's (and the reference's) accuracy.
bool keeps_precision(Descriptors& ds, cudnnBackendDescriptor_t config) {
  cudnnBackendDescriptor_t engine = ds.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  if (cudnn().get_attr(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) !=
      CUDNN_STATUS_SUCCESS)
    return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnn().get_attr(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                       CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  for (int64_t i = 0; i < n; ++i)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
        notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
      return false;
  return true;
}

// More than any configuration of the measured layers asked for; a larger one is passed over for the next
constexpr int64_t kMaxWorkspace = int64_t(256) << 20;

struct Plan {
  Descriptors descriptors;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;      // bytes
  std::vector<int64_t> uids;  // the tensors a call passes, in this order: x, w, y [, bias] [, residual]
};

std::unique_ptr<Plan> build(cudnnHandle_t handle, const Problem& p) {
  auto out = std::make_unique<Plan>();
  Descriptors& ds = out->descriptors;
  const cudnnDataType_t io = p.dtype == DType::kBFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const bool fused = p.bias || p.residual || p.relu;
  cudnnBackendDescriptor_t x = tensor(ds, kX, p.n, p.c, p.h, p.w, io, false);
  cudnnBackendDescriptor_t w = tensor(ds, kW, p.k, p.c, p.r, p.s, io, false);
  cudnnBackendDescriptor_t y = tensor(ds, kY, p.n, p.k, p.p, p.q, io, false);
  cudnnBackendDescriptor_t acc = fused ? tensor(ds, kConv, p.n, p.k, p.p, p.q, f32, true) : y;

  cudnnBackendDescriptor_t conv = ds.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2, dilation[2] = {p.dil_h, p.dil_w}, stride[2] = {p.stride_h, p.stride_w},
                pad[2] = {p.pad_h, p.pad_w};
  set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
  set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation);
  set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
  set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  finalize(conv);
  cudnnBackendDescriptor_t conv_op = ds.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1.f, beta = 0.f;
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &acc);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  set(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  finalize(conv_op);

  // the epilogue: each step a virtual fp32 tensor, the last one written to y (ReLU, or the last add)
  std::vector<cudnnBackendDescriptor_t> ops = {conv_op};
  out->uids = {kX, kW, kY};
  cudnnBackendDescriptor_t last = acc;
  auto add = [&](int64_t operand_uid, cudnnBackendDescriptor_t operand, int64_t result_uid, bool final_step) {
    cudnnBackendDescriptor_t sum = final_step ? y : tensor(ds, result_uid, p.n, p.k, p.p, p.q, f32, true);
    ops.push_back(pointwise(ds, CUDNN_POINTWISE_ADD, last, operand, sum));
    out->uids.push_back(operand_uid);
    last = sum;
  };
  if (p.bias) add(kBias, tensor(ds, kBias, 1, p.k, 1, 1, io, false), kPlusBias, !p.residual && !p.relu);
  if (p.residual) add(kResidual, tensor(ds, kResidual, p.n, p.k, p.p, p.q, io, false), kPlusResidual, !p.relu);
  if (p.relu) ops.push_back(pointwise(ds, CUDNN_POINTWISE_RELU_FWD, last, nullptr, y));

  cudnnBackendDescriptor_t graph = ds.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
  finalize(graph);
  cudnnBackendDescriptor_t heuristics = ds.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
  set(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
  finalize(heuristics);
  constexpr int kConfigs = 16;
  cudnnBackendDescriptor_t configs[kConfigs];
  for (auto& c : configs) c = ds.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t n_configs = 0;
  if (cudnn().get_attr(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, kConfigs, &n_configs,
                       configs) != CUDNN_STATUS_SUCCESS)
    throw NoPlan{};
  for (int64_t i = 0; i < n_configs; ++i) {
    if (!keeps_precision(ds, configs[i])) continue;
    cudnnBackendDescriptor_t plan = ds.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[i]);
    int64_t workspace = -1, n = 0;
    if (cudnn().finalize(plan) == CUDNN_STATUS_SUCCESS &&
        cudnn().get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &workspace) ==
            CUDNN_STATUS_SUCCESS &&
        workspace >= 0 && workspace <= kMaxWorkspace) {
      out->plan = plan;
      out->workspace = workspace;
      return out;
    }
  }
  throw NoPlan{};
}

using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int, int,
                       int, int>;

struct Cache {
  std::mutex mutex;
  std::map<int, cudnnHandle_t> handles;        // one per device, never destroyed (process lifetime)
  std::map<Key, std::unique_ptr<Plan>> plans;  // nullptr: no plan for the problem
};

Cache& cache() {
  static Cache* c = new Cache;  // leaked on purpose: no destruction order issues at exit
  return *c;
}

// The problem's plan, built on first use; nullptr where cuDNN does not take it. The caller holds c.mutex.
const Plan* plan_for(Cache& c, const Problem& p, int device, cudnnHandle_t* handle_out) {
  if (!cudnn().ok || (p.dtype != DType::kBFloat16 && p.dtype != DType::kFloat16)) return nullptr;
  cudnnHandle_t& handle = c.handles[device];
  if (!handle && cudnn().create(&handle) != CUDNN_STATUS_SUCCESS) {
    handle = nullptr;
    return nullptr;
  }
  *handle_out = handle;
  const Key key{device,      int(p.dtype),
                p.n,         p.c,
                p.h,         p.w,
                p.k,         p.r,
                p.s,         p.stride_h,
                p.stride_w,  p.pad_h,
                p.pad_w,     p.dil_h * 4096 + p.dil_w,
                int(p.relu), int(p.bias != nullptr) * 2 + int(p.residual != nullptr)};
  auto found = c.plans.find(key);
  if (found == c.plans.end()) {
    std::unique_ptr<Plan> plan;
    try {
      plan = build(handle, p);
    } catch (const NoPlan&) {
    }
    found = c.plans.emplace(key, std::move(plan)).first;
  }
  return found->second.get();
}

}  // namespace

size_t cudnn_workspace(const Problem& p, int device) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  cudnnHandle_t handle = nullptr;
  const Plan* plan = plan_for(c, p, device, &handle);
  return plan ? size_t(plan->workspace) : 0;
}

bool fwd_cudnn(const Problem& p, int device, void* workspace, size_t workspace_bytes, void* stream) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);  // a handle takes one stream at a time
  cudnnHandle_t handle = nullptr;
  const Plan* plan = plan_for(c, p, device, &handle);
  if (!plan) return false;
  if (workspace_bytes < size_t(plan->workspace) || (plan->workspace > 0 && !workspace))
    fail_arg("workspace", "has ", workspace_bytes, " bytes; this convolution needs ", plan->workspace,
             " bytes (tigon_conv2d_fwd_workspace_size)");

  std::vector<void*> pointers = {const_cast<void*>(p.x), const_cast<void*>(p.weight), p.y};
  if (p.bias) pointers.push_back(const_cast<void*>(p.bias));
  if (p.residual) pointers.push_back(const_cast<void*>(p.residual));
  Descriptors call;  // the variant pack: this call's pointers
  cudnnBackendDescriptor_t pack = nullptr;
  try {
    pack = call.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(plan->uids.size()), plan->uids.data());
    set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()), pointers.data());
    set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    finalize(pack);
  } catch (const NoPlan&) {
    fail(TIGON_ERROR_CUDA, "conv2d: cuDNN refused the call's tensors (variant pack)");
  }
  cudnnStatus_t st = cudnn().set_stream(handle, static_cast<cudaStream_t>(stream));
  if (st == CUDNN_STATUS_SUCCESS) st = cudnn().execute(handle, plan->plan, pack);
  if (st != CUDNN_STATUS_SUCCESS)
    fail(TIGON_ERROR_CUDA, "conv2d: cuDNN's fused convolution failed: ", cudnn().error_string(st));
  return true;
}

}  // namespace tigon::conv2d

#else  // built without cuDNN's headers: the CUTLASS kernel runs every convolution

namespace tigon::conv2d {
bool fwd_cudnn(const Problem&, int, void*, size_t, void*) { return false; }
size_t cudnn_workspace(const Problem&, int) { return 0; }
}  // namespace tigon::conv2d

#endif
