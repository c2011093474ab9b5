// The ETDump writer (firmware/apps/executor_runner/etdump_writer.cpp) on the host, for
// test_etdump_writer.py: writes the fixed runs below into a buffer of the capacity given and the
// buffer to FILE.
//   etdump_host FILE CAPACITY   prints "wrote N" (N bytes), or "error CODE A B" and exits 1 when
//                               the runs do not fit; either way checks that not one byte of the
//                               16 guard bytes after the capacity changed ("guard broken", exit 2)
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "etdump_writer.h"

using kiln::etdump::ProfileEvent;
using kiln::etdump::Run;

int main(int argc, char** argv) {
  if (argc != 3) return 3;
  const size_t capacity = std::strtoul(argv[2], nullptr, 10);
  static uint8_t buffer[1 << 16] __attribute__((aligned(8)));
  constexpr size_t kGuard = 16;
  if (capacity + kGuard > sizeof(buffer)) return 3;
  std::memset(buffer, 0xA5, sizeof(buffer));

  ProfileEvent first[3];
  first[0].delegate_debug_id_str = "features.0 aten.conv2d.default";
  first[0].instruction_id = 1;
  first[0].start_time = 0;
  first[0].end_time = 1234;
  first[1].name = "DELEGATE_CALL";
  first[1].instruction_id = 1;
  first[1].start_time = 0;
  first[1].end_time = 5000;
  first[2].delegate_debug_id_int = 7;
  first[2].chain_index = 2;
  first[2].start_time = (uint64_t{1} << 40) + 3;
  first[2].end_time = (uint64_t{1} << 41) + 5;
  const Run runs[] = {{"Execute", first, 3}, {"Execute", nullptr, 0}, {"second block", first + 1, 1}};

  auto written = kiln::etdump::write(runs, 3, buffer, capacity);
  for (size_t i = 0; i < kGuard; ++i) {
    if (buffer[capacity + i] != 0xA5) {
      std::printf("guard broken\n");
      return 2;
    }
  }
  if (!written.ok()) {
    std::printf("error %u %u %u\n", unsigned(written.error().code), unsigned(written.error().a),
                unsigned(written.error().b));
    return 1;
  }
  FILE* f = std::fopen(argv[1], "wb");
  if (f == nullptr || std::fwrite(buffer, 1, written.value(), f) != written.value()) return 3;
  std::fclose(f);
  std::printf("wrote %u\n", unsigned(written.value()));
  return 0;
}
