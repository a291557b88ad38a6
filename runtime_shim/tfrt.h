/* tfrt.h - core of tfaot's runtime shim: the objects, arena and buffers that
 * an IREE VM host program needs, in freestanding C11, with no heap.
 *
 * The shim is a core (this header, tfrt_core.c) plus one backend per target
 * kind (tfrt_cpu.h/.c: the CPU kernel library; see tfrt_backend.h for what a
 * backend provides).  The generated model source includes the backend header
 * and then tfrt_core.c and the backend's .c (one translation unit per model),
 * so every shim function is static: two models linked into one firmware image
 * never clash, and the C compiler can inline the shim into the program.
 *
 * Objects (all owned by one model context, no globals):
 *   tfrt_buffer     a refcounted byte buffer (IREE's !hal.buffer and
 *                   !vm.buffer are the same object here); carved from the
 *                   context arena, or static (rodata), or wrapping caller memory
 *   tfrt_view       a refcounted buffer view (!hal.buffer_view)
 *   tfrt_executable a loaded kernel library (!hal.executable), backend-defined
 *
 * tfaot computes the size of a model context from these struct definitions
 * (compiler/package/c_layout.py), for targets whose compiler is not installed: keep
 * every field a plain declaration (type, optional pointer stars, name,
 * optional array size), no bit-fields.
 */
#ifndef TFRT_H_
#define TFRT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef TFRT_FREESTANDING
/* No C library headers (e.g. -ffreestanding); the few functions used are
 * provided by every embedded libc or by the compiler runtime. */
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
int strcmp(const char *a, const char *b);
size_t strlen(const char *s);
#else
#include <string.h>
#endif

#include "tfrt_status.h"  /* generated from compiler/status.py at package time */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TFRT_INTERNAL static __attribute__((unused))
#else
#define TFRT_INTERNAL static
#endif

/* Element type codes used by buffer views (IREE's encoding). */
#define TFRT_ELEMENT_TYPE_F32 0x21000020u
#define TFRT_ELEMENT_TYPE_I8 0x10000008u
#define TFRT_ELEMENT_TYPE_I32 0x10000020u
#define TFRT_ELEMENT_TYPE_I1 0x13000008u

/* A generated model defines its own (the most dimensions its views have):
 * each view holds TFRT_MAX_RANK int64 dimensions. */
#ifndef TFRT_MAX_RANK
#define TFRT_MAX_RANK 8
#endif
#define TFRT_ALIGNMENT 64

typedef enum tfrt_kind {
  TFRT_KIND_BUFFER = 1,
  TFRT_KIND_VIEW = 2,
  TFRT_KIND_EXECUTABLE = 3,
} tfrt_kind;

/* Header shared by every refcounted object.  refs < 0 marks an immortal
 * object (rodata, executables, wrapped caller memory): retain/release never
 * write to it, so static objects may be shared between contexts/threads. */
typedef struct tfrt_obj {
  int32_t refs;
  uint16_t kind;
  uint16_t flags;
} tfrt_obj;

#define TFRT_FLAG_READONLY 1u
/* An arena buffer in device memory: its bytes move through the backend. */
#define TFRT_FLAG_DEVICE 2u

typedef struct tfrt_buffer {
  tfrt_obj hdr;
  uint32_t pool;                  /* size-class index (arena buffers) */
  uint8_t *data;
  size_t length;
  struct tfrt_buffer *next_free;
} tfrt_buffer;

typedef struct tfrt_view {
  tfrt_obj hdr;
  uint32_t element_type;
  tfrt_buffer *buffer;            /* owned reference */
  size_t offset;
  size_t length;
  uint32_t encoding;
  uint32_t rank;
  int64_t shape[TFRT_MAX_RANK];
  struct tfrt_view *next_free;
} tfrt_view;

/* One size class of the arena: `count` blocks of `size` bytes each. */
typedef struct tfrt_pool_desc {
  size_t size;
  uint32_t count;
} tfrt_pool_desc;

/* The core's part of a context: the arena, carved into size classes, and the
 * object pools.  The generated code fills the pointers (into storage inside
 * the context) before tfrt_runtime_init. */
typedef struct tfrt_arena {
  uint8_t *arena;
  size_t arena_bytes;
  const tfrt_pool_desc *pools;
  uint32_t pool_count;
  tfrt_buffer *buffer_slots;      /* one per arena block, sum of pool counts */
  tfrt_buffer **free_heads;       /* pool_count free lists */
  tfrt_view *view_slots;
  uint32_t view_count;
  tfrt_view *free_views;
} tfrt_arena;

/* Defined by tfrt_backend.h: the core's tfrt_arena plus the backend's state. */
typedef struct tfrt_runtime tfrt_runtime;
/* Defined by the backend header (tfrt_cpu.h: a kernel library). */
typedef struct tfrt_executable tfrt_executable;

/* One result of a direct step (NAME_vm_step_direct): where its bytes are,
 * how many, and their element type. */
typedef struct tfrt_result {
  const uint8_t *data;
  size_t length;
  uint32_t element_type;
} tfrt_result;

/* A (buffer, offset, length) binding of a dispatch. */
/* The executables a program loads (slots in the context) and the dispatch
 * names lookup.function resolves; filled by the generated init, the same for
 * every backend (tfrt_executable_new / tfrt_executable_name / lookup). */
typedef struct tfrt_executable_table {
  tfrt_executable *slots;
  uint32_t count;
  uint32_t used;
  const char *const *function_names;
  uint32_t function_name_count;
  uint32_t *function_ids;         /* one row of function_name_count per slot */
} tfrt_executable_table;

/* GPU backends bind one device buffer: the arena at offset 0, then a
 * staging area (at the arena size rounded up to TFRT_ALIGNMENT) where
 * read-only caller buffers, the step's input, are copied once per batch of
 * dispatches (tfrt_device_offset). */
#define TFRT_MAX_STAGED 16u

typedef struct tfrt_staged {
  const uint8_t *source;
  size_t length;
  size_t offset;                  /* in the device buffer */
} tfrt_staged;

typedef struct tfrt_staging {
  size_t bytes;                   /* size of the staging area */
  size_t used;
  uint32_t count;
  tfrt_staged staged[TFRT_MAX_STAGED];
} tfrt_staging;

typedef struct tfrt_binding {
  tfrt_buffer *buffer;
  int64_t offset;
  int64_t length;
} tfrt_binding;

#ifdef __cplusplus
}
#endif

#endif /* TFRT_H_ */
