// Runs one Vela-compiled NPU job through kiln's Ethos-U driver and writes the
// output back, for tests/fvp/test_npu_*.py. Everything comes through
// semihosting files in the platform's working directory (QEMU's cwd, or the
// FVP's cpu0.semihosting-cwd):
//   npu_job.bin      10 little-endian words: 'KNPU', payload bytes, weights bytes,
//                    scratch bytes, fast scratch bytes, input offset, input bytes,
//                    output offset, output bytes (offsets into the scratch, region 1),
//                    timeout in ms (0: the driver's default)
//   npu_cmd.bin      the COP1 payload (Vela's cmd_data)
//   npu_weights.bin  region 0 (Vela's weight_data)
//   npu_input.bin    the input tensor, copied into the scratch at its offset
// and it writes npu_output.bin (the output tensor). Exit status: 0 done; 10 a
// job file is missing or too large; 11 no NPU; 12 the driver refused the payload;
// 13 the run failed.
#include <cstdint>
#include <cstring>

#include "kiln/cpu.h"
#include "kiln/ethosu/driver.h"
#include "kiln/ethosu/registers.h"
#include "kiln/host_file.h"
#include "kiln/platform.h"
#include "kiln/runtime/error.h"
#include "kiln_board.h"

namespace {

constexpr int kExitJob = 10, kExitNoNpu = 11, kExitRefused = 12, kExitRunFailed = 13;
constexpr uint32_t kJobMagic = 0x55504E4B;  // "KNPU"
constexpr uint32_t kPayloadMax = 2u << 20, kWeightsMax = 32u << 20, kFastMax = 2u << 20;

// The payload and weights in DDR (the board's "model" memory), the scratch in SRAM
// (the "npu" memory). 32-byte aligned: whole D-cache lines.
alignas(32) KILN_PLACE_BSS(ddr) uint8_t g_payload[kPayloadMax];
alignas(32) KILN_PLACE_BSS(ddr) uint8_t g_weights[kWeightsMax];
alignas(32) KILN_PLACE_BSS(ddr) uint8_t g_fast[kFastMax];
alignas(32) KILN_PLACE_BSS(sram) uint8_t g_scratch[KILN_REGION_SRAM_SIZE];

struct Job {
  uint32_t magic, payload, weights, scratch, fast;
  uint32_t input_offset, input, output_offset, output, timeout_ms;
};

// Reads all of `name` into `buffer` (at most `capacity` bytes); false if it is missing or larger.
bool read_file(const char* name, void* buffer, uint32_t capacity, uint32_t expected) {
  kiln::HostFile file;
  if (!file.open(name, kiln::HostFile::Mode::kReadBinary)) {
    kiln::print("cannot open %s\n", name);
    return false;
  }
  const auto length = static_cast<uint32_t>(file.length());
  const bool ok = length == expected && length <= capacity && file.read(buffer, length);
  if (!ok) {
    kiln::print("%s: %u bytes, expected %u (room for %u)\n", name, unsigned(length), unsigned(expected),
                unsigned(capacity));
  }
  return ok;
}

bool write_file(const char* name, const void* data, uint32_t length) {
  kiln::HostFile file;
  return file.open(name, kiln::HostFile::Mode::kWriteBinary) && file.write(data, length);
}

// [offset, offset + size) inside [0, limit), without overflow.
bool inside(uint32_t offset, uint32_t size, uint32_t limit) { return size <= limit && offset <= limit - size; }

bool fits(const Job& job) {
  return job.scratch <= sizeof(g_scratch) && job.fast <= kFastMax && inside(job.input_offset, job.input, job.scratch) &&
         inside(job.output_offset, job.output, job.scratch);
}

bool load_job(Job& job) {
  if (!read_file("npu_job.bin", &job, sizeof(job), sizeof(job))) return false;
  if (job.magic != kJobMagic) {
    kiln::print("npu_job.bin: not a job (magic 0x%08x)\n", unsigned(job.magic));
    return false;
  }
  if (!fits(job)) {
    kiln::print("npu_job.bin: the scratch (%u bytes) or its tensors do not fit\n", unsigned(job.scratch));
    return false;
  }
  return read_file("npu_cmd.bin", g_payload, kPayloadMax, job.payload) &&
         read_file("npu_weights.bin", g_weights, kWeightsMax, job.weights) &&
         read_file("npu_input.bin", g_scratch + job.input_offset, job.input, job.input);
}

}  // namespace

int main() {
  Job job{};
  if (!load_job(job)) return kExitJob;

  auto npu = kiln::ethosu::Driver::create(KILN_NPU_BASE);
  if (!npu.ok()) {
    kiln::runtime::print_error(npu.error());
    return kExitNoNpu;
  }
  const kiln::ethosu::Driver& driver = npu.value();
  kiln::print("NPU: ID=0x%08x CONFIG=0x%08x (%u MACs/cycle, %u KiB SHRAM)\n", unsigned(driver.id()),
              unsigned(driver.config()), unsigned(driver.macs_per_cycle()), unsigned(driver.shram_kib()));

  auto stream = driver.check(g_payload, job.payload);
  if (!stream.ok()) {
    kiln::print("refused: ");
    kiln::runtime::print_error(stream.error());
    return kExitRefused;
  }
  const kiln::ethosu::Region regions[] = {{g_weights, job.weights}, {g_scratch, job.scratch}, {g_fast, job.fast}};
  // D-cache (kiln/cpu.h): what the CPU wrote is cleaned, the NPU's working memory
  // cleaned and invalidated whole, the output invalidated after the run.
  using kiln::cpu::Cache;
  kiln::cpu::maintain_dcache(Cache::kClean, g_payload, job.payload);
  kiln::cpu::maintain_dcache(Cache::kClean, g_weights, job.weights);
  kiln::cpu::maintain_dcache(Cache::kCleanInvalidate, g_scratch, job.scratch);
  kiln::cpu::maintain_dcache(Cache::kCleanInvalidate, g_fast, job.fast);
  kiln::ethosu::RunOptions options;
  if (job.timeout_ms != 0) options.timeout_ms = job.timeout_ms;
  auto cycles = driver.run(stream.value(), regions, job.fast ? 3 : 2, options);
  if (!cycles.ok()) {
    kiln::print("run failed: ");
    kiln::runtime::print_error(cycles.error());
    // The driver resets the NPU after a fault or timeout: STATUS reads stopped and clear.
    const uint32_t status = *reinterpret_cast<volatile uint32_t*>(KILN_NPU_BASE + kiln::ethosu::reg::kStatus);
    kiln::print("STATUS after the failure: 0x%08x\n", unsigned(status));
    return kExitRunFailed;
  }
  kiln::cpu::maintain_dcache(Cache::kInvalidate, g_scratch + job.output_offset, job.output);
  kiln::print("NPU cycles: %u\n", static_cast<unsigned>(cycles.value()));
  if (!write_file("npu_output.bin", g_scratch + job.output_offset, job.output)) return kExitJob;
  return 0;
}
