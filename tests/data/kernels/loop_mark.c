/* Calibration firmware of the instruction-counting plugin
 * (tests/test_bench_mcu.py): a 1000-iteration subs/bne loop between two
 * marks, after an empty pair of marks. */
#include "semihost.h"

__attribute__((noinline)) void tfaot_mark(void) { __asm__ volatile("" ::: "memory"); }

int main(void) {
  unsigned n = 1000;
  tfaot_mark();
  tfaot_mark();
  tfaot_mark();
  __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n));
  tfaot_mark();
  return 0;
}
