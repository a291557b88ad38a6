/* firmware_io.h - what bench_mcu.py's firmwares (firmware.c: tfaot's
 * library, tflm_firmware.cc: TFLite Micro) share, in C and C++: the empty
 * function the QEMU plugin watches, outputs printed as the hex of their
 * float32 bits, "name value" lines and the stack's high-water mark, all by
 * semihosting. measure() in bench_mcu.py reads what these print. */
#ifndef FIRMWARE_IO_H_
#define FIRMWARE_IO_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "semihost.h"

/* Stack painted below the caller's frame to find the high-water mark. */
#define PAINT_BYTES (64u * 1024u)
#define PAINT 0xA5C3E1F7u

#ifdef __cplusplus
extern "C" {
#endif
/* Called before and after each measured region; the plugin records the
 * running instruction count at each call. */
__attribute__((noinline)) void tfaot_mark(void) { __asm__ volatile("" ::: "memory"); }
#ifdef __cplusplus
}
#endif

static void put_hex(uint32_t bits, char *p) {
  for (int k = 28; k >= 0; k -= 4) *p++ = "0123456789abcdef"[(bits >> k) & 15u];
}

/* n floats, 8 a line, each as the hex of its bits and a space */
static void print_floats(const float *v, size_t n) {
  char line[9 * 8 + 2];
  for (size_t i = 0; i < n; i += 8) {
    char *p = line;
    for (size_t j = i; j < n && j < i + 8; j++, p += 9) {
      uint32_t bits;
      memcpy(&bits, &v[j], 4);
      put_hex(bits, p);
      p[8] = ' ';
    }
    *p++ = '\n';
    *p = 0;
    semihost_puts(line);
  }
}

/* "name xxxxxxxx\n" (name shorter than 20 characters) */
static void print_word(const char *name, uint32_t value) {
  char line[32];
  const size_t n = strlen(name);
  memcpy(line, name, n);
  line[n] = ' ';
  put_hex(value, line + n + 1);
  line[n + 9] = '\n';
  line[n + 10] = 0;
  semihost_puts(line);
}

/* Paints PAINT_BYTES below this frame, but for 64 bytes of it (this
 * function's own: its loop keeps its pointers in registers); returns the
 * lowest painted word. The caller's later calls (init, step) start at this
 * frame's depth, so what they use beyond 64 bytes shows. (Before, 256
 * bytes were left out: a step of a small model showed none.) */
__attribute__((noinline)) static volatile uint32_t *paint_stack(void) {
  volatile uint32_t *top = (volatile uint32_t *)__builtin_frame_address(0) - 16;
  volatile uint32_t *bottom = top - PAINT_BYTES / 4;
  for (volatile uint32_t *p = bottom; p < top; p++) *p = PAINT;
  return bottom;
}

/* The stack used since paint_stack (the painted words overwritten). */
static void print_stack_used(volatile uint32_t *bottom) {
  volatile uint32_t *p = bottom;
  while (*p == PAINT) p++;
  print_word("stack", (uint32_t)(PAINT_BYTES - (size_t)(p - bottom) * 4u));
}

#endif
