/* Minimal Cortex-M start-up for QEMU's MPS2 boards and Arm semihosting
 * output: no C library start files, no heap, no syscalls. */
#include <stdint.h>

#include "semihost.h"

extern uint32_t __bss_start, __bss_end, __stack_top;
int main(void);
void reset_handler(void);

static void fault_handler(void) { semihost_exit(3); }

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))&__stack_top, reset_handler, fault_handler, fault_handler,
    fault_handler, fault_handler, fault_handler, 0, 0, 0, 0, fault_handler, fault_handler,
    0, fault_handler, fault_handler,
};

void reset_handler(void) {
#if defined(__ARM_FP)
  /* Enable the FPU (CP10, CP11 full access) before any float instruction. */
  *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
  for (uint32_t *p = &__bss_start; p < &__bss_end; ++p) *p = 0;
  semihost_exit(main());
}
