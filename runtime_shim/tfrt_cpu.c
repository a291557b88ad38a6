/* tfrt_cpu.c - the CPU backend of the runtime shim (see tfrt_cpu.h and
 * tfrt_backend.h): hal_loader.* over executable libraries linked into the
 * program.  Included by the generated model source after tfrt_core.c. */
#ifndef TFRT_UNITY_BUILD
/* Compiled on its own (an IDE, or a CMake file(GLOB) of every .c in src/):
 * the model's source NAME.c includes this file, so there is nothing to
 * compile here.  (A declaration keeps the unit from being empty.) */
typedef int tfrt_tfrt_cpu_c_is_included_by_the_model_source;
#else
#include "tfrt_cpu.h"

TFRT_INTERNAL int tfrt_backend_init(tfrt_runtime *rt) {
  (void)rt;
  return TFRT_OK;
}

TFRT_INTERNAL void tfrt_backend_deinit(tfrt_runtime *rt) { (void)rt; }

/* Kernels run on the calling thread: a dispatch is done when it returns. */
TFRT_INTERNAL int tfrt_backend_sync(tfrt_runtime *rt) {
  (void)rt;
  return TFRT_OK;
}

TFRT_INTERNAL void tfrt_backend_discard(tfrt_runtime *rt) { (void)rt; }

/* ---- hal_loader.* ------------------------------------------------------------ */

/* hal_loader.executable.query_support(format) -> i32 */
TFRT_INTERNAL int tfrt_executable_query_support(const tfrt_buffer *format, int32_t *out) {
  *out = tfrt_cstr_eq(format, "static") ? 1 : 0;
  return TFRT_OK;
}

/* Returns the v6 library of a query function, or NULL if the object speaks
 * another ABI version.  Always asks for exactly TFRT_ABI_VERSION. */
TFRT_INTERNAL const tfrt_abi_library_v6 *tfrt_query_library(tfrt_abi_query_fn query) {
  static const tfrt_abi_environment zero_env;
  const tfrt_abi_library_v6 *lib =
      (const tfrt_abi_library_v6 *)query(TFRT_ABI_VERSION, &zero_env);
  if (!lib || !lib->header || lib->header->version != TFRT_ABI_VERSION) return NULL;
  return lib;
}

/* hal_loader.executable.load(format, data, constants) -> !hal.executable.
 * `data` holds the NUL-terminated library name; the library is looked up in
 * the model's static registry and every dispatch name is resolved now, so
 * lookup.function costs one array read later. */
TFRT_INTERNAL int tfrt_executable_load(tfrt_runtime *rt, const tfrt_buffer *format,
                                       const tfrt_buffer *data, const tfrt_buffer *constants,
                                       tfrt_executable **out) {
  *out = NULL;
  if (!tfrt_cstr_eq(format, "static")) return TFRT_STATUS_UNIMPLEMENTED;
  if (constants && constants->length) return TFRT_STATUS_UNIMPLEMENTED;
  if (!data) return TFRT_STATUS_NULL_REF;
  tfrt_backend *be = &rt->backend;
  const tfrt_library_entry *entry = NULL;
  for (uint32_t i = 0; i < be->library_count; ++i)
    if (tfrt_cstr_eq(data, be->libraries[i].name)) entry = &be->libraries[i];
  if (!entry) return TFRT_STATUS_NOT_FOUND;
  const tfrt_abi_library_v6 *lib = tfrt_query_library(entry->query);
  if (!lib) return TFRT_STATUS_ABI_MISMATCH;
  if (lib->imports.count != 0) return TFRT_STATUS_UNIMPLEMENTED;
  tfrt_executable *exe = tfrt_executable_new(rt);
  if (!exe) return TFRT_STATUS_OUT_OF_MEMORY;
  exe->library = lib;
  for (uint32_t e = 0; lib->exports.names && e < lib->exports.count; ++e)
    tfrt_executable_name(rt, exe, lib->exports.names[e], e);
  *out = exe;
  return TFRT_OK;
}

/* Where binding `buffer[offset, offset + length)` is, checked. */
__attribute__((always_inline)) static inline int tfrt_bind(const tfrt_buffer *buffer,
                                                           int64_t offset, int64_t length,
                                                           void **ptr, size_t *ptr_length) {
  if (!buffer) return TFRT_STATUS_NULL_REF;
  if (!tfrt_range_ok(buffer, offset, length)) return TFRT_STATUS_OUT_OF_RANGE;
  *ptr = buffer->data + offset;
  *ptr_length = (size_t)length;
  return TFRT_OK;
}

/* ---- dispatches ---------------------------------------------------------------- */

/* The environment and workgroup every dispatch gets: all zero (one thread,
 * no imports, no local memory; workgroup (0, 0, 0) of a 1x1x1 grid). */
TFRT_INTERNAL const tfrt_abi_environment tfrt_zero_env;
TFRT_INTERNAL const tfrt_abi_workgroup_state tfrt_zero_workgroup;

/* Export `id` of lib as a dispatch with these counts may call it: its
 * attributes in *attrs (NULL: the library has none). */
TFRT_INTERNAL int tfrt_export_attrs(const tfrt_abi_library_v6 *lib, int64_t id,
                                    uint32_t constant_count, uint32_t binding_count,
                                    const tfrt_abi_dispatch_attrs **attrs) {
  *attrs = NULL;
  if (id < 0 || (uint64_t)id >= lib->exports.count || binding_count > 0xFF ||
      constant_count > 0xFFFF)
    return TFRT_STATUS_INVALID_ARGUMENT;
  const tfrt_abi_dispatch_attrs *a = lib->exports.attrs ? &lib->exports.attrs[id] : NULL;
  if (a) {
    if (a->local_memory_pages != 0) return TFRT_STATUS_UNIMPLEMENTED;
    if (a->binding_count != binding_count || a->constant_count != constant_count)
      return TFRT_STATUS_INVALID_ARGUMENT;
  }
  *attrs = a;
  return TFRT_OK;
}

/* Runs fn over a workgroup grid, in order on the calling thread with a
 * zeroed environment; its dispatch state on the stack, every field set one
 * by one (neither struct has holes between fields: the two memsets of a
 * zero start were a fifth of a dispatch's cost on a Cortex-M4). Inlined
 * where the counts are constants, a 1x1x1 grid is one call. */
__attribute__((always_inline)) static inline int tfrt_run_grid(
    tfrt_abi_dispatch_fn fn, const tfrt_abi_dispatch_attrs *attrs, uint32_t count_x,
    uint32_t count_y, uint32_t count_z, uint32_t constant_count, const uint32_t *constants,
    uint32_t binding_count, void *const *binding_ptrs, const size_t *binding_lengths) {
  tfrt_abi_dispatch_state state;
  state.workgroup_size_x = attrs ? attrs->workgroup_size_x : 1;
  state.workgroup_size_y = attrs ? attrs->workgroup_size_y : 1;
  state.workgroup_size_z = attrs ? attrs->workgroup_size_z : 1;
  state.constant_count = (uint16_t)constant_count;
  state.workgroup_count_x = count_x;
  state.workgroup_count_y = count_y;
  state.workgroup_count_z = (uint16_t)count_z;
  state.max_concurrency = 1;
  state.binding_count = (uint8_t)binding_count;
  state.constants = constants;
  state.binding_ptrs = binding_ptrs;
  state.binding_lengths = binding_lengths;
  if (count_x == 1 && count_y == 1 && count_z == 1)
    return fn(&tfrt_zero_env, &state, &tfrt_zero_workgroup) == 0 ? TFRT_OK
                                                                 : TFRT_STATUS_KERNEL_FAILED;
  tfrt_abi_workgroup_state wg = tfrt_zero_workgroup;
  for (uint32_t z = 0; z < count_z; ++z) {
    wg.workgroup_id_z = (uint16_t)z;
    for (uint32_t y = 0; y < count_y; ++y) {
      wg.workgroup_id_y = y;
      for (uint32_t x = 0; x < count_x; ++x) {
        wg.workgroup_id_x = x;
        if (fn(&tfrt_zero_env, &state, &wg) != 0) return TFRT_STATUS_KERNEL_FAILED;
      }
    }
  }
  return TFRT_OK;
}

/* Finds one dispatch of a direct step: the function name_slot resolves to
 * in exe, checked once (tfrt_export_attrs), where tfrt_dispatch_bound
 * checks at every call. */
TFRT_INTERNAL int tfrt_direct_prepare(const tfrt_executable *exe, uint32_t name_slot,
                                      uint32_t constant_count, uint32_t binding_count,
                                      tfrt_direct_site *site) {
  int64_t id;
  int status = tfrt_executable_lookup(exe, name_slot, &id);
  if (status == TFRT_OK)
    status = tfrt_export_attrs(exe->library, id, constant_count, binding_count, &site->attrs);
  if (status != TFRT_OK) return status;
  site->fn = exe->library->exports.ptrs[id];
  return site->fn ? TFRT_OK : TFRT_STATUS_NOT_FOUND;
}

/* Runs a prepared dispatch of a direct step (the counts are its constants). */
__attribute__((always_inline, unused)) static inline int tfrt_direct_call(
    const tfrt_direct_site *site, uint32_t count_x, uint32_t count_y, uint32_t count_z,
    uint32_t constant_count, const uint32_t *constants, uint32_t binding_count,
    void *const *binding_ptrs, const size_t *binding_lengths) {
  return tfrt_run_grid(site->fn, site->attrs, count_x, count_y, count_z, constant_count,
                       constants, binding_count, binding_ptrs, binding_lengths);
}

/* tfrt_direct_call, not inlined: for a direct step of many dispatches (a
 * whole window's unrolled recurrence has hundreds). gcc's points-to
 * analysis of one function holding that many inlined dispatch states (each
 * call site's own, escaping to the kernel) grows with their square: 43 s
 * of -O2 for a 100-frame bidirectional GRU's 811 dispatches, 2.6 s with
 * this call. */
__attribute__((noinline, unused)) static int tfrt_direct_call_outlined(
    const tfrt_direct_site *site, uint32_t count_x, uint32_t count_y, uint32_t count_z,
    uint32_t constant_count, const uint32_t *constants, uint32_t binding_count,
    void *const *binding_ptrs, const size_t *binding_lengths) {
  return tfrt_direct_call(site, count_x, count_y, count_z, constant_count, constants,
                          binding_count, binding_ptrs, binding_lengths);
}

/* Runs the workgroup grid of a dispatch whose bindings are bound. */
TFRT_INTERNAL int tfrt_dispatch_bound(const tfrt_executable *exe, int64_t function_id,
                                      int32_t count_x, int32_t count_y, int32_t count_z,
                                      uint32_t constant_count, const uint32_t *constants,
                                      uint32_t binding_count, void **binding_ptrs,
                                      size_t *binding_lengths) {
  if (!exe) return TFRT_STATUS_NULL_REF;
  if (count_x < 0 || count_y < 0 || count_z < 0 || count_z > 0xFFFF)
    return TFRT_STATUS_INVALID_ARGUMENT;
  const tfrt_abi_dispatch_attrs *attrs;
  const int status = tfrt_export_attrs(exe->library, function_id, constant_count,
                                       binding_count, &attrs);
  if (status != TFRT_OK) return status;
  return tfrt_run_grid(exe->library->exports.ptrs[function_id], attrs, (uint32_t)count_x,
                       (uint32_t)count_y, (uint32_t)count_z, constant_count, constants,
                       binding_count, binding_ptrs, binding_lengths);
}
#endif /* TFRT_UNITY_BUILD */
