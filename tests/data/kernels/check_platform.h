/* check_platform.h - what the kernel check drivers (conv_check.c,
 * half_check.c) need from where they run: hosted, the heap and stdio
 * (AddressSanitizer watches every block); bare metal (a Cortex-M under
 * qemu-system-arm, with the example firmware's start-up, which has no
 * heap), a bump allocator over a static pool of CHECK_POOL_BYTES, emptied
 * by FREE_ALL after each case, and text by semihosting. say(text, value)
 * prints "<text><value>\n". */
#ifndef CHECK_PLATFORM_H
#define CHECK_PLATFORM_H

#include <stddef.h>
#include <string.h>

#if defined(__arm__) && !defined(__linux__)
#define CHECK_BARE_METAL 1
#include "semihost.h"
static _Alignas(64) unsigned char pool[CHECK_POOL_BYTES];
static size_t pool_used;
static void *pool_alloc(size_t size) {
  void *p = pool + pool_used;
  pool_used += (size + 63) / 64 * 64;
  if (pool_used > sizeof pool) {
    semihost_puts("kernel check: pool exhausted\n");
    semihost_exit(1);
  }
  return p;
}
#define malloc(size) pool_alloc(size)
#define calloc(count, size) memset(pool_alloc((count) * (size)), 0, (count) * (size))
#define free(p) ((void)(p))
#define FREE_ALL() (pool_used = 0)
static void say(const char *text, size_t value) {
  char digits[24], *d = digits + sizeof digits - 2;
  d[1] = 0;
  *d = '\n';
  do *--d = (char)('0' + value % 10), value /= 10; while (value);
  semihost_puts(text);
  semihost_puts(d);
}
#else
#include <stdio.h>
#include <stdlib.h>
#define FREE_ALL() ((void)0)
static void say(const char *text, size_t value) { printf("%s%zu\n", text, value); }
#endif

#endif
