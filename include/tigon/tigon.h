/* Tigon C API: the core types every op family shares.
 *
 * Every entry point returns a tigon_status_t; on failure tigon_last_error() returns a message (thread-local, valid
 * until the next failing call on the same thread) that names the function and the offending argument.
 * Ops never allocate, never synchronise the device and launch only on the stream they are given, so they can be
 * called from torch.compile graphs and captured in CUDA graphs. Scratch memory comes in as a workspace whose size a
 * tigon_<op>_workspace_size() call reports.
 *
 * Tensors are described with DLPack's DLTensor layout (tigon_tensor below is field-for-field a DLTensor), so any
 * framework that exports DLPack can fill one without copying. Strides are in elements; NULL strides mean row-major
 * contiguous. The tensor's device decides which implementation runs: the CPU reference or the CUDA kernels.
 */
#ifndef TIGON_TIGON_H_
#define TIGON_TIGON_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TIGON_API __declspec(dllexport)
#else
#define TIGON_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TIGON_VERSION_MAJOR 0
#define TIGON_VERSION_MINOR 1
#define TIGON_VERSION_PATCH 0

typedef enum {
  TIGON_SUCCESS = 0,
  TIGON_ERROR_INVALID_ARGUMENT = 1, /* bad dtype, shape, stride, device or option: the caller's mistake */
  TIGON_ERROR_NOT_SUPPORTED = 2,    /* valid request this build cannot serve (e.g. CUDA tensor, CPU-only build) */
  TIGON_ERROR_CUDA = 3,             /* a CUDA runtime call or kernel launch failed */
  TIGON_ERROR_INTERNAL = 4          /* anything else: a bug, please report it */
} tigon_status_t;

/* Device types and dtype codes are DLPack's (DLDeviceType, DLDataTypeCode). */
typedef enum { TIGON_DEVICE_CPU = 1, TIGON_DEVICE_CUDA = 2 } tigon_device_type_t;
typedef enum {
  TIGON_DTYPE_CODE_INT = 0,
  TIGON_DTYPE_CODE_UINT = 1,
  TIGON_DTYPE_CODE_FLOAT = 2,
  TIGON_DTYPE_CODE_BFLOAT = 4
} tigon_dtype_code_t;

typedef struct {
  int32_t device_type; /* tigon_device_type_t */
  int32_t device_id;
} tigon_device;

typedef struct {
  uint8_t code; /* tigon_dtype_code_t */
  uint8_t bits;
  uint16_t lanes; /* always 1 */
} tigon_dtype;

/* The dtypes ops accept: float32 {FLOAT, 32}, float16 {FLOAT, 16}, bfloat16 {BFLOAT, 16}, int32 {INT, 32},
 * int64 {INT, 64}; lanes is always 1. */

/* Field-for-field DLPack's DLTensor. */
typedef struct {
  void* data;
  tigon_device device;
  int32_t ndim;
  tigon_dtype dtype;
  const int64_t* shape;   /* ndim entries */
  const int64_t* strides; /* ndim entries, in elements; NULL = row-major contiguous */
  uint64_t byte_offset;
} tigon_tensor;

/* "MAJOR.MINOR.PATCH" plus the CUDA architectures this build carries, e.g. "0.1.0 (cuda: 90a)". */
TIGON_API const char* tigon_version(void);

/* 1 if this build carries CUDA kernels, 0 for a CPU-only build. */
TIGON_API int tigon_has_cuda(void);

/* The message of the last failing call on this thread ("" if none). */
TIGON_API const char* tigon_last_error(void);

/* A short name for a status code ("invalid argument", ...). */
TIGON_API const char* tigon_status_string(tigon_status_t status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIGON_TIGON_H_ */
