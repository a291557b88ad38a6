/* A QEMU TCG plugin (bench/bench_mcu.py builds it): counts the guest
 * instructions executed and estimates Cortex-M4 cycles from a cost per
 * instruction class (the table in bench_mcu.py's docstring, from the
 * Cortex-M4 Technical Reference Manual, zero wait states).
 *
 *   -plugin insn_count.so,marker=0xADDR[,profile=N]
 *
 * Every time the guest executes the marker function (an empty noinline
 * function the firmware calls between measured regions), the running
 * totals are recorded; at exit they are printed as "mark INSNS CYCLES"
 * lines. With profile=N, the translation blocks run between mark N and
 * mark N + 1 are printed as "tb ADDR EXECS INSNS CYCLES" (attributed to
 * functions by the bench, with nm).
 *
 * Costs are fixed per translation block when it is translated, except the
 * conditional branch that ends a block: taken (3 cycles) or not (1), which
 * the next block's address tells. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qemu_plugin_api.h"

PLUGIN_EXPORT int qemu_plugin_version = 1;

struct block {
  uint64_t vaddr, insns, cycles;
  uint64_t fall_through;  /* address after a final conditional branch, else 0 */
  uint64_t execs_in_window;
  struct block *next_block;  /* every block, for the profile */
};

static uint64_t marker, total_insns, total_cycles;
static uint64_t pending_fall_through;  /* the last block's, 0 if none */
static int profile, marks_seen;
static struct block *blocks;
static char *report;
static size_t report_len, report_cap;

static void append(const char *text) {
  size_t n = strlen(text);
  if (report_len + n + 1 > report_cap) {
    report_cap = (report_len + n + 1) * 2;
    report = realloc(report, report_cap);
  }
  memcpy(report + report_len, text, n + 1);
  report_len += n;
}

static int is_cond_suffix(const char *s) {
  static const char *conds[] = {"eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs",
                                "vc", "hi", "ls", "ge", "lt", "gt", "le"};
  for (size_t i = 0; i < sizeof conds / sizeof conds[0]; i++)
    if (strcmp(s, conds[i]) == 0) return 1;
  return 0;
}

/* Registers in a "{...}" list; an s-register range s16-s31 counts 16, a
 * d register 2 (as a VLDM's transfer count). */
static int list_words(const char *ops) {
  const char *p = strchr(ops, '{');
  int words = 0;
  if (!p) return 1;
  for (p++; *p && *p != '}'; p++) {
    if (!isalpha((unsigned char)*p)) continue;
    char kind = *p;
    int first = atoi(p + 1), last = first;
    while (*p && *p != ',' && *p != '}' && *p != '-') p++;
    if (*p == '-') {
      p++;
      last = atoi(p + 1);
      while (*p && *p != ',' && *p != '}') p++;
    }
    words += (last - first + 1) * (kind == 'd' ? 2 : 1);
    if (*p == '}') break;
  }
  return words ? words : 1;
}

static int starts(const char *m, const char *prefix) {
  return strncmp(m, prefix, strlen(prefix)) == 0;
}

/* Cycles of one instruction (mnemonic m without .w/.n or .f32 suffixes);
 * `after_memory`: the previous instruction was a load or store. */
static int cost(const char *m, const char *ops, int after_memory, int *is_memory) {
  *is_memory = 0;
  if (!strcmp(m, "ldrd") || !strcmp(m, "strd")) { *is_memory = 1; return 3; }
  if (starts(m, "vldm") || starts(m, "vstm") || !strcmp(m, "vpush") || !strcmp(m, "vpop"))
    return 1 + list_words(ops);
  if (starts(m, "ldm") || starts(m, "stm") || !strcmp(m, "push") || !strcmp(m, "pop"))
    return 1 + list_words(ops) + (strstr(ops, "pc") ? 3 : 0);
  if (starts(m, "ldr") || starts(m, "str") || !strcmp(m, "vldr") || !strcmp(m, "vstr")) {
    *is_memory = 1;
    return after_memory ? 1 : 2 + (strstr(ops, "pc,") == ops ? 3 : 0);
  }
  if (!strcmp(m, "mla") || !strcmp(m, "mls")) return 2;
  if (!strcmp(m, "sdiv") || !strcmp(m, "udiv")) return 7;
  if (!strcmp(m, "vmla") || !strcmp(m, "vmls") || !strcmp(m, "vnmla") || !strcmp(m, "vnmls") ||
      !strcmp(m, "vfma") || !strcmp(m, "vfms") || !strcmp(m, "vfnma") || !strcmp(m, "vfnms"))
    return 3;
  if (!strcmp(m, "vdiv") || !strcmp(m, "vsqrt")) return 14;
  if (!strcmp(m, "vmov") && ops[0] == 'r' && strchr(ops, ',') && strchr(ops, ',')[2] == 'r')
    return 2;  /* two core registers <-> a d register or two s registers */
  if (!strcmp(m, "tbb") || !strcmp(m, "tbh")) return 4;
  if (!strcmp(m, "b") || !strcmp(m, "bl") || !strcmp(m, "bx") || !strcmp(m, "blx")) return 3;
  if ((!strcmp(m, "mov") || !strcmp(m, "add")) && starts(ops, "pc,")) return 3;
  return 1;
}

/* A conditional branch (b<cond>, cbz, cbnz): its cost depends on the path. */
static int is_conditional_branch(const char *m) {
  return !strcmp(m, "cbz") || !strcmp(m, "cbnz") || (m[0] == 'b' && is_cond_suffix(m + 1));
}

/* Splits "ldr.w r0, [r1]" into the mnemonic "ldr" and its operands. */
static const char *mnemonic(const char *text, char *m, size_t size) {
  size_t i = 0;
  while (*text == ' ') text++;
  while (text[i] && text[i] != ' ' && i + 1 < size) {
    m[i] = (char)tolower((unsigned char)text[i]);
    i++;
  }
  m[i] = 0;
  char *dot = strchr(m, '.');
  if (dot) *dot = 0;  /* .w, .n, .f32, .s32 ... */
  const char *ops = text + i;
  while (*ops == ' ') ops++;
  return ops;
}

static void on_exec(unsigned int vcpu, void *data) {
  struct block *b = data;
  (void)vcpu;
  if (pending_fall_through) total_cycles += b->vaddr == pending_fall_through ? 1 : 3;
  pending_fall_through = b->fall_through;
  if (marker && b->vaddr == marker) {
    char line[64];
    snprintf(line, sizeof line, "mark %llu %llu\n", (unsigned long long)total_insns,
             (unsigned long long)total_cycles);
    append(line);
    marks_seen++;
  }
  if (profile && marks_seen == profile) b->execs_in_window++;
  total_insns += b->insns;
  total_cycles += b->cycles;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
  struct block *b = calloc(1, sizeof *b);
  size_t n = qemu_plugin_tb_n_insns(tb);
  int after_memory = 0;
  (void)id;
  b->vaddr = qemu_plugin_tb_vaddr(tb);
  b->insns = n;
  for (size_t i = 0; i < n; i++) {
    struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
    char *text = qemu_plugin_insn_disas(insn), m[32];
    const char *ops = mnemonic(text ? text : "", m, sizeof m);
    if (i + 1 == n && is_conditional_branch(m)) {
      /* costed when the next block shows whether it was taken */
      b->fall_through = qemu_plugin_insn_vaddr(insn) + qemu_plugin_insn_size(insn);
    } else {
      int memory;
      b->cycles += (uint64_t)cost(m, ops, after_memory, &memory);
      after_memory = memory;
    }
    free(text);
  }
  b->next_block = blocks;
  blocks = b;
  qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, QEMU_PLUGIN_CB_NO_REGS, b);
}

static void at_exit(qemu_plugin_id_t id, void *data) {
  (void)id;
  (void)data;
  if (profile) {
    for (struct block *b = blocks; b; b = b->next_block) {
      if (!b->execs_in_window) continue;
      char line[128];
      snprintf(line, sizeof line, "tb %llx %llu %llu %llu\n", (unsigned long long)b->vaddr,
               (unsigned long long)b->execs_in_window, (unsigned long long)b->insns,
               (unsigned long long)b->cycles);
      append(line);
    }
  }
  char line[96];
  snprintf(line, sizeof line, "total %llu %llu\n", (unsigned long long)total_insns,
           (unsigned long long)total_cycles);
  append(line);
  qemu_plugin_outs(report);
}

PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                      char **argv) {
  (void)info;
  for (int i = 0; i < argc; i++) {
    if (starts(argv[i], "marker=")) marker = strtoull(argv[i] + 7, NULL, 0) & ~1ull;
    else if (starts(argv[i], "profile=")) profile = atoi(argv[i] + 8);
  }
  report = calloc(1, 1);
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  qemu_plugin_register_atexit_cb(id, at_exit, NULL);
  return 0;
}
