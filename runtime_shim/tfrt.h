/* tfrt.h - tfaot's runtime shim: the few objects and imported functions that
 * an IREE VM host program needs, in freestanding C11, with no heap.
 *
 * The generated model source includes this header and then tfrt.c (one
 * translation unit per model), so every shim function is static: two models
 * linked into one firmware image never clash, and the C compiler can inline
 * the shim into the generated program.
 *
 * Objects (all owned by one model context, no globals):
 *   tfrt_buffer     a refcounted byte buffer (IREE's !hal.buffer and
 *                   !vm.buffer are the same object here); carved from the
 *                   context arena, or static (rodata), or wrapping caller memory
 *   tfrt_view       a refcounted buffer view (!hal.buffer_view)
 *   tfrt_executable the loaded kernel library (!hal.executable)
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

#include "tfrt_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TFRT_INTERNAL static __attribute__((unused))
#else
#define TFRT_INTERNAL static
#endif

/* Status codes.  0 is success; the generated header re-exports these under
 * the model's prefix and documents them. */
enum {
  TFRT_OK = 0,
  TFRT_STATUS_INVALID_ARGUMENT = 1,  /* NULL pointer, wrong shape/type, bad id */
  TFRT_STATUS_NOT_INITIALIZED = 2,   /* call before init / after deinit */
  TFRT_STATUS_OUT_OF_MEMORY = 3,     /* the static arena or an object pool is full */
  TFRT_STATUS_ABI_MISMATCH = 4,      /* kernel object does not speak library ABI v6 */
  TFRT_STATUS_KERNEL_FAILED = 5,     /* a dispatch function returned non-zero */
  TFRT_STATUS_PROGRAM_FAILED = 6,    /* the host program raised vm.fail */
  TFRT_STATUS_UNIMPLEMENTED = 7,     /* feature the shim does not support */
  TFRT_STATUS_OUT_OF_RANGE = 8,      /* buffer access outside its bounds */
  TFRT_STATUS_NULL_REF = 9,          /* a NULL buffer/view/executable was used */
  TFRT_STATUS_NOT_FOUND = 10,        /* kernel library or dispatch not found */
  TFRT_STATUS_IO = 11,               /* an I/O hook (read_input/write_output) failed */
  TFRT_STATUS_COUNT_
};

/* Element type codes used by buffer views (IREE's encoding). */
#define TFRT_ELEMENT_TYPE_F32 0x21000020u
#define TFRT_ELEMENT_TYPE_I8 0x10000008u
#define TFRT_ELEMENT_TYPE_I32 0x10000020u
#define TFRT_ELEMENT_TYPE_I1 0x13000008u

#define TFRT_MAX_RANK 8
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

/* A kernel library linked into the model: library name -> query function. */
typedef struct tfrt_library_entry {
  const char *name;
  tfrt_abi_query_fn query;
} tfrt_library_entry;

typedef struct tfrt_executable {
  tfrt_obj hdr;
  const tfrt_abi_library_v6 *library;
  uint32_t *function_ids;         /* resolved once at load, indexed by name slot */
} tfrt_executable;

/* One size class of the arena: `count` blocks of `size` bytes each. */
typedef struct tfrt_pool_desc {
  size_t size;
  uint32_t count;
} tfrt_pool_desc;

/* Everything the shim needs from a model context.  The generated code fills
 * the pointers (into storage inside the context) before tfrt_runtime_init. */
typedef struct tfrt_runtime {
  /* arena */
  uint8_t *arena;
  size_t arena_bytes;
  const tfrt_pool_desc *pools;
  uint32_t pool_count;
  tfrt_buffer *buffer_slots;      /* one per arena block, sum of pool counts */
  tfrt_buffer **free_heads;       /* pool_count free lists */
  /* views */
  tfrt_view *view_slots;
  uint32_t view_count;
  tfrt_view *free_views;
  /* kernel libraries and executables */
  const tfrt_library_entry *libraries;
  uint32_t library_count;
  tfrt_executable *executables;
  uint32_t executable_count;
  uint32_t executables_used;
  const char *const *function_names;  /* names used by lookup.function */
  uint32_t function_name_count;
  uint32_t *function_ids;             /* executable_count * function_name_count */
  /* diagnostics: high-water mark of arena bytes in use */
  size_t bytes_in_use;
  size_t bytes_high_water;
} tfrt_runtime;

/* A (buffer, offset, length) binding of a dispatch. */
typedef struct tfrt_binding {
  tfrt_buffer *buffer;
  int64_t offset;
  int64_t length;
} tfrt_binding;

#ifdef __cplusplus
}
#endif

#endif /* TFRT_H_ */
