/* print_hex.h - the kernel check drivers' output: each float as the hex of
 * its 32 bits, 16 to a line, through semihost_puts (stdio on Linux,
 * semihosting on bare metal: the driver defines or includes it first). */
#ifndef PRINT_HEX_H
#define PRINT_HEX_H

#include <stddef.h>
#include <stdint.h>

static void print_hex(const float *v, size_t n) {
  char line[9 * 16 + 2];
  for (size_t i = 0; i < n; i += 16) {
    char *p = line;
    for (size_t j = i; j < n && j < i + 16; j++) {
      uint32_t bits;
      __builtin_memcpy(&bits, &v[j], 4);
      for (int s = 28; s >= 0; s -= 4) *p++ = "0123456789abcdef"[(bits >> s) & 15u];
      *p++ = ' ';
    }
    *p++ = '\n';
    *p = 0;
    semihost_puts(line);
  }
}

#endif
