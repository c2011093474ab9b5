/* kiln's QEMU TCG plugin: counts the guest instructions executed, in all and inside
 * windows, for kiln's virtual platform (one vCPU).
 *
 *   -plugin insn_count.so,out=FILE[,start=ADDR,stop=ADDR...][,profile=on]
 *
 * Every instruction adds 1 to a counter inline, before it executes; QEMU emits an
 * instruction's instrumentation once per execution (an I/O instruction that QEMU
 * re-executes alone is re-translated without it), so the count is exact.
 * A window opens when the instruction at `start` executes and closes when one at a
 * `stop` address executes (up to 8 of them: e.g. the return sites of a call): it
 * holds `start` and everything after it, up to but not including the stop
 * instruction. A `start` inside an open window is ignored (recursion), as is a stop
 * outside one. With profile=on, every instruction executed inside a window is also
 * counted per address. ADDR: an instruction address (Thumb bit clear), in C's
 * notation (0x.. hex).
 *
 * At exit the plugin writes to FILE, one fact per line:
 *   kiln-insn-count 1        format version
 *   total N                  instructions executed in the whole run
 *   window N                 one line per closed window, in order
 *   open N                   a window still open at exit, if any
 *   pc 0xADDR N              profile only: executions at ADDR inside windows (an
 *                            address may appear more than once; add them up)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qemu_plugin_api.h"

KILN_QEMU_PLUGIN_EXPORT int qemu_plugin_version = KILN_QEMU_PLUGIN_API_VERSION;

enum { kMaxStops = 8 };

struct PcCount {
  uint64_t pc;
  uint64_t count;
  struct PcCount* next;
};

static const char* out_path;
static bool has_start, profile;
static uint64_t start_pc, stop_pcs[kMaxStops];
static int stop_count;
static uint64_t total;               /* the inline counter */
static bool open_window;
static uint64_t opened_at;           /* `total` when the window opened */
static uint64_t* windows;            /* closed windows' counts */
static size_t window_count, window_capacity;
static struct PcCount* pc_counts;    /* one record per translated instruction (profile) */

static void on_start(unsigned int vcpu, void* userdata) {
  (void)vcpu, (void)userdata;
  if (open_window) return;
  open_window = true;
  opened_at = total;
}

static void on_stop(unsigned int vcpu, void* userdata) {
  (void)vcpu, (void)userdata;
  if (!open_window) return;
  open_window = false;
  if (window_count == window_capacity) {
    size_t capacity = window_capacity ? 2 * window_capacity : 64;
    uint64_t* grown = realloc(windows, capacity * sizeof *grown);
    if (grown == NULL) {
      fprintf(stderr, "kiln insn_count: out of memory for windows\n");
      abort();
    }
    windows = grown, window_capacity = capacity;
  }
  windows[window_count++] = total - opened_at;
}

static void on_profiled(unsigned int vcpu, void* userdata) {
  (void)vcpu;
  if (open_window) ((struct PcCount*)userdata)->count++;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb* tb) {
  (void)id;
  for (size_t i = 0, n = qemu_plugin_tb_n_insns(tb); i < n; ++i) {
    struct qemu_plugin_insn* insn = qemu_plugin_tb_get_insn(tb, i);
    const uint64_t pc = qemu_plugin_insn_vaddr(insn);
    /* The same registration order for every instruction, so the window's two
     * snapshots of `total` see the same partial count of their own instruction. */
    qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &total, 1);
    if (has_start && pc == start_pc) {
      qemu_plugin_register_vcpu_insn_exec_cb(insn, on_start, QEMU_PLUGIN_CB_NO_REGS, NULL);
    }
    for (int s = 0; s < stop_count; ++s) {
      if (pc == stop_pcs[s]) qemu_plugin_register_vcpu_insn_exec_cb(insn, on_stop, QEMU_PLUGIN_CB_NO_REGS, NULL);
    }
    if (profile) {
      struct PcCount* record = calloc(1, sizeof *record);
      if (record == NULL) {
        fprintf(stderr, "kiln insn_count: out of memory for the profile\n");
        abort();
      }
      record->pc = pc, record->next = pc_counts, pc_counts = record;
      qemu_plugin_register_vcpu_insn_exec_cb(insn, on_profiled, QEMU_PLUGIN_CB_NO_REGS, record);
    }
  }
}

static void write_report(qemu_plugin_id_t id, void* userdata) {
  (void)id, (void)userdata;
  FILE* file = fopen(out_path, "w");
  if (file == NULL) {
    fprintf(stderr, "kiln insn_count: cannot write %s\n", out_path);
    return;
  }
  fprintf(file, "kiln-insn-count 1\ntotal %llu\n", (unsigned long long)total);
  for (size_t w = 0; w < window_count; ++w) fprintf(file, "window %llu\n", (unsigned long long)windows[w]);
  if (open_window) fprintf(file, "open %llu\n", (unsigned long long)(total - opened_at));
  for (const struct PcCount* r = pc_counts; r != NULL; r = r->next) {
    if (r->count) fprintf(file, "pc 0x%llx %llu\n", (unsigned long long)r->pc, (unsigned long long)r->count);
  }
  fclose(file);
}

/* An address argument: all of `text` must be a number. */
static bool parse_address(const char* text, uint64_t* value) {
  char* end;
  *value = strtoull(text, &end, 0);
  return *text != '\0' && *end == '\0';
}

KILN_QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t* info, int argc, char** argv) {
  (void)info;
  for (int i = 0; i < argc; ++i) {
    const char* arg = argv[i];
    bool ok = true;
    if (strncmp(arg, "out=", 4) == 0) {
      out_path = arg + 4;
    } else if (strncmp(arg, "start=", 6) == 0) {
      ok = !has_start && parse_address(arg + 6, &start_pc);
      has_start = true;
    } else if (strncmp(arg, "stop=", 5) == 0) {
      ok = stop_count < kMaxStops && parse_address(arg + 5, &stop_pcs[stop_count++]);
    } else if (strcmp(arg, "profile=on") == 0) {
      profile = true;
    } else {
      ok = false;
    }
    if (!ok) {
      fprintf(stderr,
              "kiln insn_count: bad argument '%s' (out=FILE, start=ADDR once, stop=ADDR up to %d times, "
              "profile=on)\n",
              arg, kMaxStops);
      return 1;
    }
  }
  if (out_path == NULL || *out_path == '\0' || has_start != (stop_count > 0)) {
    fprintf(stderr, "kiln insn_count: needs out=FILE, and start=ADDR with stop=ADDR or neither\n");
    return 1;
  }
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  qemu_plugin_register_atexit_cb(id, write_report, NULL);
  return 0;
}
