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

/* One dispatch of a direct step (the generated NAME_vm_step_direct: @step
 * as straight C over buffers fixed at build time), found and checked once
 * at init (tfrt_direct_prepare): its kernel and the kernel's attributes. */
typedef struct tfrt_direct_site {
  tfrt_abi_dispatch_fn fn;
  const tfrt_abi_dispatch_attrs *attrs;  /* or NULL: the library has none */
} tfrt_direct_site;

/* The CPU backend's part of a context.  The generated init fills the
 * pointers (static tables, and storage inside the context). */
typedef struct tfrt_backend {
  const tfrt_library_entry *libraries;
  uint32_t library_count;
} tfrt_backend;

#ifdef __cplusplus
}
#endif

/* Kernels take pointers: dispatches are bound by the generated code
 * (tfrt_bind, tfrt_dispatch_bound in tfrt_backend.h). */
#define TFRT_BOUND_DISPATCH 1
#include "tfrt_backend.h"

#endif /* TFRT_CPU_H_ */
