/* tfrt_cpu.h - the CPU backend of the runtime shim: kernels are an
 * executable library (ABI v6, tfrt_abi.h) linked into the program as a static
 * object, dispatched on the calling thread.  Implements tfrt_backend.h. */
#ifndef TFRT_CPU_H_
#define TFRT_CPU_H_

#include "tfrt.h"
#include "tfrt_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFRT_BACKEND_NAME "cpu"

/* A kernel library linked into the model: library name -> query function. */
typedef struct tfrt_library_entry {
  const char *name;
  tfrt_abi_query_fn query;
} tfrt_library_entry;

struct tfrt_executable {
  tfrt_obj hdr;
  const tfrt_abi_library_v6 *library;
  uint32_t *function_ids;         /* resolved once at load, indexed by name slot */
};

/* The CPU backend's part of a context.  The generated init fills the
 * pointers (static tables, and storage inside the context). */
typedef struct tfrt_backend {
  const tfrt_library_entry *libraries;
  uint32_t library_count;
} tfrt_backend;

#ifdef __cplusplus
}
#endif

#include "tfrt_backend.h"

/* The generated code of a CPU model binds each buffer of a dispatch itself
 * (tfrt_bind, inlined: a binding's offset and length are constants there,
 * so its range check folds to one compare) and calls tfrt_dispatch_bound
 * with the pointers; tfrt_executable_dispatch is both in one call. */
TFRT_INTERNAL int tfrt_dispatch_bound(const tfrt_executable *exe, int64_t function_id,
                                      int32_t count_x, int32_t count_y, int32_t count_z,
                                      uint32_t constant_count, const uint32_t *constants,
                                      uint32_t binding_count, void **binding_ptrs,
                                      size_t *binding_lengths);

#endif /* TFRT_CPU_H_ */
