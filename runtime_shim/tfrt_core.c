/* tfrt_core.c - the core of the tfaot runtime shim (see tfrt.h): objects,
 * arena, hal_inline.* buffers and views, vm.buffer.* helpers.
 *
 * Included once by each generated model source ("unity" build) after the
 * backend header; every function is static.  No heap, no globals with
 * mutable state: all mutable data lives in the tfrt_runtime of a context.
 *
 * Reference-counting rules (shared with the emitter):
 *   - functions returning an object through an out-pointer return it owned (+1);
 *   - tfrt_release(NULL) is a no-op; immortal objects (refs < 0) are never written.
 */
#ifndef TFRT_UNITY_BUILD
/* Compiled on its own (an IDE, or a CMake file(GLOB) of every .c in src/):
 * the model's source NAME.c includes this file, so there is nothing to
 * compile here.  (A declaration keeps the unit from being empty.) */
typedef int tfrt_tfrt_core_c_is_included_by_the_model_source;
#else
#include "tfrt_backend.h"

#ifdef TFRT_DEVICE_MEMORY
/* The arena is device memory: its bytes move through the backend. */
#define TFRT_ARENA_FLAGS TFRT_FLAG_DEVICE
#define TFRT_ON_DEVICE(b) (((b)->hdr.flags & TFRT_FLAG_DEVICE) != 0)
#define TFRT_DEVICE_CALL(call) (call)
#else
#define TFRT_ARENA_FLAGS 0u
#define TFRT_ON_DEVICE(b) 0
#define TFRT_DEVICE_CALL(call) TFRT_STATUS_UNIMPLEMENTED /* not reached */
#endif

/* ---- objects --------------------------------------------------------------- */

TFRT_INTERNAL void *tfrt_retain(void *object) {
  tfrt_obj *obj = (tfrt_obj *)object;
  if (obj && obj->refs >= 0) obj->refs++;
  return object;
}

static void tfrt_release(tfrt_runtime *rt, void *object);

/* The last reference dropped: the block or view goes back to its free list. */
__attribute__((noinline)) TFRT_INTERNAL void tfrt_free_object(tfrt_runtime *rt, tfrt_obj *obj) {
  tfrt_arena *a = &rt->arena;
  if (obj->kind == TFRT_KIND_BUFFER) {
    /* (through void *: the object is the buffer's first member, which
     * -Wcast-align cannot see) */
    tfrt_buffer *b = (tfrt_buffer *)(void *)obj;
    b->next_free = a->free_heads[b->pool];
    a->free_heads[b->pool] = b;
  } else if (obj->kind == TFRT_KIND_VIEW) {
    tfrt_view *v = (tfrt_view *)(void *)obj;
    tfrt_buffer *b = v->buffer;
    v->buffer = NULL;
    v->next_free = a->free_views;
    a->free_views = v;
    tfrt_release(rt, b);
  }
}

/* Inlined: a step releases every value it held (a dozen on a small model),
 * most of them NULL, immortal or still referenced; as calls they were 7% of
 * a SimpleRNN(16)'s instructions on a Cortex-M4. */
__attribute__((always_inline)) static inline void tfrt_release(tfrt_runtime *rt, void *object) {
  tfrt_obj *obj = (tfrt_obj *)object;
  if (obj && obj->refs >= 0 && --obj->refs <= 0) tfrt_free_object(rt, obj);
}

/* Sets up free lists over the arena.  Called from the model's init after the
 * context has been zeroed and its pointers filled. */
TFRT_INTERNAL int tfrt_runtime_init(tfrt_runtime *rt) {
  tfrt_arena *a = &rt->arena;
  rt->executables.used = 0;
  int status = tfrt_backend_init(rt);  /* may place the arena in device memory */
  if (status != TFRT_OK) return status;
  if (!a->arena) {
    tfrt_backend_deinit(rt);
    return TFRT_STATUS_OUT_OF_MEMORY;
  }
  size_t offset = 0;
  uint32_t slot = 0;
  for (uint32_t p = 0; p < a->pool_count; ++p) {
    a->free_heads[p] = NULL;
    for (uint32_t i = 0; i < a->pools[p].count; ++i) {
      tfrt_buffer *b = &a->buffer_slots[slot++];
      if (offset + a->pools[p].size > a->arena_bytes) {
        tfrt_backend_deinit(rt);
        return TFRT_STATUS_OUT_OF_MEMORY;
      }
      b->hdr.refs = 0;
      b->hdr.kind = TFRT_KIND_BUFFER;
      b->hdr.flags = TFRT_ARENA_FLAGS;
      b->pool = p;
      b->data = a->arena + offset;
      b->length = 0;
      b->next_free = a->free_heads[p];
      a->free_heads[p] = b;
      offset += a->pools[p].size;
    }
  }
  a->free_views = NULL;
  for (uint32_t i = 0; i < a->view_count; ++i) {
    tfrt_view *v = &a->view_slots[i];
    v->hdr.refs = 0;
    v->hdr.kind = TFRT_KIND_VIEW;
    v->next_free = a->free_views;
    a->free_views = v;
  }
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

/* Takes the head of pool p's free list (not empty) as a buffer of `size`
 * bytes (size fits the pool's blocks). */
__attribute__((always_inline)) static inline tfrt_buffer *tfrt_buffer_take(tfrt_arena *a,
                                                                           uint32_t p,
                                                                           int64_t size) {
  tfrt_buffer *b = a->free_heads[p];
  a->free_heads[p] = b->next_free;
  b->next_free = NULL;
  b->hdr.refs = 1;
  b->length = (size_t)size;
  return b;
}

/* hal_inline.buffer.allocate(alignment, size) -> (!hal.buffer, !vm.buffer).
 * Takes the smallest free block whose size class fits. */
TFRT_INTERNAL int tfrt_buffer_allocate(tfrt_runtime *rt, int32_t alignment, int64_t size,
                                       tfrt_buffer **out) {
  tfrt_arena *a = &rt->arena;
  *out = NULL;
  if (size < 0 || alignment > TFRT_ALIGNMENT) return TFRT_STATUS_INVALID_ARGUMENT;
  for (uint32_t p = 0; p < a->pool_count; ++p) {
    if (a->pools[p].size < (uint64_t)size || !a->free_heads[p]) continue;
    *out = tfrt_buffer_take(a, p, size);
    return TFRT_OK;
  }
  return TFRT_STATUS_OUT_OF_MEMORY;
}

/* hal_inline.buffer.allocate where the memory plan says which pool fits
 * best: a block of that pool when one is free (the plan counts on it), the
 * search above otherwise. Inlined: the search's loop was 40 of a
 * SimpleRNN(16) step's 3.9k estimated M4 cycles per allocation. */
__attribute__((always_inline)) static inline int tfrt_buffer_allocate_from(
    tfrt_runtime *rt, uint32_t pool, int32_t alignment, int64_t size, tfrt_buffer **out) {
  tfrt_arena *a = &rt->arena;
  if (!a->free_heads[pool] || size < 0 || (uint64_t)size > a->pools[pool].size ||
      alignment > TFRT_ALIGNMENT)
    return tfrt_buffer_allocate(rt, alignment, size, out);
  *out = tfrt_buffer_take(a, pool, size);
  return TFRT_OK;
}

/* hal_inline.buffer.allocate of `size` bytes in a block of `block` bytes or
 * more: the memory plan's (compiler/emit/memory.py: a state global's first
 * buffer takes the size class of its later ones); its length stays `size`,
 * as the program asked. */
TFRT_INTERNAL int tfrt_buffer_allocate_in(tfrt_runtime *rt, int32_t alignment, int64_t size,
                                          int64_t block, tfrt_buffer **out) {
  if (size < 0 || size > block) return TFRT_STATUS_INVALID_ARGUMENT;
  const int status = tfrt_buffer_allocate(rt, alignment, block, out);
  if (status == TFRT_OK) (*out)->length = (size_t)size;
  return status;
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
  tfrt_arena *a = &rt->arena;
  *out = NULL;
  if (!buffer) return TFRT_STATUS_NULL_REF;
  if (rank > TFRT_MAX_RANK) return TFRT_STATUS_UNIMPLEMENTED;
  if (offset < 0 || length < 0 || (uint64_t)offset + (uint64_t)length > buffer->length)
    return TFRT_STATUS_OUT_OF_RANGE;
  tfrt_view *v = a->free_views;
  if (!v) return TFRT_STATUS_OUT_OF_MEMORY;
  a->free_views = v->next_free;
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
      view->rank != rank || rank > TFRT_MAX_RANK)
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

/* vm.buffer.copy: byte offsets and length. Inlined: the program's lengths
 * are constants, so a small copy becomes a few loads and stores (a
 * SimpleRNN(16) step copies 32 and 64 bytes). */
__attribute__((always_inline)) static inline int tfrt_buffer_copy(
    tfrt_runtime *rt, tfrt_buffer *src, int64_t src_offset, tfrt_buffer *dst,
    int64_t dst_offset, int64_t length) {
  (void)rt;
  if (!src || !dst) return TFRT_STATUS_NULL_REF;
  if (dst->hdr.flags & TFRT_FLAG_READONLY) return TFRT_STATUS_INVALID_ARGUMENT;
  if (!tfrt_range_ok(src, src_offset, length) || !tfrt_range_ok(dst, dst_offset, length))
    return TFRT_STATUS_OUT_OF_RANGE;
  if (TFRT_ON_DEVICE(src) || TFRT_ON_DEVICE(dst))
    return TFRT_DEVICE_CALL(tfrt_backend_copy(rt, dst->data + dst_offset,
                                              src->data + src_offset, (size_t)length));
  uint8_t *to = dst->data + dst_offset;
  const uint8_t *from = src->data + src_offset;
  /* memcpy where the ranges are apart, which they nearly always are: C
   * libraries tune it (newlib's Cortex-M memcpy moves words where its
   * memmove moved bytes; a streamed DS-CNN step copies 40 KB). Compared as
   * integers: < between pointers into different buffers is undefined. */
  const uintptr_t a = (uintptr_t)to, b = (uintptr_t)from, n = (uintptr_t)length;
  if (a + n <= b || b + n <= a)
    memcpy(to, from, (size_t)length);
  else
    memmove(to, from, (size_t)length);
  return TFRT_OK;
}

/* vm.buffer.fill.iN: offset and length counted in elements of `width` bytes. */
TFRT_INTERNAL int tfrt_buffer_fill(tfrt_runtime *rt, tfrt_buffer *dst, int64_t offset,
                                   int64_t count, uint64_t value, uint32_t width) {
  (void)rt;
  if (!dst) return TFRT_STATUS_NULL_REF;
  if (dst->hdr.flags & TFRT_FLAG_READONLY) return TFRT_STATUS_INVALID_ARGUMENT;
  if (offset < 0 || count < 0 || offset > INT64_MAX / width || count > INT64_MAX / width ||
      !tfrt_range_ok(dst, offset * (int64_t)width, count * (int64_t)width))
    return TFRT_STATUS_OUT_OF_RANGE;
  uint8_t *p = dst->data + offset * (int64_t)width;
  if (TFRT_ON_DEVICE(dst))
    return TFRT_DEVICE_CALL(tfrt_backend_fill(rt, p, (size_t)count, value, width));
  if (width == 1) {
    memset(p, (int)(value & 0xFFu), (size_t)count);
    return TFRT_OK;
  }
  for (int64_t i = 0; i < count; ++i) memcpy(p + i * (int64_t)width, &value, width); /* little-endian */
  return TFRT_OK;
}

/* vm.buffer.load.*: element index; the raw bytes land in *out (zero-extended). */
TFRT_INTERNAL int tfrt_buffer_load(tfrt_runtime *rt, const tfrt_buffer *src, int64_t index,
                                   uint32_t width, void *out) {
  if (!src) return TFRT_STATUS_NULL_REF;
  if (index < 0 || index > INT64_MAX / width ||
      !tfrt_range_ok(src, index * (int64_t)width, (int64_t)width))
    return TFRT_STATUS_OUT_OF_RANGE;
  return tfrt_backend_read(rt, out, src->data + index * (int64_t)width, width);
}

/* vm.buffer.store.*: element index. */
TFRT_INTERNAL int tfrt_buffer_store(tfrt_runtime *rt, tfrt_buffer *dst, int64_t index,
                                    uint32_t width, const void *value) {
  (void)rt;
  if (!dst) return TFRT_STATUS_NULL_REF;
  if (dst->hdr.flags & TFRT_FLAG_READONLY) return TFRT_STATUS_INVALID_ARGUMENT;
  if (index < 0 || index > INT64_MAX / width ||
      !tfrt_range_ok(dst, index * (int64_t)width, (int64_t)width))
    return TFRT_STATUS_OUT_OF_RANGE;
  if (TFRT_ON_DEVICE(dst))
    return TFRT_DEVICE_CALL(tfrt_backend_write(rt, dst->data + index * (int64_t)width, value,
                                               width));
  memcpy(dst->data + index * (int64_t)width, value, width);
  return TFRT_OK;
}

/* ---- helpers for backends ---------------------------------------------------- */

/* Whether a (rodata) buffer holds the string s. */
TFRT_INTERNAL int tfrt_cstr_eq(const tfrt_buffer *b, const char *s) {
  size_t n = strlen(s);
  if (!b) return 0;
  /* rodata strings may or may not carry their NUL terminator */
  if (b->length == n + 1 && b->data[n] == 0) return memcmp(b->data, s, n) == 0;
  return b->length == n && memcmp(b->data, s, n) == 0;
}

TFRT_INTERNAL size_t tfrt_round_up(size_t n, size_t align) {
  return (n + align - 1) / align * align;
}

/* ---- executables: the parts every backend shares ----------------------------- */

/* Takes the next executable slot (immortal: it lives as long as the context)
 * with every dispatch name unresolved; NULL when the slots are used up. */
TFRT_INTERNAL tfrt_executable *tfrt_executable_new(tfrt_runtime *rt) {
  tfrt_executable_table *t = &rt->executables;
  if (t->used >= t->count) return NULL;
  tfrt_executable *exe = &t->slots[t->used];
  exe->hdr.refs = -1;
  exe->hdr.kind = TFRT_KIND_EXECUTABLE;
  exe->hdr.flags = 0;
  exe->function_ids = t->function_ids + (size_t)t->used * t->function_name_count;
  for (uint32_t n = 0; n < t->function_name_count; ++n) exe->function_ids[n] = UINT32_MAX;
  t->used++;
  return exe;
}

/* Resolves the dispatch names equal to `name` to `function_id` (the first
 * function of that name wins). */
TFRT_INTERNAL void tfrt_executable_name(const tfrt_runtime *rt, tfrt_executable *exe,
                                        const char *name, uint32_t function_id) {
  const tfrt_executable_table *t = &rt->executables;
  for (uint32_t n = 0; n < t->function_name_count; ++n)
    if (exe->function_ids[n] == UINT32_MAX && strcmp(name, t->function_names[n]) == 0)
      exe->function_ids[n] = function_id;
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

/* ---- device buffers (GPU backends) ------------------------------------------- */

/* The offset in the device buffer (arena, then staging) where a binding's
 * bytes are: an arena block where it lies; a read-only caller buffer gets a
 * staging slot once per batch, and *copy = 1 says the backend must copy the
 * bytes there now.  OUT_OF_MEMORY: the staging area is full (finish the
 * batch, tfrt_staging_clear, try again). */
TFRT_INTERNAL int tfrt_device_offset(const tfrt_arena *arena, tfrt_staging *staging,
                                     const tfrt_binding *b, size_t *offset, int *copy) {
  const uint8_t *start = b->buffer->data + b->offset;
  size_t length = (size_t)b->length;
  *copy = 0;
  if (start >= arena->arena && start + length <= arena->arena + arena->arena_bytes) {
    *offset = (size_t)(start - arena->arena);
    return TFRT_OK;
  }
  if (!(b->buffer->hdr.flags & TFRT_FLAG_READONLY)) return TFRT_STATUS_UNIMPLEMENTED;
  for (uint32_t i = 0; i < staging->count; ++i)
    if (staging->staged[i].source == start && staging->staged[i].length == length) {
      *offset = staging->staged[i].offset;
      return TFRT_OK;
    }
  size_t used = tfrt_round_up(staging->used, TFRT_ALIGNMENT);
  if (staging->count == TFRT_MAX_STAGED || used + length > staging->bytes)
    return TFRT_STATUS_OUT_OF_MEMORY;
  tfrt_staged *s = &staging->staged[staging->count++];
  s->source = start;
  s->length = length;
  s->offset = tfrt_round_up(arena->arena_bytes, TFRT_ALIGNMENT) + used;
  staging->used = used + length;
  *offset = s->offset;
  *copy = 1;
  return TFRT_OK;
}

/* Frees every staging slot: the batch that read them has finished. */
TFRT_INTERNAL void tfrt_staging_clear(tfrt_staging *staging) {
  staging->used = 0;
  staging->count = 0;
}
#endif /* TFRT_UNITY_BUILD */
