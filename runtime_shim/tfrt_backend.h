/* tfrt_backend.h - the internal interface between the shim's core
 * (tfrt_core.c) and a backend (tfrt_cpu.c, tfrt_vulkan.c).
 *
 * A backend header (e.g. tfrt_cpu.h) includes tfrt.h, defines
 *   struct tfrt_executable   what !hal.executable is for this backend
 *   tfrt_backend             the backend's per-context state (a plain struct
 *                            inside tfrt_runtime, so inside the context)
 *   TFRT_BACKEND_NAME        a string, e.g. "cpu"
 * and then includes this header.  The backend's .c file implements the
 * functions declared below; the generated host program calls them with the
 * signatures given here (hal_loader.* imports), whatever the backend.
 */
#ifndef TFRT_BACKEND_H_
#define TFRT_BACKEND_H_

#include "tfrt.h"

#ifndef TFRT_BACKEND_NAME
#error "include a backend header (tfrt_cpu.h, tfrt_vulkan.h), not tfrt_backend.h directly"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Everything the shim needs from a model context. */
struct tfrt_runtime {
  tfrt_arena arena;               /* core: arena and object pools */
  tfrt_executable_table executables;  /* core: loaded executables, dispatch names */
  tfrt_backend backend;           /* backend: kernels, devices */
};

/* Called by tfrt_runtime_init before the arena's free lists are made; the
 * generated init has filled the backend's pointers (into the context) before.
 * A backend whose kernels need device memory points rt->arena.arena at it.
 * On failure it releases whatever it acquired. */
TFRT_INTERNAL int tfrt_backend_init(tfrt_runtime *rt);

/* Releases what tfrt_backend_init acquired (drivers, devices); called by the
 * model's deinit.  Safe on a backend whose init failed. */
TFRT_INTERNAL void tfrt_backend_deinit(tfrt_runtime *rt);

/* Waits until every dispatch issued so far has finished and its results are
 * visible to the host.  The generated code calls it before the host reads or
 * writes buffer contents (vm.buffer.* ops) and before a function returns;
 * backends that dispatch synchronously (CPU) return at once. */
TFRT_INTERNAL int tfrt_backend_sync(tfrt_runtime *rt);

/* Drops dispatches issued but not yet submitted (a function failed half-way). */
TFRT_INTERNAL void tfrt_backend_discard(tfrt_runtime *rt);

#ifdef TFRT_DEVICE_MEMORY
/* A backend whose arena is device memory the host cannot touch (CUDA)
 * defines TFRT_DEVICE_MEMORY: the core flags arena buffers TFRT_FLAG_DEVICE
 * and moves their bytes through these.  Pointers are the core's (arena base
 * + offset); any of them may also be host memory (a constant, a caller's
 * buffer), which is copied as it is. */
/* `bytes` at `src` to host memory `dst`: also the generated code's reads of
 * a step's outputs and of the state. */
TFRT_INTERNAL int tfrt_backend_read(tfrt_runtime *rt, void *dst, const uint8_t *src,
                                    size_t bytes);
/* Host memory `src` to device memory `dst`. */
TFRT_INTERNAL int tfrt_backend_write(tfrt_runtime *rt, uint8_t *dst, const void *src,
                                     size_t bytes);
/* Either way, or device to device. */
TFRT_INTERNAL int tfrt_backend_copy(tfrt_runtime *rt, uint8_t *dst, const uint8_t *src,
                                    size_t bytes);
/* `count` elements of `width` bytes (1, 2, 4, 8), each `value`, little-endian. */
TFRT_INTERNAL int tfrt_backend_fill(tfrt_runtime *rt, uint8_t *dst, size_t count,
                                    uint64_t value, uint32_t width);
/* These order themselves after the dispatches before them (a read waits for
 * them): the generated code need not wait before a vm.buffer.* op. */
static inline int tfrt_backend_before_buffer_op(tfrt_runtime *rt) {
  (void)rt;
  return TFRT_OK;
}
#else
/* The host touches buffer contents itself: dispatches issued so far first. */
static inline int tfrt_backend_before_buffer_op(tfrt_runtime *rt) {
  return tfrt_backend_sync(rt);
}
/* Host memory: the generated code's reads of outputs and state are copies. */
static inline int tfrt_backend_read(tfrt_runtime *rt, void *dst, const uint8_t *src,
                                    size_t bytes) {
  (void)rt;
  memcpy(dst, src, bytes);
  return TFRT_OK;
}
#endif

/* hal_loader.executable.query_support(format) -> i32 */
TFRT_INTERNAL int tfrt_executable_query_support(const tfrt_buffer *format, int32_t *out);

/* hal_loader.executable.load(format, data, constants) -> !hal.executable,
 * returned borrowed-immortal (it lives as long as the context). */
TFRT_INTERNAL int tfrt_executable_load(tfrt_runtime *rt, const tfrt_buffer *format,
                                       const tfrt_buffer *data, const tfrt_buffer *constants,
                                       tfrt_executable **out);

/* hal_loader.executable.lookup.function(exe, name) -> i64; `name_slot`
 * indexes the model's table of dispatch names, resolved at load.
 * Implemented by the core (tfrt_core.c) for every backend: a backend's
 * struct tfrt_executable starts with `tfrt_obj hdr` and has
 * `uint32_t *function_ids`, which the core fills (tfrt_executable_new). */
TFRT_INTERNAL int tfrt_executable_lookup(const tfrt_executable *exe, uint32_t name_slot,
                                         int64_t *out);

#ifdef TFRT_BOUND_DISPATCH
/* hal_loader.executable.dispatch on a backend whose kernels take pointers
 * (CPU): the generated code binds each buffer itself (the backend's
 * tfrt_bind, inlined: a binding's offset and length are constants there,
 * so its range check folds to one compare), then this runs the workgroup
 * grid of one function over binding_ptrs/binding_lengths. */
TFRT_INTERNAL int tfrt_dispatch_bound(const tfrt_executable *exe, int64_t function_id,
                                      int32_t count_x, int32_t count_y, int32_t count_z,
                                      uint32_t constant_count, const uint32_t *constants,
                                      uint32_t binding_count, void **binding_ptrs,
                                      size_t *binding_lengths);
#else
/* hal_loader.executable.dispatch on the other backends (GPU): runs the
 * workgroup grid of one function over the bindings' buffers.
 * binding_ptrs/binding_lengths are caller scratch, one per binding. */
TFRT_INTERNAL int tfrt_executable_dispatch(const tfrt_executable *exe, int64_t function_id,
                                           int32_t count_x, int32_t count_y, int32_t count_z,
                                           uint32_t constant_count, const uint32_t *constants,
                                           uint32_t binding_count, const tfrt_binding *bindings,
                                           void **binding_ptrs, size_t *binding_lengths);
#endif

#ifdef __cplusplus
}
#endif

#endif /* TFRT_BACKEND_H_ */
