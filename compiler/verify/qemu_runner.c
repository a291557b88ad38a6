/* tfaot verify's runner for libraries built for another machine: steps the
 * library over a file of inputs and writes every step's outputs to a file,
 * under QEMU (compiler/verify/emulate.py builds and runs it).
 *
 * Built with the library's own C flags and these macros:
 *   TFAOT_MODEL, TFAOT_UPPER, TFAOT_HEADER   the model's prefix and header
 *   TFAOT_IN_T, TFAOT_IN_N    a step's input: TFAOT_IN_N values of TFAOT_IN_T
 *   TFAOT_OUT_T, TFAOT_OUT_N  a step's output, the same way
 *   TFAOT_STEPS               how many steps the input file holds
 *   TFAOT_IN_PATH, TFAOT_OUT_PATH             the files (string literals)
 *   TFAOT_WEIGHTS_PATH, TFAOT_WEIGHTS_BYTES   --weights=file builds only
 *   TFAOT_BARE_METAL          a Cortex-M image: its own start-up, and file
 *                             I/O by Arm semihosting instead of stdio
 * Exit status 0 when every step ran; otherwise a line says what failed. */
#include <stddef.h>
#include <stdint.h>

#include TFAOT_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(TFAOT_MODEL, x)
#define MACRO(x) CAT(TFAOT_UPPER, x)

#ifdef TFAOT_BARE_METAL
/* ---- Arm semihosting (bkpt 0xAB), as QEMU implements it ------------------ */
static int semihost(int op, const void *arg) {
  register int r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

__attribute__((noreturn)) static void stop(int status) {
  /* SYS_EXIT: "application exit" (QEMU exits 0) or "internal error" (1) */
  semihost(0x18, (const void *)(status == 0 ? 0x20026 : 0x20024));
  for (;;) {
  }
}

static void say(const char *line) { semihost(0x04, line); /* SYS_WRITE0 */ }

static int file_open(const char *path, int for_writing) {
  uint32_t len = 0;
  while (path[len]) ++len;
  /* SYS_OPEN modes: 1 is "rb", 5 is "wb" */
  const uint32_t args[3] = {(uint32_t)(uintptr_t)path, for_writing ? 5u : 1u, len};
  return semihost(0x01, args);
}

/* SYS_READ and SYS_WRITE return how many bytes were NOT moved. */
static int file_read(int handle, void *buf, size_t bytes) {
  const uint32_t args[3] = {(uint32_t)handle, (uint32_t)(uintptr_t)buf, (uint32_t)bytes};
  return semihost(0x06, args) == 0;
}

static int file_write(int handle, const void *buf, size_t bytes) {
  const uint32_t args[3] = {(uint32_t)handle, (uint32_t)(uintptr_t)buf, (uint32_t)bytes};
  return semihost(0x05, args) == 0;
}

static void file_close(int handle) {
  const uint32_t args[1] = {(uint32_t)handle};
  semihost(0x02, args);
}

#else
/* ---- a Linux process under qemu-user ------------------------------------- */
#include <stdio.h>
#include <stdlib.h>

static FILE *files[2];

__attribute__((noreturn)) static void stop(int status) { exit(status); }

static void say(const char *line) { fputs(line, stderr); }

static int file_open(const char *path, int for_writing) {
  FILE *f = fopen(path, for_writing ? "wb" : "rb");
  if (!f) return -1;
  files[for_writing] = f;
  return for_writing;
}

static int file_read(int handle, void *buf, size_t bytes) {
  return fread(buf, 1, bytes, files[handle]) == bytes;
}

static int file_write(int handle, const void *buf, size_t bytes) {
  return fwrite(buf, 1, bytes, files[handle]) == bytes;
}

static void file_close(int handle) { fclose(files[handle]); }
#endif

/* "tfaot-runner: WHAT failed at step K with status S" and exit 1 */
__attribute__((noreturn)) static void fail(const char *what, long step, int status) {
  char line[160], digits[12], *p = line;
  const char *parts[2] = {"tfaot-runner: ", what};
  for (int i = 0; i < 2; ++i)
    for (const char *s = parts[i]; *s && p < line + 60; ++s) *p++ = *s;
  const long numbers[2] = {step, status};
  const char *labels[2] = {" failed at step ", " with status "};
  for (int i = 0; i < 2; ++i) {
    for (const char *s = labels[i]; *s; ++s) *p++ = *s;
    long v = numbers[i];
    if (v < 0) {
      *p++ = '-';
      v = -v;
    }
    int n = 0;
    do digits[n++] = (char)('0' + v % 10); while ((v /= 10) && n < 11);
    while (n) *p++ = digits[--n];
  }
  *p++ = '\n';
  *p = 0;
  say(line);
  stop(1);
}

static _Alignas(MACRO(_CTX_ALIGN)) unsigned char ctx_mem[MACRO(_CTX_SIZE)];
static _Alignas(64) TFAOT_IN_T step_in[TFAOT_IN_N];
static _Alignas(64) TFAOT_OUT_T step_out[TFAOT_OUT_N];
#ifdef TFAOT_WEIGHTS_PATH
static _Alignas(64) unsigned char weights[TFAOT_WEIGHTS_BYTES];
#endif

int main(void) {
  CAT(TFAOT_MODEL, _ctx) *ctx = (CAT(TFAOT_MODEL, _ctx) *)ctx_mem;
#ifdef TFAOT_WEIGHTS_PATH
  int wf = file_open(TFAOT_WEIGHTS_PATH, 0);
  if (wf < 0 || !file_read(wf, weights, sizeof weights)) fail("reading the weights", -1, 0);
  file_close(wf);
  int status = FN(_init_with_weights)(ctx, weights, sizeof weights);
#else
  int status = FN(_init)(ctx);
#endif
  if (status != 0) fail("init", -1, status);
  int in = file_open(TFAOT_IN_PATH, 0), out = file_open(TFAOT_OUT_PATH, 1);
  if (in < 0 || out < 0) fail("opening the input or output file", -1, 0);
  for (long k = 0; k < TFAOT_STEPS; ++k) {
    if (!file_read(in, step_in, sizeof step_in)) fail("reading the inputs", k, 0);
    status = FN(_step)(ctx, step_in, step_out);
    if (status != 0) fail("step", k, status);
    if (!file_write(out, step_out, sizeof step_out)) fail("writing the outputs", k, 0);
  }
  file_close(in);
  file_close(out);
  FN(_deinit)(ctx);
  say("tfaot-runner: done\n");
  stop(0);
}

#ifdef TFAOT_BARE_METAL
/* ---- start-up for QEMU's MPS2/MPS3 boards: no C library start files ------ */
extern uint32_t __bss_start, __bss_end, __stack_top;
void reset_handler(void);

static void fault_handler(void) {
  say("tfaot-runner: the core took a fault\n");
  stop(3);
}

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))&__stack_top, reset_handler, fault_handler, fault_handler,
    fault_handler, fault_handler, fault_handler, 0, 0, 0, 0, fault_handler, fault_handler,
    0, fault_handler, fault_handler,
};

void reset_handler(void) {
#if defined(__ARM_FP)
  /* the FPU (CP10, CP11 full access) before any float instruction */
  *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
  for (uint32_t *p = &__bss_start; p < &__bss_end; ++p) *p = 0;
  main();
}
#endif
