/* tfrt_abi.h - the CPU "executable library" ABI, version 6, as iree-compile
 * (llvm-cpu, --iree-llvmcpu-link-static) emits it into a kernel object.
 *
 * This is tfaot's own declaration, written from the field-by-field fact sheet
 * in iree-notes.md section 2 (checked against objdump of real kernel objects).
 * Only the parts the shim reads are given real types; everything else is kept
 * as opaque pointers so the layout stays exact.  The _Static_asserts pin the
 * offsets for LP64 and ILP32 targets: if the compiler ever changes the layout,
 * this header stops compiling instead of misreading memory.
 */
#ifndef TFRT_ABI_H_
#define TFRT_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The only library ABI version the shim understands. query() is always called
 * with exactly this value; a kernel object built for another version answers
 * NULL and init fails with TFRT_STATUS_ABI_MISMATCH. */
#define TFRT_ABI_VERSION 6u

/* Import function provided by the host (never used by link-static kernels). */
typedef int (*tfrt_abi_import_fn)(void *params, void *context, void *reserved);
typedef int (*tfrt_abi_import_thunk)(tfrt_abi_import_fn fn, void *params,
                                     void *context, void *reserved);

/* Handed to every dispatch.  tfaot passes an all-zero environment. */
typedef struct tfrt_abi_environment {
  const uint32_t *constants;              /* library-level constants */
  tfrt_abi_import_thunk import_thunk;
  const tfrt_abi_import_fn *import_funcs;
  const void **import_contexts;
  uint64_t processor_data[8];
} tfrt_abi_environment;

/* Per-dispatch state: workgroup geometry, push constants and bindings. */
typedef struct tfrt_abi_dispatch_state {
  uint32_t workgroup_size_x;
  uint32_t workgroup_size_y;
  uint16_t workgroup_size_z;
  uint16_t constant_count;
  uint32_t workgroup_count_x;
  uint32_t workgroup_count_y;
  uint16_t workgroup_count_z;
  uint8_t max_concurrency;
  uint8_t binding_count;
  const uint32_t *constants;
  void *const *binding_ptrs;
  const size_t *binding_lengths;
} tfrt_abi_dispatch_state;

/* Per-workgroup state: which (x, y, z) tile this call computes. */
typedef struct tfrt_abi_workgroup_state {
  uint32_t workgroup_id_x;
  uint32_t workgroup_id_y;
  uint16_t workgroup_id_z;
  uint16_t reserved;
  uint32_t processor_id;
  void *local_memory;
  uint32_t local_memory_size;
} tfrt_abi_workgroup_state;

/* One dispatch function (an export of the library). 0 = success. */
typedef int (*tfrt_abi_dispatch_fn)(const tfrt_abi_environment *environment,
                                    const tfrt_abi_dispatch_state *dispatch_state,
                                    const tfrt_abi_workgroup_state *workgroup_state);

/* Static attributes of one export. */
typedef struct tfrt_abi_dispatch_attrs {
  uint64_t flags;                 /* bit0 sequential, bit1 dynamic wg size */
  uint16_t local_memory_pages;    /* in 4096-byte pages */
  uint8_t constant_count;
  uint8_t binding_count;
  uint32_t workgroup_size_x;
  uint32_t workgroup_size_y;
  uint16_t workgroup_size_z;
  uint16_t parameter_count;
  uint64_t reserved[5];
} tfrt_abi_dispatch_attrs;

/* Common header of every library version. */
typedef struct tfrt_abi_library_header {
  uint32_t version;
  const char *name;
  uint32_t features;
  int32_t sanitizer;              /* 0 none, 1 address, 2 memory, 3 thread, 4 UB */
} tfrt_abi_library_header;

/* The v6 library ("v0" layout in the compiler's naming). */
typedef struct tfrt_abi_library_v6 {
  const tfrt_abi_library_header *header;
  struct {
    uint32_t count;
    const char *const *symbols;
  } imports;
  struct {
    uint32_t count;
    const tfrt_abi_dispatch_fn *ptrs;
    const tfrt_abi_dispatch_attrs *attrs;
    const void *params;
    const void *occupancy;
    const char *const *names;
    const void *tags;
    const void *parameter_names;
    const void *source_locations;
    const void *stage_locations;
  } exports;
  struct {
    uint32_t count;
  } constants;
  struct {
    uint32_t count;
    const void *files;
  } sources;
} tfrt_abi_library_v6;

/* The single exported entry point of a kernel object.  Returns a pointer to
 * the library (whose first field points at the header), or NULL when
 * max_version is not one the object supports. */
typedef const void *(*tfrt_abi_query_fn)(uint32_t max_version,
                                         const tfrt_abi_environment *environment);

/* ---- layout checks (iree-notes.md section 2) ---------------------------- */
#define TFRT_ABI_CHECK(cond, msg) _Static_assert(cond, "tfrt ABI v6 layout: " msg)

TFRT_ABI_CHECK(sizeof(tfrt_abi_dispatch_attrs) == 64, "dispatch attrs size");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_attrs, local_memory_pages) == 8, "attrs.local_memory_pages");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_attrs, constant_count) == 10, "attrs.constant_count");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_attrs, binding_count) == 11, "attrs.binding_count");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_attrs, workgroup_size_x) == 12, "attrs.workgroup_size_x");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_attrs, workgroup_size_z) == 20, "attrs.workgroup_size_z");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_attrs, parameter_count) == 22, "attrs.parameter_count");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, constant_count) == 10, "dispatch_state.constant_count");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, workgroup_count_x) == 12, "dispatch_state.workgroup_count_x");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, workgroup_count_z) == 20, "dispatch_state.workgroup_count_z");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, max_concurrency) == 22, "dispatch_state.max_concurrency");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, binding_count) == 23, "dispatch_state.binding_count");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, constants) == 24, "dispatch_state.constants");
TFRT_ABI_CHECK(offsetof(tfrt_abi_workgroup_state, workgroup_id_z) == 8, "workgroup_state.workgroup_id_z");
TFRT_ABI_CHECK(offsetof(tfrt_abi_workgroup_state, processor_id) == 12, "workgroup_state.processor_id");
TFRT_ABI_CHECK(offsetof(tfrt_abi_workgroup_state, local_memory) == 16, "workgroup_state.local_memory");

#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu /* LP64 */
TFRT_ABI_CHECK(sizeof(tfrt_abi_library_header) == 24, "header size (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_header, name) == 8, "header.name (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_header, features) == 16, "header.features (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_header, sanitizer) == 20, "header.sanitizer (LP64)");
TFRT_ABI_CHECK(sizeof(tfrt_abi_library_v6) == 128, "library size (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, imports.count) == 8, "imports.count (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, imports.symbols) == 16, "imports.symbols (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.count) == 24, "exports.count (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.ptrs) == 32, "exports.ptrs (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.attrs) == 40, "exports.attrs (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.params) == 48, "exports.params (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.occupancy) == 56, "exports.occupancy (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.names) == 64, "exports.names (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.tags) == 72, "exports.tags (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.parameter_names) == 80, "exports.parameter_names (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.source_locations) == 88, "exports.source_locations (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.stage_locations) == 96, "exports.stage_locations (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, constants.count) == 104, "constants.count (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, sources.count) == 112, "sources.count (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, sources.files) == 120, "sources.files (LP64)");
TFRT_ABI_CHECK(sizeof(tfrt_abi_environment) == 96, "environment size (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_environment, import_thunk) == 8, "environment.import_thunk (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_environment, import_funcs) == 16, "environment.import_funcs (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_environment, import_contexts) == 24, "environment.import_contexts (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_environment, processor_data) == 32, "environment.processor_data (LP64)");
TFRT_ABI_CHECK(sizeof(tfrt_abi_dispatch_state) == 48, "dispatch_state size (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, binding_ptrs) == 32, "dispatch_state.binding_ptrs (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, binding_lengths) == 40, "dispatch_state.binding_lengths (LP64)");
TFRT_ABI_CHECK(sizeof(tfrt_abi_workgroup_state) == 32, "workgroup_state size (LP64)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_workgroup_state, local_memory_size) == 24, "workgroup_state.local_memory_size (LP64)");
#elif UINTPTR_MAX == 0xFFFFFFFFu /* ILP32 */
TFRT_ABI_CHECK(sizeof(tfrt_abi_library_header) == 16, "header size (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_header, name) == 4, "header.name (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_header, features) == 8, "header.features (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_header, sanitizer) == 12, "header.sanitizer (ILP32)");
TFRT_ABI_CHECK(sizeof(tfrt_abi_library_v6) == 64, "library size (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, imports.count) == 4, "imports.count (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, imports.symbols) == 8, "imports.symbols (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.count) == 12, "exports.count (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.ptrs) == 16, "exports.ptrs (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.attrs) == 20, "exports.attrs (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.params) == 24, "exports.params (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.occupancy) == 28, "exports.occupancy (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.names) == 32, "exports.names (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.tags) == 36, "exports.tags (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.parameter_names) == 40, "exports.parameter_names (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.source_locations) == 44, "exports.source_locations (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, exports.stage_locations) == 48, "exports.stage_locations (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, constants.count) == 52, "constants.count (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, sources.count) == 56, "sources.count (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_library_v6, sources.files) == 60, "sources.files (ILP32)");
TFRT_ABI_CHECK(sizeof(tfrt_abi_environment) == 80, "environment size (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_environment, import_thunk) == 4, "environment.import_thunk (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_environment, import_funcs) == 8, "environment.import_funcs (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_environment, import_contexts) == 12, "environment.import_contexts (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_environment, processor_data) == 16, "environment.processor_data (ILP32)");
TFRT_ABI_CHECK(sizeof(tfrt_abi_dispatch_state) == 36, "dispatch_state size (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, binding_ptrs) == 28, "dispatch_state.binding_ptrs (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_dispatch_state, binding_lengths) == 32, "dispatch_state.binding_lengths (ILP32)");
TFRT_ABI_CHECK(sizeof(tfrt_abi_workgroup_state) == 24, "workgroup_state size (ILP32)");
TFRT_ABI_CHECK(offsetof(tfrt_abi_workgroup_state, local_memory_size) == 20, "workgroup_state.local_memory_size (ILP32)");
#else
#error "tfrt_abi.h: only LP64 and ILP32 targets are supported"
#endif

#ifdef __cplusplus
}
#endif

#endif /* TFRT_ABI_H_ */
