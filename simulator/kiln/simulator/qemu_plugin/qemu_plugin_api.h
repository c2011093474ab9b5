/* kiln's declarations of the part of QEMU's TCG plugin API (version 1, as QEMU 7.2
 * exports it) that insn_count.c uses. Debian ships no plugin header; the names,
 * signatures and enum values below are QEMU's, the functions live in the QEMU binary
 * that loads the plugin. */
#ifndef KILN_QEMU_PLUGIN_API_H
#define KILN_QEMU_PLUGIN_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KILN_QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))
#define KILN_QEMU_PLUGIN_API_VERSION 1

typedef uint64_t qemu_plugin_id_t;

/* Guest information passed to qemu_plugin_install; only read during that call. */
typedef struct qemu_info_t {
  const char* target_name;
  struct {
    int min;
    int cur;
  } version;
  bool system_emulation;
  union {
    struct {
      int smp_vcpus;
      int max_vcpus;
    } system;
  };
} qemu_info_t;

struct qemu_plugin_tb;   /* a translation block, valid during the translation callback */
struct qemu_plugin_insn; /* one instruction of it, valid during the same callback */

enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS = 0, QEMU_PLUGIN_CB_R_REGS = 1, QEMU_PLUGIN_CB_RW_REGS = 2 };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 = 0 };

typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void* userdata);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void* userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb* tb);

/* The plugin's exports: the API version it was written for, and its entry point
 * (returns 0 when installed). */
extern KILN_QEMU_PLUGIN_EXPORT int qemu_plugin_version;
KILN_QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t* info, int argc, char** argv);

/* QEMU's side. */
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void* userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb* tb);
struct qemu_plugin_insn* qemu_plugin_tb_get_insn(const struct qemu_plugin_tb* tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn* insn);
/* Runs before the instruction each time it executes: adds imm to *ptr (not atomic). */
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn* insn, enum qemu_plugin_op op, void* ptr,
                                                uint64_t imm);
/* Calls cb(vcpu, userdata) before the instruction each time it executes. */
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn* insn, qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void* userdata);

#endif
