// The host stand-in for driver.cpp (see host_npu.h): the Driver's hardware part. No
// interrupt, no SysTick: run() finishes at once.
#include "host_npu.h"

#include <cstdint>
#include <cstdlib>

#include "kiln/ethosu/registers.h"

namespace kiln::ethosu {
namespace {

// The register file: ID and CONFIG as the build says; every other register reads 0.
uint32_t g_registers[0x400 / 4];

}  // namespace

uint32_t Driver::read(uint32_t offset) const { return reinterpret_cast<const uint32_t*>(base_)[offset / 4]; }
void Driver::write(uint32_t offset, uint32_t value) const { reinterpret_cast<uint32_t*>(base_)[offset / 4] = value; }

Result<Driver> Driver::create(uintptr_t base) {
  Driver driver(base);
  driver.id_ = driver.read(reg::kId);
  driver.config_ = driver.read(reg::kConfig);
  return driver;
}

// The stand-in NPU's job: the argument checks of the real run(), then, for every region,
// a read of its first and last byte (AddressSanitizer thus sees a region that is not
// memory the caller owns); cycles = the stream's bytes.
Result<uint64_t> Driver::run(const CommandStream& stream, const Region* regions, int count, const RunOptions&) const {
  if (count < 0 || count > reg::kRegions) {
    return Error{ErrorCode::kInvalidArgument, 2, static_cast<uint32_t>(count)};
  }
  if (stream.words == nullptr) return Error{ErrorCode::kInvalidArgument, 0, 0};
  for (int n = 0; n < count; ++n) {
    if (regions[n].size == 0) continue;
    const volatile uint8_t* bytes = static_cast<const volatile uint8_t*>(regions[n].base);
    (void)bytes[0];
    (void)bytes[regions[n].size - 1];
  }
  write(reg::kStatus, reg::kStatusCmdEndReached);
  return uint64_t{stream.size_bytes};
}

// The stand-in NPU has no PMU: every count is 0 and none was counted.
PmuCounts Driver::pmu_counts(uint64_t) const { return PmuCounts(); }

}  // namespace kiln::ethosu

namespace kiln::fuzz {

const ethosu::Driver& npu() {
  static const ethosu::Driver driver = [] {
    ethosu::g_registers[ethosu::reg::kId / 4] = KILN_FUZZ_NPU_ID;
    ethosu::g_registers[ethosu::reg::kConfig / 4] = KILN_FUZZ_NPU_CONFIG;
    auto made = ethosu::Driver::create(reinterpret_cast<uintptr_t>(ethosu::g_registers));
    if (!made.ok()) std::abort();
    return made.value();
  }();
  return driver;
}

}  // namespace kiln::fuzz
