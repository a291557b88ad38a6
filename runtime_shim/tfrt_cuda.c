/* tfrt_cuda.c - the CUDA backend of the runtime shim (see tfrt_cuda.h and
 * tfrt_backend.h).  Included by the generated model source after
 * tfrt_core.c.
 *
 * The driver (libcuda.so.1) is opened with dlopen at init: the library has
 * no build or link dependency on CUDA, and a machine without a driver or
 * GPU gets TFRT_STATUS_DEVICE, not a crash.  The driver functions are
 * declared below with their versioned symbol names; tests compile these
 * declarations against the real cuda.h.
 *
 * Context: the first device's primary context, made current on the calling
 * thread by every entry point (contexts may be used from any thread), and
 * one non-blocking stream per model context, so contexts in different
 * threads do not wait for each other.
 *
 * Memory: the whole arena (weights, state, temporaries) and a staging area
 * after it are one device allocation.  The core's arena allocator works on
 * its device addresses as it does on host memory, but the host never touches
 * those bytes: arena buffers carry TFRT_FLAG_DEVICE, and the core's
 * vm.buffer.* operations and the generated code's reads of outputs and state
 * come here (tfrt_backend_read/write/copy/fill), which use the copy engine.
 * (Managed memory, which the host may touch, cost about 38 us per copy of a
 * step's input or output on an H100: 76 of a 104 us LSTM(512) step.)  Those
 * copies and fills are queued on the stream like the kernels; a read back
 * to the host, and every call before it returns, waits for the stream
 * (tfrt_backend_sync).  The step's input lives in caller (context) memory:
 * such a read-only buffer is copied on the stream into the staging area.
 *
 * Ordering: launches on one stream run in order, so the host program's
 * dispatches need no barriers. */
#ifndef TFRT_UNITY_BUILD
/* Compiled on its own (an IDE, or a CMake file(GLOB) of every .c in src/):
 * the model's source NAME.c includes this file, so there is nothing to
 * compile here.  (A declaration keeps the unit from being empty.) */
typedef int tfrt_tfrt_cuda_c_is_included_by_the_model_source;
#else
#include <stddef.h>

/* ---- driver API (cuda.h's types, without cuda.h) ----------------------------- */

/* CUresult and the enum parameters: enums of non-negative values, which GCC
 * and Clang make unsigned int.  Handles are pointers to cuda.h's own
 * (incomplete) struct tags; CUdeviceptr is unsigned long long on LP64. */
typedef unsigned int tfrt_cu_result;
typedef int tfrt_cu_device;
typedef unsigned long long tfrt_cu_deviceptr;
typedef struct CUctx_st *tfrt_cu_context;
typedef struct CUstream_st *tfrt_cu_stream;
typedef struct CUmod_st *tfrt_cu_module;
typedef struct CUfunc_st *tfrt_cu_function;

#define TFRT_CU_SUCCESS 0u
#define TFRT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8u
#define TFRT_CU_STREAM_NON_BLOCKING 1u
/* Launches may use this much dynamic shared memory without opting in. */
#define TFRT_CU_DEFAULT_SHARED_BYTES 49152u

/* X(symbol, parameters): every driver function the backend calls, by the
 * symbol libcuda.so.1 exports (cuda.h maps the unversioned names to them). */
#define TFRT_CU_FUNCTIONS(X)                                                              \
  X(cuInit, (unsigned int flags))                                                         \
  X(cuDeviceGetCount, (int *count))                                                       \
  X(cuDeviceGet, (tfrt_cu_device *device, int ordinal))                                   \
  X(cuDevicePrimaryCtxRetain, (tfrt_cu_context *context, tfrt_cu_device device))         \
  X(cuDevicePrimaryCtxRelease_v2, (tfrt_cu_device device))                                \
  X(cuCtxSetCurrent, (tfrt_cu_context context))                                           \
  X(cuStreamCreate, (tfrt_cu_stream *stream, unsigned int flags))                         \
  X(cuStreamDestroy_v2, (tfrt_cu_stream stream))                                          \
  X(cuStreamSynchronize, (tfrt_cu_stream stream))                                         \
  X(cuMemAlloc_v2, (tfrt_cu_deviceptr *pointer, size_t bytes))                           \
  X(cuMemFree_v2, (tfrt_cu_deviceptr pointer))                                            \
  X(cuMemcpyHtoDAsync_v2,                                                                 \
    (tfrt_cu_deviceptr dst, const void *src, size_t bytes, tfrt_cu_stream stream))        \
  X(cuMemcpyDtoH_v2, (void *dst, tfrt_cu_deviceptr src, size_t bytes))                    \
  X(cuMemcpyDtoDAsync_v2, (tfrt_cu_deviceptr dst, tfrt_cu_deviceptr src, size_t bytes,     \
                           tfrt_cu_stream stream))                                        \
  X(cuMemsetD8Async, (tfrt_cu_deviceptr dst, unsigned char value, size_t count,            \
                      tfrt_cu_stream stream))                                             \
  X(cuMemsetD16Async, (tfrt_cu_deviceptr dst, unsigned short value, size_t count,          \
                       tfrt_cu_stream stream))                                            \
  X(cuMemsetD32Async, (tfrt_cu_deviceptr dst, unsigned int value, size_t count,            \
                       tfrt_cu_stream stream))                                            \
  X(cuModuleLoadData, (tfrt_cu_module *module, const void *image))                        \
  X(cuModuleUnload, (tfrt_cu_module module))                                              \
  X(cuModuleGetFunction, (tfrt_cu_function *function, tfrt_cu_module module,             \
                          const char *name))                                              \
  X(cuFuncSetAttribute, (tfrt_cu_function function, unsigned int attribute, int value))   \
  X(cuLaunchKernel,                                                                       \
    (tfrt_cu_function function, unsigned int grid_x, unsigned int grid_y,                 \
     unsigned int grid_z, unsigned int block_x, unsigned int block_y,                     \
     unsigned int block_z, unsigned int shared_bytes, tfrt_cu_stream stream,              \
     void **params, void **extra))

/* tfrt_cu_fn_cuInit, ...: the driver functions' pointer types. */
#define TFRT_CU_TYPEDEF(f, params) typedef tfrt_cu_result(*tfrt_cu_fn_##f) params;
TFRT_CU_FUNCTIONS(TFRT_CU_TYPEDEF)
#undef TFRT_CU_TYPEDEF

#ifndef TFRT_CU_DECLARATIONS_ONLY /* tests check the declarations above alone */

#include <dlfcn.h>

#include "tfrt_cuda.h"

enum {
#define TFRT_CU_INDEX(f, params) TFRT_CU_##f,
  TFRT_CU_FUNCTIONS(TFRT_CU_INDEX)
#undef TFRT_CU_INDEX
  TFRT_CU_LOADED_COUNT_
};
_Static_assert(TFRT_CU_LOADED_COUNT_ == TFRT_CU_FUNCTION_COUNT,
               "TFRT_CU_FUNCTION_COUNT in tfrt_cuda.h must count TFRT_CU_FUNCTIONS");

/* Calls a loaded driver function: CU(be, cuInit)(0). */
#define CU(be, f) ((tfrt_cu_fn_##f)(be)->fn[TFRT_CU_##f])

/* Returns TFRT_STATUS_DEVICE from the enclosing function when a call fails. */
#define TFRT_CU_CHECK(be, call)                       \
  do {                                                \
    tfrt_cu_result r_ = (call);                       \
    if (r_ != TFRT_CU_SUCCESS) {                      \
      (be)->last_result = (int32_t)r_;                \
      return TFRT_STATUS_DEVICE;                      \
    }                                                 \
  } while (0)

/* The driver API acts on the calling thread's current context. */
static int tfrt_cu_make_current(tfrt_backend *be) {
  TFRT_CU_CHECK(be, CU(be, cuCtxSetCurrent)((tfrt_cu_context)be->context));
  return TFRT_OK;
}

/* ---- init ------------------------------------------------------------------ */

static int tfrt_cu_load_driver(tfrt_backend *be) {
  static const char *const names[] = {
#define TFRT_CU_NAME(f, params) #f,
      TFRT_CU_FUNCTIONS(TFRT_CU_NAME)
#undef TFRT_CU_NAME
  };
  be->driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!be->driver) return TFRT_STATUS_DEVICE;
  for (uint32_t i = 0; i < TFRT_CU_FUNCTION_COUNT; ++i) {
    be->fn[i] = dlsym(be->driver, names[i]);
    if (!be->fn[i]) return TFRT_STATUS_DEVICE;
  }
  return TFRT_OK;
}

/* The first device and its primary context. */
static int tfrt_cu_open_device(tfrt_backend *be) {
  int count = 0;
  tfrt_cu_device device = 0;
  TFRT_CU_CHECK(be, CU(be, cuInit)(0));
  TFRT_CU_CHECK(be, CU(be, cuDeviceGetCount)(&count));
  if (count < 1) return TFRT_STATUS_DEVICE;
  TFRT_CU_CHECK(be, CU(be, cuDeviceGet)(&device, 0));
  tfrt_cu_context context = NULL;
  TFRT_CU_CHECK(be, CU(be, cuDevicePrimaryCtxRetain)(&context, device));
  be->device = device;
  be->context = context;
  int status = tfrt_cu_make_current(be);
  if (status != TFRT_OK) return status;
  tfrt_cu_stream stream = NULL;
  TFRT_CU_CHECK(be, CU(be, cuStreamCreate)(&stream, TFRT_CU_STREAM_NON_BLOCKING));
  be->stream = stream;
  return TFRT_OK;
}

/* Arena + staging in device memory.  The core's arena base is the device
 * address itself (never dereferenced on the host: see the top). */
static int tfrt_cu_create_memory(tfrt_backend *be, tfrt_arena *arena) {
  size_t bytes = tfrt_round_up(arena->arena_bytes, TFRT_ALIGNMENT) + be->staging.bytes;
  tfrt_cu_deviceptr memory = 0;
  TFRT_CU_CHECK(be, CU(be, cuMemAlloc_v2)(&memory, bytes));
  be->memory = memory;
  be->memory_bytes = bytes;
  be->mapped = (uint8_t *)(uintptr_t)memory;
  arena->arena = be->mapped;
  return TFRT_OK;
}

TFRT_INTERNAL int tfrt_backend_init(tfrt_runtime *rt) {
  tfrt_backend *be = &rt->backend;
  int status = tfrt_cu_load_driver(be);
  if (status == TFRT_OK) status = tfrt_cu_open_device(be);
  if (status == TFRT_OK) status = tfrt_cu_create_memory(be, &rt->arena);
  if (status != TFRT_OK) tfrt_backend_deinit(rt);
  return status;
}

TFRT_INTERNAL void tfrt_backend_deinit(tfrt_runtime *rt) {
  tfrt_backend *be = &rt->backend;
  if (be->context && tfrt_cu_make_current(be) == TFRT_OK) {
    tfrt_cu_stream stream = (tfrt_cu_stream)be->stream;
    if (stream) CU(be, cuStreamSynchronize)(stream);
    for (uint32_t i = 0; i < rt->executables.used; ++i)
      if (rt->executables.slots[i].module)
        CU(be, cuModuleUnload)((tfrt_cu_module)rt->executables.slots[i].module);
    if (be->memory) CU(be, cuMemFree_v2)(be->memory);
    if (stream) CU(be, cuStreamDestroy_v2)(stream);
  }
  if (be->context) CU(be, cuDevicePrimaryCtxRelease_v2)(be->device);
  if (be->driver) dlclose(be->driver);
  for (uint32_t i = 0; i < rt->executables.used; ++i) rt->executables.slots[i].module = NULL;
  be->driver = be->context = be->stream = NULL;
  be->memory = 0;
  be->memory_bytes = 0;
  be->mapped = NULL;
  be->kernels_loaded = 0;
  be->pending = 0;
  rt->arena.arena = NULL;
}

/* ---- synchronization ----------------------------------------------------------- */

static void tfrt_cu_end_batch(tfrt_backend *be) {
  be->pending = 0;
  tfrt_staging_clear(&be->staging);
}

TFRT_INTERNAL int tfrt_backend_sync(tfrt_runtime *rt) {
  tfrt_backend *be = &rt->backend;
  if (!be->pending) return TFRT_OK;
  int status = tfrt_cu_make_current(be);
  tfrt_cu_result r = CU(be, cuStreamSynchronize)((tfrt_cu_stream)be->stream);
  tfrt_cu_end_batch(be);
  if (r != TFRT_CU_SUCCESS) {
    be->last_result = (int32_t)r;
    return TFRT_STATUS_DEVICE;
  }
  return status;
}

/* ---- host access to device memory (TFRT_FLAG_DEVICE) ----------------------------- */

/* Whether [p, p + bytes) lies in the device allocation. */
static int tfrt_cu_on_device(const tfrt_backend *be, const uint8_t *p, size_t bytes) {
  return be->mapped && p >= be->mapped && (size_t)(p - be->mapped) <= be->memory_bytes &&
         bytes <= be->memory_bytes - (size_t)(p - be->mapped);
}

static tfrt_cu_deviceptr tfrt_cu_address(const tfrt_backend *be, const uint8_t *p) {
  return be->memory + (size_t)(p - be->mapped);
}

/* Copies and memsets into device memory are queued on the context's
 * stream, after the kernels before them and before those after them, so the
 * generated code does not wait before them (tfrt_backend_before_buffer_op).
 * The host memory they read is the call's (a constant, the caller's input,
 * a local), and every call waits for its stream before it returns; from
 * pageable memory the driver has taken the bytes when the call returns. */
static void tfrt_cu_queued(tfrt_backend *be) { be->pending = 1; }

/* Device bytes to host memory, once the stream has done what came before;
 * host bytes (a constant, a caller's buffer) are copied as they are. */
TFRT_INTERNAL int tfrt_backend_read(tfrt_runtime *rt, void *dst, const uint8_t *src,
                                    size_t bytes) {
  tfrt_backend *be = &rt->backend;
  if (!tfrt_cu_on_device(be, src, bytes)) {
    memcpy(dst, src, bytes);
    return TFRT_OK;
  }
  if (bytes == 0) return TFRT_OK;
  int status = tfrt_backend_sync(rt);
  if (status == TFRT_OK) status = tfrt_cu_make_current(be);
  if (status != TFRT_OK) return status;
  TFRT_CU_CHECK(be, CU(be, cuMemcpyDtoH_v2)(dst, tfrt_cu_address(be, src), bytes));
  return TFRT_OK;
}

TFRT_INTERNAL int tfrt_backend_write(tfrt_runtime *rt, uint8_t *dst, const void *src,
                                     size_t bytes) {
  tfrt_backend *be = &rt->backend;
  if (bytes == 0) return TFRT_OK;
  int status = tfrt_cu_make_current(be);
  if (status != TFRT_OK) return status;
  TFRT_CU_CHECK(be, CU(be, cuMemcpyHtoDAsync_v2)(tfrt_cu_address(be, dst), src, bytes,
                                                 (tfrt_cu_stream)be->stream));
  tfrt_cu_queued(be);
  return TFRT_OK;
}

/* vm.buffer.copy with either side (or both) in device memory. */
TFRT_INTERNAL int tfrt_backend_copy(tfrt_runtime *rt, uint8_t *dst, const uint8_t *src,
                                    size_t bytes) {
  tfrt_backend *be = &rt->backend;
  if (!tfrt_cu_on_device(be, dst, bytes)) return tfrt_backend_read(rt, dst, src, bytes);
  if (!tfrt_cu_on_device(be, src, bytes)) return tfrt_backend_write(rt, dst, src, bytes);
  if (bytes == 0) return TFRT_OK;
  int status = tfrt_cu_make_current(be);
  if (status != TFRT_OK) return status;
  TFRT_CU_CHECK(be, CU(be, cuMemcpyDtoDAsync_v2)(tfrt_cu_address(be, dst),
                                                 tfrt_cu_address(be, src), bytes,
                                                 (tfrt_cu_stream)be->stream));
  tfrt_cu_queued(be);
  return TFRT_OK;
}

/* vm.buffer.fill: `count` elements of `width` bytes (1, 2, 4 or 8). */
TFRT_INTERNAL int tfrt_backend_fill(tfrt_runtime *rt, uint8_t *dst, size_t count,
                                    uint64_t value, uint32_t width) {
  tfrt_backend *be = &rt->backend;
  if (count == 0) return TFRT_OK;
  int status = tfrt_cu_make_current(be);
  if (status != TFRT_OK) return status;
  tfrt_cu_deviceptr at = tfrt_cu_address(be, dst);
  tfrt_cu_stream stream = (tfrt_cu_stream)be->stream;
  if (width == 8 && (uint32_t)value == (uint32_t)(value >> 32)) {
    width = 4;  /* a repeated 32-bit half: one memset */
    count *= 2;
  }
  if (width == 1) {
    TFRT_CU_CHECK(be, CU(be, cuMemsetD8Async)(at, (unsigned char)value, count, stream));
  } else if (width == 2) {
    TFRT_CU_CHECK(be, CU(be, cuMemsetD16Async)(at, (unsigned short)value, count, stream));
  } else if (width == 4) {
    TFRT_CU_CHECK(be, CU(be, cuMemsetD32Async)(at, (unsigned int)value, count, stream));
  } else {
    for (size_t i = 0; i < count; ++i)  /* 64-bit patterns: rare, element by element */
      TFRT_CU_CHECK(be, CU(be, cuMemcpyHtoDAsync_v2)(at + i * 8u, &value, 8u, stream));
    /* (&value is this function's: wait before it goes) */
    tfrt_cu_queued(be);
    return tfrt_backend_sync(rt);
  }
  tfrt_cu_queued(be);
  return TFRT_OK;
}

/* Launched kernels cannot be recalled: wait for them, so the staging area
 * and the arena are free again. */
TFRT_INTERNAL void tfrt_backend_discard(tfrt_runtime *rt) {
  (void)tfrt_backend_sync(rt);
}

/* ---- hal_loader.* ------------------------------------------------------------ */

TFRT_INTERNAL int tfrt_executable_query_support(const tfrt_buffer *format, int32_t *out) {
  *out = tfrt_cstr_eq(format, "cuda-nvptx-fb") ? 1 : 0;
  return TFRT_OK;
}

/* Loads the PTX (the driver compiles it for the device, once) and looks up
 * each kernel of the executable. */
static int tfrt_cu_load_kernels(tfrt_backend *be, const tfrt_cu_executable_desc *desc,
                                tfrt_executable *exe) {
  tfrt_cu_module module = NULL;
  TFRT_CU_CHECK(be, CU(be, cuModuleLoadData)(&module, desc->container + desc->ptx_offset));
  exe->module = module;
  for (uint32_t k = desc->first_kernel; k < desc->first_kernel + desc->kernel_count; ++k) {
    if (k != be->kernels_loaded) return TFRT_STATUS_INVALID_ARGUMENT; /* loaded twice */
    const tfrt_cu_kernel_desc *kd = &be->kernel_descs[k];
    tfrt_cu_function function = NULL;
    TFRT_CU_CHECK(be, CU(be, cuModuleGetFunction)(
                          &function, module, (const char *)desc->container + kd->name_offset));
    if (kd->shared_memory_bytes > TFRT_CU_DEFAULT_SHARED_BYTES)
      TFRT_CU_CHECK(be, CU(be, cuFuncSetAttribute)(
                            function, TFRT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            (int)kd->shared_memory_bytes));
    be->kernels[k] = function;
    be->kernels_loaded++;
  }
  return TFRT_OK;
}

/* hal_loader.executable.load(format, data, constants) -> !hal.executable.
 * `data` is one of the model's executable containers; its kernels are
 * loaded now and every dispatch name is resolved to a kernel index. */
TFRT_INTERNAL int tfrt_executable_load(tfrt_runtime *rt, const tfrt_buffer *format,
                                       const tfrt_buffer *data, const tfrt_buffer *constants,
                                       tfrt_executable **out) {
  *out = NULL;
  if (!tfrt_cstr_eq(format, "cuda-nvptx-fb")) return TFRT_STATUS_UNIMPLEMENTED;
  if (constants && constants->length) return TFRT_STATUS_UNIMPLEMENTED;
  if (!data) return TFRT_STATUS_NULL_REF;
  tfrt_backend *be = &rt->backend;
  const tfrt_cu_executable_desc *desc = NULL;
  for (uint32_t i = 0; i < be->executable_desc_count; ++i)
    if (be->executable_descs[i].container == data->data) desc = &be->executable_descs[i];
  if (!desc) return TFRT_STATUS_NOT_FOUND;
  int status = tfrt_cu_make_current(be);
  if (status != TFRT_OK) return status;
  tfrt_executable *exe = tfrt_executable_new(rt);
  if (!exe) return TFRT_STATUS_OUT_OF_MEMORY;
  exe->rt = rt;
  exe->desc = desc;
  status = tfrt_cu_load_kernels(be, desc, exe); /* deinit unloads a partial load */
  if (status != TFRT_OK) return status;
  for (uint32_t k = desc->first_kernel; k < desc->first_kernel + desc->kernel_count; ++k)
    tfrt_executable_name(rt, exe, (const char *)desc->container + be->kernel_descs[k].name_offset,
                         k);
  *out = exe;
  return TFRT_OK;
}

/* One device address per binding; the kernels' pointer parameters are
 * declared 16-byte aligned. */
static int tfrt_cu_binding_addresses(tfrt_runtime *rt, uint32_t binding_count,
                                     const tfrt_binding *bindings, uint64_t *addresses) {
  tfrt_backend *be = &rt->backend;
  for (uint32_t i = 0; i < binding_count; ++i) {
    const tfrt_binding *b = &bindings[i];
    if (!b->buffer) return TFRT_STATUS_NULL_REF;
    if (!tfrt_range_ok(b->buffer, b->offset, b->length)) return TFRT_STATUS_OUT_OF_RANGE;
    size_t offset = 0;
    int copy = 0;
    int status = tfrt_device_offset(&rt->arena, &be->staging, b, &offset, &copy);
    if (status != TFRT_OK) return status;
    addresses[i] = be->memory + offset;
    if (copy) {  /* a read-only caller buffer: copied on the stream, before the launch */
      TFRT_CU_CHECK(be, CU(be, cuMemcpyHtoDAsync_v2)(addresses[i], b->buffer->data + b->offset,
                                                     (size_t)b->length,
                                                     (tfrt_cu_stream)be->stream));
      be->pending = 1;
    }
    if (addresses[i] % 16u) return TFRT_STATUS_ALIGNMENT;
  }
  return TFRT_OK;
}

/* hal_loader.executable.dispatch: launches one kernel on the stream. */
TFRT_INTERNAL int tfrt_executable_dispatch(const tfrt_executable *exe, int64_t function_id,
                                           int32_t count_x, int32_t count_y, int32_t count_z,
                                           uint32_t constant_count, const uint32_t *constants,
                                           uint32_t binding_count, const tfrt_binding *bindings,
                                           void **binding_ptrs, size_t *binding_lengths) {
  (void)binding_ptrs;
  (void)binding_lengths;
  if (!exe) return TFRT_STATUS_NULL_REF;
  tfrt_backend *be = &exe->rt->backend;
  if (function_id < 0 || (uint64_t)function_id >= be->kernels_loaded)
    return TFRT_STATUS_INVALID_ARGUMENT;
  const tfrt_cu_kernel_desc *desc = &be->kernel_descs[function_id];
  if (count_x < 0 || count_y < 0 || count_z < 0) return TFRT_STATUS_INVALID_ARGUMENT;
  if (binding_count != desc->binding_count || constant_count != desc->constant_count)
    return TFRT_STATUS_INVALID_ARGUMENT;
  if (count_x == 0 || count_y == 0 || count_z == 0) return TFRT_OK; /* an empty grid */
  int status = tfrt_cu_make_current(be);
  if (status != TFRT_OK) return status;
  uint64_t addresses[TFRT_CU_MAX_BINDINGS];
  status = tfrt_cu_binding_addresses(exe->rt, binding_count, bindings, addresses);
  if (status == TFRT_STATUS_OUT_OF_MEMORY) {
    /* The staging area is full: wait for what was launched, then stage afresh. */
    status = tfrt_backend_sync(exe->rt);
    if (status == TFRT_OK) status = tfrt_cu_binding_addresses(exe->rt, binding_count, bindings,
                                                              addresses);
  }
  if (status != TFRT_OK) return status;
  /* cuLaunchKernel reads each parameter through a pointer to it. */
  void *params[TFRT_CU_MAX_BINDINGS + TFRT_CU_MAX_CONSTANTS];
  for (uint32_t i = 0; i < binding_count; ++i) params[i] = &addresses[i];
  for (uint32_t i = 0; i < constant_count; ++i)
    params[binding_count + i] = (void *)(uintptr_t)&constants[i];
  TFRT_CU_CHECK(be, CU(be, cuLaunchKernel)(
                        (tfrt_cu_function)be->kernels[function_id], (unsigned int)count_x,
                        (unsigned int)count_y, (unsigned int)count_z, desc->block_x,
                        desc->block_y, desc->block_z, desc->shared_memory_bytes,
                        (tfrt_cu_stream)be->stream, params, NULL));
  be->pending = 1;
  return TFRT_OK;
}

#endif /* TFRT_CU_DECLARATIONS_ONLY */
#endif /* TFRT_UNITY_BUILD */
