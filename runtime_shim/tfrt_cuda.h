/* tfrt_cuda.h - the CUDA backend of the runtime shim: kernels are PTX,
 * loaded into the device's primary context and launched on one stream per
 * model context.  Implements tfrt_backend.h.
 *
 * The executables' containers (IREE's CDA1 flatbuffers, kept as read-only
 * data of the model) are parsed at build time: the generated code gives this
 * backend plain tables (tfrt_cu_kernel_desc) that point into them, and the
 * NUL-terminated PTX image is passed to the driver where it lies.
 *
 * This header does not include <cuda.h> (no CUDA SDK is needed to build):
 * tfaot computes the context size from the C text of the structs, so driver
 * handles are stored here as plain pointers and CUdeviceptr as uint64_t, and
 * the driver's functions as void pointers loaded from libcuda.so.1 at init
 * (tfrt_cuda.c declares them). */
#ifndef TFRT_CUDA_H_
#define TFRT_CUDA_H_

#include "tfrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFRT_BACKEND_NAME "cuda"

/* Kernel parameters per launch: one pointer per binding, one 32-bit value
 * per constant (checked against the containers at build time). */
#define TFRT_CU_MAX_BINDINGS 32u
#define TFRT_CU_MAX_CONSTANTS 64u
/* Number of driver functions the backend loads (TFRT_CU_FUNCTIONS in the .c). */
#define TFRT_CU_FUNCTION_COUNT 22u

/* One kernel of an executable, from its CDA1 container. */
typedef struct tfrt_cu_kernel_desc {
  uint32_t name_offset;           /* byte offset of the NUL-terminated kernel name */
  uint32_t block_x;               /* threads per block (the export's block dims) */
  uint32_t block_y;
  uint32_t block_z;
  uint32_t shared_memory_bytes;   /* dynamic shared memory per block */
  uint32_t constant_count;        /* 32-bit parameters after the pointers */
  uint32_t binding_count;         /* 64-bit pointer parameters */
} tfrt_cu_kernel_desc;

/* One executable container: the read-only data executable.load receives,
 * its PTX image and its kernels (a range of the model's kernel table). */
typedef struct tfrt_cu_executable_desc {
  const uint8_t *container;
  uint32_t ptx_offset;            /* byte offset of the NUL-terminated PTX text */
  uint32_t first_kernel;
  uint32_t kernel_count;
} tfrt_cu_executable_desc;

struct tfrt_executable {
  tfrt_obj hdr;
  tfrt_runtime *rt;
  const tfrt_cu_executable_desc *desc;
  uint32_t *function_ids;         /* name slot -> kernel index, resolved at load */
  void *module;                   /* CUmodule */
};

/* The CUDA backend's part of a context.  The generated init fills the first
 * group (static tables and storage inside the context); init fills the rest. */
typedef struct tfrt_backend {
  const tfrt_cu_executable_desc *executable_descs;
  uint32_t executable_desc_count;
  const tfrt_cu_kernel_desc *kernel_descs;
  uint32_t kernel_count;
  void **kernels;                     /* kernel_count CUfunctions, in the context */
  tfrt_staging staging;               /* bytes: set by the generated init */

  void *driver;                       /* dlopen handle of libcuda.so.1 */
  void *fn[TFRT_CU_FUNCTION_COUNT];
  void *context;                      /* CUcontext: the device's primary context */
  void *stream;                       /* CUstream, this context's own */
  uint64_t memory;                    /* CUdeviceptr: arena + staging */
  size_t memory_bytes;
  uint8_t *mapped;                    /* the core's name for it: the device address */
  int32_t device;                     /* CUdevice */
  int32_t last_result;                /* CUresult of the last failed driver call */
  uint32_t kernels_loaded;
  uint32_t pending;                   /* launches not yet synchronized */
} tfrt_backend;

#ifdef __cplusplus
}
#endif

/* The arena is device memory: the host reaches it through the backend. */
#define TFRT_DEVICE_MEMORY 1
#include "tfrt_backend.h"

#endif /* TFRT_CUDA_H_ */
