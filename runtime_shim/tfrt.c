/* tfrt.c - implementation of the tfaot runtime shim (see tfrt.h).
 *
 * Included once by each generated model source ("unity" build); every
 * function is static.  No heap, no globals with mutable state: all mutable
 * data lives in the tfrt_runtime of a context.
 *
 * Reference-counting rules (shared with the emitter):
 *   - functions returning an object through an out-pointer return it owned (+1);
 *   - tfrt_release(NULL) is a no-op; immortal objects (refs < 0) are never written.
 */
#include "tfrt.h"

/* ---- objects --------------------------------------------------------------- */

TFRT_INTERNAL void *tfrt_retain(void *object) {
  tfrt_obj *obj = (tfrt_obj *)object;
  if (obj && obj->refs >= 0) obj->refs++;
  return object;
}

TFRT_INTERNAL void tfrt_release(tfrt_runtime *rt, void *object) {
  tfrt_obj *obj = (tfrt_obj *)object;
  if (!obj || obj->refs < 0) return;
  if (--obj->refs > 0) return;
  if (obj->kind == TFRT_KIND_BUFFER) {
    tfrt_buffer *b = (tfrt_buffer *)obj;
    b->next_free = rt->free_heads[b->pool];
    rt->free_heads[b->pool] = b;
    rt->bytes_in_use -= rt->pools[b->pool].size;
  } else if (obj->kind == TFRT_KIND_VIEW) {
    tfrt_view *v = (tfrt_view *)obj;
    tfrt_buffer *b = v->buffer;
    v->buffer = NULL;
    v->next_free = rt->free_views;
    rt->free_views = v;
    tfrt_release(rt, b);
  }
}

/* Sets up free lists over the arena.  Called from the model's init after the
 * context has been zeroed and its pointers filled. */
TFRT_INTERNAL int tfrt_runtime_init(tfrt_runtime *rt) {
  size_t offset = 0;
  uint32_t slot = 0;
  for (uint32_t p = 0; p < rt->pool_count; ++p) {
    rt->free_heads[p] = NULL;
    for (uint32_t i = 0; i < rt->pools[p].count; ++i) {
      tfrt_buffer *b = &rt->buffer_slots[slot++];
      if (offset + rt->pools[p].size > rt->arena_bytes) return TFRT_STATUS_OUT_OF_MEMORY;
      b->hdr.refs = 0;
      b->hdr.kind = TFRT_KIND_BUFFER;
      b->hdr.flags = 0;
      b->pool = p;
      b->data = rt->arena + offset;
      b->length = 0;
      b->next_free = rt->free_heads[p];
      rt->free_heads[p] = b;
      offset += rt->pools[p].size;
    }
  }
  rt->free_views = NULL;
  for (uint32_t i = 0; i < rt->view_count; ++i) {
    tfrt_view *v = &rt->view_slots[i];
    v->hdr.refs = 0;
    v->hdr.kind = TFRT_KIND_VIEW;
    v->next_free = rt->free_views;
    rt->free_views = v;
  }
  rt->executables_used = 0;
  rt->bytes_in_use = 0;
  rt->bytes_high_water = 0;
  return TFRT_OK;
}

/* Wraps caller memory as an immortal buffer (inputs of a step). */
TFRT_INTERNAL void tfrt_buffer_wrap(tfrt_buffer *b, void *data, size_t length) {
  b->hdr.refs = -1;
  b->hdr.kind = TFRT_KIND_BUFFER;
  b->hdr.flags = 0;
  b->pool = 0;
  b->data = (uint8_t *)data;
  b->length = length;
  b->next_free = NULL;
}

/* Initialises a caller-owned immortal view over an immortal buffer. */
TFRT_INTERNAL void tfrt_view_wrap(tfrt_view *v, tfrt_buffer *b, uint32_t element_type,
                                  uint32_t rank, const int64_t *shape) {
  v->hdr.refs = -1;
  v->hdr.kind = TFRT_KIND_VIEW;
  v->hdr.flags = 0;
  v->element_type = element_type;
  v->buffer = b;
  v->offset = 0;
  v->length = b->length;
  v->encoding = 1;
  v->rank = rank;
  for (uint32_t i = 0; i < rank && i < TFRT_MAX_RANK; ++i) v->shape[i] = shape[i];
  v->next_free = NULL;
}

/* ---- hal_inline.* ------------------------------------------------------------ */

/* hal_inline.buffer.allocate(alignment, size) -> (!hal.buffer, !vm.buffer).
 * Takes the smallest free block whose size class fits. */
TFRT_INTERNAL int tfrt_buffer_allocate(tfrt_runtime *rt, int32_t alignment, int64_t size,
                                       tfrt_buffer **out) {
  *out = NULL;
  if (size < 0 || alignment > TFRT_ALIGNMENT) return TFRT_STATUS_INVALID_ARGUMENT;
  for (uint32_t p = 0; p < rt->pool_count; ++p) {
    if (rt->pools[p].size < (uint64_t)size || !rt->free_heads[p]) continue;
    tfrt_buffer *b = rt->free_heads[p];
    rt->free_heads[p] = b->next_free;
    b->next_free = NULL;
    b->hdr.refs = 1;
    b->length = (size_t)size;
    rt->bytes_in_use += rt->pools[p].size;
    if (rt->bytes_in_use > rt->bytes_high_water) rt->bytes_high_water = rt->bytes_in_use;
    *out = b;
    return TFRT_OK;
  }
  return TFRT_STATUS_OUT_OF_MEMORY;
}

/* hal_inline.buffer.storage(!hal.buffer) -> !vm.buffer: the same object. */
TFRT_INTERNAL int tfrt_buffer_storage(tfrt_buffer *buffer, tfrt_buffer **out) {
  *out = NULL;
  if (!buffer) return TFRT_STATUS_NULL_REF;
  *out = (tfrt_buffer *)tfrt_retain(buffer);
  return TFRT_OK;
}

/* hal_inline.buffer_view.create(buffer, offset, length, type, encoding, shape...) */
TFRT_INTERNAL int tfrt_view_create(tfrt_runtime *rt, tfrt_buffer *buffer, int64_t offset,
                                   int64_t length, int32_t element_type, int32_t encoding,
                                   uint32_t rank, const int64_t *shape, tfrt_view **out) {
  *out = NULL;
  if (!buffer) return TFRT_STATUS_NULL_REF;
  if (rank > TFRT_MAX_RANK) return TFRT_STATUS_UNIMPLEMENTED;
  if (offset < 0 || length < 0 || (uint64_t)offset + (uint64_t)length > buffer->length)
    return TFRT_STATUS_OUT_OF_RANGE;
  tfrt_view *v = rt->free_views;
  if (!v) return TFRT_STATUS_OUT_OF_MEMORY;
  rt->free_views = v->next_free;
  v->next_free = NULL;
  v->hdr.refs = 1;
  v->element_type = (uint32_t)element_type;
  v->buffer = (tfrt_buffer *)tfrt_retain(buffer);
  v->offset = (size_t)offset;
  v->length = (size_t)length;
  v->encoding = (uint32_t)encoding;
  v->rank = rank;
  for (uint32_t i = 0; i < rank; ++i) v->shape[i] = shape[i];
  *out = v;
  return TFRT_OK;
}

/* hal_inline.buffer_view.assert(view, message, type, encoding, shape...) */
TFRT_INTERNAL int tfrt_view_assert(const tfrt_view *view, int32_t element_type, int32_t encoding,
                                   uint32_t rank, const int64_t *shape) {
  if (!view) return TFRT_STATUS_NULL_REF;
  if (view->element_type != (uint32_t)element_type || view->encoding != (uint32_t)encoding ||
      view->rank != rank)
    return TFRT_STATUS_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < rank; ++i)
    if (view->shape[i] != shape[i]) return TFRT_STATUS_INVALID_ARGUMENT;
  return TFRT_OK;
}

/* hal_inline.buffer_view.buffer(view) -> !hal.buffer.  Views made by the
 * host program only ever flow out; views flowing in are made by the step
 * wrapper at offset 0, so a sub-range view is reported, not mis-addressed. */
TFRT_INTERNAL int tfrt_view_buffer(const tfrt_view *view, tfrt_buffer **out) {
  *out = NULL;
  if (!view) return TFRT_STATUS_NULL_REF;
  if (view->offset != 0) return TFRT_STATUS_UNIMPLEMENTED;
  *out = (tfrt_buffer *)tfrt_retain(view->buffer);
  return TFRT_OK;
}

/* hal_inline.buffer_view.dim(view, index) -> i64 */
TFRT_INTERNAL int tfrt_view_dim(const tfrt_view *view, int64_t index, int64_t *out) {
  *out = 0;
  if (!view) return TFRT_STATUS_NULL_REF;
  if (index < 0 || (uint64_t)index >= view->rank) return TFRT_STATUS_OUT_OF_RANGE;
  *out = view->shape[index];
  return TFRT_OK;
}

/* ---- vm.buffer.* ------------------------------------------------------------- */

TFRT_INTERNAL int tfrt_range_ok(const tfrt_buffer *b, int64_t offset, int64_t length) {
  return offset >= 0 && length >= 0 && (uint64_t)offset <= b->length &&
         (uint64_t)length <= b->length - (uint64_t)offset;
}

/* vm.buffer.copy: byte offsets and length. */
TFRT_INTERNAL int tfrt_buffer_copy(tfrt_buffer *src, int64_t src_offset, tfrt_buffer *dst,
                                   int64_t dst_offset, int64_t length) {
  if (!src || !dst) return TFRT_STATUS_NULL_REF;
  if (dst->hdr.flags & TFRT_FLAG_READONLY) return TFRT_STATUS_INVALID_ARGUMENT;
  if (!tfrt_range_ok(src, src_offset, length) || !tfrt_range_ok(dst, dst_offset, length))
    return TFRT_STATUS_OUT_OF_RANGE;
  if (length) memmove(dst->data + dst_offset, src->data + src_offset, (size_t)length);
  return TFRT_OK;
}

/* vm.buffer.fill.iN: offset and length counted in elements of `width` bytes. */
TFRT_INTERNAL int tfrt_buffer_fill(tfrt_buffer *dst, int64_t offset, int64_t count, uint64_t value,
                                   uint32_t width) {
  if (!dst) return TFRT_STATUS_NULL_REF;
  if (dst->hdr.flags & TFRT_FLAG_READONLY) return TFRT_STATUS_INVALID_ARGUMENT;
  if (offset < 0 || count < 0 || offset > INT64_MAX / width || count > INT64_MAX / width ||
      !tfrt_range_ok(dst, offset * (int64_t)width, count * (int64_t)width))
    return TFRT_STATUS_OUT_OF_RANGE;
  uint8_t *p = dst->data + offset * (int64_t)width;
  if (width == 1) {
    memset(p, (int)(value & 0xFFu), (size_t)count);
    return TFRT_OK;
  }
  for (int64_t i = 0; i < count; ++i) memcpy(p + i * (int64_t)width, &value, width); /* little-endian */
  return TFRT_OK;
}

/* vm.buffer.load.*: element index; the raw bytes land in *out (zero-extended). */
TFRT_INTERNAL int tfrt_buffer_load(const tfrt_buffer *src, int64_t index, uint32_t width,
                                   void *out) {
  if (!src) return TFRT_STATUS_NULL_REF;
  if (index < 0 || index > INT64_MAX / width ||
      !tfrt_range_ok(src, index * (int64_t)width, (int64_t)width))
    return TFRT_STATUS_OUT_OF_RANGE;
  memcpy(out, src->data + index * (int64_t)width, width);
  return TFRT_OK;
}

/* vm.buffer.store.*: element index. */
TFRT_INTERNAL int tfrt_buffer_store(tfrt_buffer *dst, int64_t index, uint32_t width,
                                    const void *value) {
  if (!dst) return TFRT_STATUS_NULL_REF;
  if (dst->hdr.flags & TFRT_FLAG_READONLY) return TFRT_STATUS_INVALID_ARGUMENT;
  if (index < 0 || index > INT64_MAX / width ||
      !tfrt_range_ok(dst, index * (int64_t)width, (int64_t)width))
    return TFRT_STATUS_OUT_OF_RANGE;
  memcpy(dst->data + index * (int64_t)width, value, width);
  return TFRT_OK;
}

/* ---- hal_loader.* ------------------------------------------------------------ */

TFRT_INTERNAL int tfrt_cstr_eq(const tfrt_buffer *b, const char *s) {
  size_t n = strlen(s);
  if (!b) return 0;
  /* rodata strings may or may not carry their NUL terminator */
  if (b->length == n + 1 && b->data[n] == 0) return memcmp(b->data, s, n) == 0;
  return b->length == n && memcmp(b->data, s, n) == 0;
}

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
  const tfrt_library_entry *entry = NULL;
  for (uint32_t i = 0; i < rt->library_count; ++i)
    if (tfrt_cstr_eq(data, rt->libraries[i].name)) entry = &rt->libraries[i];
  if (!entry) return TFRT_STATUS_NOT_FOUND;
  const tfrt_abi_library_v6 *lib = tfrt_query_library(entry->query);
  if (!lib) return TFRT_STATUS_ABI_MISMATCH;
  if (lib->imports.count != 0) return TFRT_STATUS_UNIMPLEMENTED;
  if (rt->executables_used >= rt->executable_count) return TFRT_STATUS_OUT_OF_MEMORY;
  tfrt_executable *exe = &rt->executables[rt->executables_used];
  exe->hdr.refs = -1; /* lives as long as the context */
  exe->hdr.kind = TFRT_KIND_EXECUTABLE;
  exe->library = lib;
  exe->function_ids = rt->function_ids + (size_t)rt->executables_used * rt->function_name_count;
  rt->executables_used++;
  for (uint32_t n = 0; n < rt->function_name_count; ++n) {
    exe->function_ids[n] = UINT32_MAX;
    for (uint32_t e = 0; e < lib->exports.count; ++e) {
      if (lib->exports.names && strcmp(lib->exports.names[e], rt->function_names[n]) == 0) {
        exe->function_ids[n] = e;
        break;
      }
    }
  }
  *out = exe;
  return TFRT_OK;
}

/* hal_loader.executable.lookup.function(exe, name) -> i64, name pre-resolved. */
TFRT_INTERNAL int tfrt_executable_lookup(const tfrt_executable *exe, uint32_t name_slot,
                                         int64_t *out) {
  *out = -1;
  if (!exe) return TFRT_STATUS_NULL_REF;
  if (exe->function_ids[name_slot] == UINT32_MAX) return TFRT_STATUS_NOT_FOUND;
  *out = exe->function_ids[name_slot];
  return TFRT_OK;
}

/* hal_loader.executable.dispatch: runs the workgroup grid in order on the
 * calling thread with a zeroed environment. */
TFRT_INTERNAL int tfrt_executable_dispatch(const tfrt_executable *exe, int64_t function_id,
                                           int32_t count_x, int32_t count_y, int32_t count_z,
                                           uint32_t constant_count, const uint32_t *constants,
                                           uint32_t binding_count, const tfrt_binding *bindings,
                                           void **binding_ptrs, size_t *binding_lengths) {
  static const tfrt_abi_environment zero_env;
  if (!exe) return TFRT_STATUS_NULL_REF;
  const tfrt_abi_library_v6 *lib = exe->library;
  if (function_id < 0 || (uint64_t)function_id >= lib->exports.count)
    return TFRT_STATUS_INVALID_ARGUMENT;
  if (count_x < 0 || count_y < 0 || count_z < 0 || count_z > 0xFFFF)
    return TFRT_STATUS_INVALID_ARGUMENT;
  const tfrt_abi_dispatch_attrs *attrs =
      lib->exports.attrs ? &lib->exports.attrs[function_id] : NULL;
  if (attrs) {
    if (attrs->local_memory_pages != 0) return TFRT_STATUS_UNIMPLEMENTED;
    if (attrs->binding_count != binding_count || attrs->constant_count != constant_count)
      return TFRT_STATUS_INVALID_ARGUMENT;
  }
  for (uint32_t i = 0; i < binding_count; ++i) {
    const tfrt_binding *b = &bindings[i];
    if (!b->buffer) return TFRT_STATUS_NULL_REF;
    if (!tfrt_range_ok(b->buffer, b->offset, b->length)) return TFRT_STATUS_OUT_OF_RANGE;
    binding_ptrs[i] = b->buffer->data + b->offset;
    binding_lengths[i] = (size_t)b->length;
  }
  tfrt_abi_dispatch_state state;
  memset(&state, 0, sizeof(state));
  state.workgroup_size_x = attrs ? attrs->workgroup_size_x : 1;
  state.workgroup_size_y = attrs ? attrs->workgroup_size_y : 1;
  state.workgroup_size_z = attrs ? attrs->workgroup_size_z : 1;
  state.constant_count = (uint16_t)constant_count;
  state.workgroup_count_x = (uint32_t)count_x;
  state.workgroup_count_y = (uint32_t)count_y;
  state.workgroup_count_z = (uint16_t)count_z;
  state.max_concurrency = 1;
  state.binding_count = (uint8_t)binding_count;
  state.constants = constants;
  state.binding_ptrs = binding_ptrs;
  state.binding_lengths = binding_lengths;
  tfrt_abi_workgroup_state wg;
  memset(&wg, 0, sizeof(wg));
  const tfrt_abi_dispatch_fn fn = lib->exports.ptrs[function_id];
  for (int32_t z = 0; z < count_z; ++z) {
    wg.workgroup_id_z = (uint16_t)z;
    for (int32_t y = 0; y < count_y; ++y) {
      wg.workgroup_id_y = (uint32_t)y;
      for (int32_t x = 0; x < count_x; ++x) {
        wg.workgroup_id_x = (uint32_t)x;
        if (fn(&zero_env, &state, &wg) != 0) return TFRT_STATUS_KERNEL_FAILED;
      }
    }
  }
  return TFRT_OK;
}

/* Text of a status code (shared by every model's NAME_status_string). */
TFRT_INTERNAL const char *tfrt_status_string(int status) {
  switch (status) {
    case TFRT_OK: return "ok";
    case TFRT_STATUS_INVALID_ARGUMENT: return "invalid argument (NULL pointer, shape or type mismatch)";
    case TFRT_STATUS_NOT_INITIALIZED: return "context not initialized (call init first)";
    case TFRT_STATUS_OUT_OF_MEMORY: return "static arena or object pool exhausted";
    case TFRT_STATUS_ABI_MISMATCH: return "kernel object does not implement executable-library ABI v6";
    case TFRT_STATUS_KERNEL_FAILED: return "a kernel dispatch reported failure";
    case TFRT_STATUS_PROGRAM_FAILED: return "the host program failed (vm.fail)";
    case TFRT_STATUS_UNIMPLEMENTED: return "feature not supported by the tfaot runtime shim";
    case TFRT_STATUS_OUT_OF_RANGE: return "buffer access out of range";
    case TFRT_STATUS_NULL_REF: return "null buffer, view or executable used";
    case TFRT_STATUS_NOT_FOUND: return "kernel library or dispatch function not found";
    case TFRT_STATUS_IO: return "an I/O hook (read_input or write_output) reported an error";
    default: return "unknown status";
  }
}
