/* Arm semihosting (bkpt 0xAB): text output and exit, as QEMU implements it. */
#ifndef SEMIHOST_H_
#define SEMIHOST_H_

static inline int semihost_call(int op, const void *arg) {
  register int r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

/* SYS_WRITE0: a NUL-terminated string to the host's stdout. */
static inline void semihost_puts(const char *s) { semihost_call(0x04, s); }

/* SYS_EXIT: "application exit" (QEMU exit status 0) or "internal error" (1). */
__attribute__((noreturn)) static inline void semihost_exit(int status) {
  semihost_call(0x18, (const void *)(status == 0 ? 0x20026 : 0x20024));
  for (;;) {
  }
}

#endif
