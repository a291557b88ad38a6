/* A fake libcuda.so.1 for tests without a GPU: the driver functions the CUDA
 * backend of the runtime shim (runtime_shim/tfrt_cuda.c) loads, with kernels
 * that do nothing.  Device memory is an address range the host cannot touch
 * (PROT_NONE: a host access by the shim crashes the test) backed by host
 * memory that only this driver's copies and memsets reach.  Every call that
 * matters is logged to stdout, one line each:
 *   module PTX_BYTES                  cuModuleLoadData (the image must be NUL-terminated PTX)
 *   function NAME ptrs P b32 C        cuModuleGetFunction: the kernel's parameters (from the PTX)
 *   launch NAME grid X Y Z block X Y Z shared S params N ok|BAD(why)
 *                                     cuLaunchKernel: params checked against the PTX: each pointer
 *                                     16-byte aligned inside an allocation, on the context's stream
 *   copy BYTES                        cuMemcpyHtoDAsync_v2 (into an allocation)
 *   read BYTES                        cuMemcpyDtoH_v2 (out of an allocation)
 *   dtod BYTES / memset BYTES         cuMemcpyDtoDAsync_v2 / cuMemsetD{8,16,32}Async
 *   alloc BYTES / free
 *   leaks contexts C modules M allocations A streams S   (at exit: all 0 when released)
 * FAKE_CUDA_DEVICES=0 makes cuDeviceGetCount report no device; FAKE_CUDA_FAIL=NAME
 * makes driver function NAME fail (to test the shim's clean-up). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef unsigned int result;
enum { OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, INVALID_IMAGE = 200,
       INVALID_CONTEXT = 201, NOT_FOUND = 500 };

#define MAX_ALLOCATIONS 64
#define MAX_FUNCTIONS 256

/* base: the device address (reserved, no access); shadow: where its bytes are. */
typedef struct allocation { uint8_t *base; uint8_t *shadow; size_t bytes; } allocation;
typedef struct module { char *ptx; } module;
typedef struct function { char name[256]; int pointers; int words; } function;
typedef struct stream { int magic; } stream;

static int initialized, context_refs, modules_live, streams_live;
static int context_token;  /* the primary context is its address */
static _Thread_local void *current;
static allocation allocations[MAX_ALLOCATIONS];
static function functions[MAX_FUNCTIONS];
static int function_count;

static allocation *find_allocation(uint64_t address, size_t bytes) {
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    allocation *a = &allocations[i];
    if (a->base && address >= (uint64_t)(uintptr_t)a->base &&
        address + bytes <= (uint64_t)(uintptr_t)a->base + a->bytes)
      return a;
  }
  return NULL;
}

/* The error FAKE_CUDA_FAIL asks `function` to return, or OK. */
static result injected(const char *function) {
  const char *fail = getenv("FAKE_CUDA_FAIL");
  return fail && strcmp(fail, function) == 0 ? INVALID_VALUE : OK;
}

static result need_context(void) {
  if (!initialized) return NOT_INITIALIZED;
  return current == &context_token && context_refs > 0 ? OK : INVALID_CONTEXT;
}

result cuInit(unsigned int flags) {
  if (flags) return INVALID_VALUE;
  initialized = 1;
  return OK;
}

result cuDeviceGetCount(int *count) {
  const char *devices = getenv("FAKE_CUDA_DEVICES");
  *count = devices ? atoi(devices) : 1;
  return initialized ? OK : NOT_INITIALIZED;
}

result cuDeviceGet(int *device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? OK : INVALID_VALUE;
}

result cuDevicePrimaryCtxRetain(void **context, int device) {
  if (device != 0) return INVALID_VALUE;
  context_refs++;
  *context = &context_token;
  return OK;
}

result cuDevicePrimaryCtxRelease_v2(int device) {
  if (device != 0 || context_refs == 0) return INVALID_VALUE;
  context_refs--;
  return OK;
}

result cuCtxSetCurrent(void *context) {
  if (context != &context_token) return INVALID_CONTEXT;
  current = context;
  return OK;
}

result cuStreamCreate(stream **out, unsigned int flags) {
  if (injected("cuStreamCreate") != OK) return INVALID_VALUE;
  result r = need_context();
  if (r != OK) return r;
  if (flags != 1) return INVALID_VALUE;  /* the shim asks for CU_STREAM_NON_BLOCKING */
  *out = malloc(sizeof(stream));
  (*out)->magic = 0x57;
  streams_live++;
  return OK;
}

result cuStreamDestroy_v2(stream *s) {
  if (!s || s->magic != 0x57) return INVALID_VALUE;
  s->magic = 0;
  free(s);
  streams_live--;
  return OK;
}

result cuStreamSynchronize(stream *s) {
  if (injected("cuStreamSynchronize") != OK) return INVALID_VALUE;
  result r = need_context();
  return r != OK ? r : (s && s->magic == 0x57 ? OK : INVALID_VALUE);
}

result cuMemAlloc_v2(uint64_t *address, size_t bytes) {
  if (injected("cuMemAlloc_v2") != OK) return INVALID_VALUE;
  result r = need_context();
  if (r != OK) return r;
  if (bytes == 0) return INVALID_VALUE;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i)
    if (!allocations[i].base) {
      allocation *a = &allocations[i];
      void *base = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base == MAP_FAILED) return INVALID_VALUE;
      a->base = base;
      a->shadow = aligned_alloc(256, (bytes + 255) / 256 * 256);
      memset(a->shadow, 0xA5, bytes);  /* garbage, as device memory is */
      a->bytes = bytes;
      *address = (uint64_t)(uintptr_t)a->base;
      printf("alloc %zu\n", bytes);
      return OK;
    }
  return INVALID_VALUE;
}

result cuMemFree_v2(uint64_t address) {
  allocation *a = find_allocation(address, 1);
  if (!a || (uint64_t)(uintptr_t)a->base != address) return INVALID_VALUE;
  munmap(a->base, a->bytes);
  free(a->shadow);
  a->base = a->shadow = NULL;
  printf("free\n");
  return OK;
}

/* The host bytes behind a device range, or NULL when it is not one. */
static uint8_t *shadow_of(uint64_t address, size_t bytes) {
  allocation *a = find_allocation(address, bytes);
  return a ? a->shadow + (address - (uint64_t)(uintptr_t)a->base) : NULL;
}

static int good_stream(const stream *s) { return s && s->magic == 0x57; }

result cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t bytes, stream *s) {
  result r = need_context();
  if (r != OK) return r;
  uint8_t *to = shadow_of(dst, bytes);
  if (!good_stream(s) || !to) return INVALID_VALUE;
  memcpy(to, src, bytes);
  printf("copy %zu\n", bytes);
  return OK;
}

result cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes) {
  result r = need_context();
  if (r != OK) return r;
  const uint8_t *from = shadow_of(src, bytes);
  if (!dst || !from) return INVALID_VALUE;
  memcpy(dst, from, bytes);
  printf("read %zu\n", bytes);
  return OK;
}

result cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, stream *s) {
  result r = need_context();
  if (r != OK) return r;
  uint8_t *to = shadow_of(dst, bytes), *from = shadow_of(src, bytes);
  if (!good_stream(s) || !to || !from) return INVALID_VALUE;
  memmove(to, from, bytes);
  printf("dtod %zu\n", bytes);
  return OK;
}

/* cuMemsetD8Async, D16, D32: `count` elements of `width` bytes. */
static result fake_memset(uint64_t dst, uint32_t value, size_t count, size_t width, stream *s) {
  result r = need_context();
  if (r != OK) return r;
  uint8_t *to = shadow_of(dst, count * width);
  if (!good_stream(s) || !to || dst % width) return INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) memcpy(to + i * width, &value, width);
  printf("memset %zu\n", count * width);
  return OK;
}

result cuMemsetD8Async(uint64_t dst, unsigned char value, size_t count, stream *s) {
  return fake_memset(dst, value, count, 1, s);
}

result cuMemsetD16Async(uint64_t dst, unsigned short value, size_t count, stream *s) {
  return fake_memset(dst, value, count, 2, s);
}

result cuMemsetD32Async(uint64_t dst, unsigned int value, size_t count, stream *s) {
  return fake_memset(dst, value, count, 4, s);
}

result cuModuleLoadData(module **out, const void *image) {
  if (injected("cuModuleLoadData") != OK) return INVALID_VALUE;
  result r = need_context();
  if (r != OK) return r;
  const char *ptx = image;
  /* The image must be PTX text, NUL-terminated within a sane length. */
  size_t n = strnlen(ptx, 64u << 20);
  if (n == 64u << 20 || !strstr(ptx, ".version") || !strstr(ptx, ".entry")) return INVALID_IMAGE;
  *out = malloc(sizeof(module));
  (*out)->ptx = strdup(ptx);
  modules_live++;
  printf("module %zu\n", n);
  return OK;
}

result cuModuleUnload(module *m) {
  if (!m) return INVALID_VALUE;
  free(m->ptx);
  free(m);
  modules_live--;
  return OK;
}

/* The kernel's parameter list from the PTX: `.entry NAME(` ... `)`. */
result cuModuleGetFunction(function **out, module *m, const char *name) {
  if (injected("cuModuleGetFunction") != OK) return INVALID_VALUE;
  result r = need_context();
  if (r != OK) return r;
  char pattern[300];
  snprintf(pattern, sizeof pattern, ".entry %s(", name);
  const char *entry = strstr(m->ptx, pattern);
  if (!entry || function_count == MAX_FUNCTIONS) return NOT_FOUND;
  const char *end = strchr(entry, ')');
  function *f = &functions[function_count++];
  snprintf(f->name, sizeof f->name, "%s", name);
  f->pointers = f->words = 0;
  for (const char *p = strstr(entry, ".param"); p && p < end; p = strstr(p + 1, ".param")) {
    if (strncmp(p, ".param .u64 .ptr", 16) == 0) f->pointers++;
    else if (strncmp(p, ".param .b32", 11) == 0) f->words++;
    else return INVALID_IMAGE;  /* a parameter kind the shim does not pass */
  }
  *out = f;
  printf("function %s ptrs %d b32 %d\n", name, f->pointers, f->words);
  return OK;
}

result cuFuncSetAttribute(function *f, unsigned int attribute, int value) {
  printf("attribute %s %u %d\n", f->name, attribute, value);
  return OK;
}

/* Checks the parameters against the PTX's list, as the real driver would
 * (it cannot: it trusts the caller); logs the launch. */
result cuLaunchKernel(function *f, unsigned int gx, unsigned int gy, unsigned int gz,
                      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                      stream *s, void **params, void **extra) {
  if (injected("cuLaunchKernel") != OK) return INVALID_VALUE;
  result r = need_context();
  if (r != OK) return r;
  const char *why = NULL;
  if (!s || s->magic != 0x57) why = "stream";
  else if (extra) why = "extra";
  else if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) why = "dims";
  for (int i = 0; i < f->pointers && !why; ++i) {
    uint64_t address = *(const uint64_t *)params[i];
    if (address % 16 || !find_allocation(address, 1)) why = "pointer";
  }
  for (int i = 0; i < f->words && !why; ++i)
    if (!params[f->pointers + i]) why = "constant";
  printf("launch %s grid %u %u %u block %u %u %u shared %u params %d %s%s%s\n", f->name, gx,
         gy, gz, bx, by, bz, shared, f->pointers + f->words, why ? "BAD(" : "ok",
         why ? why : "", why ? ")" : "");
  return why ? INVALID_VALUE : OK;
}

__attribute__((destructor)) static void report_leaks(void) {
  int live = 0;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) live += allocations[i].base != NULL;
  if (initialized)
    printf("leaks contexts %d modules %d allocations %d streams %d\n", context_refs,
           modules_live, live, streams_live);
  fflush(stdout);
}
