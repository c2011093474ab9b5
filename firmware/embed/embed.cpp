// kiln's public API for an application's firmware (kiln/kiln.h): a method's needs, its memory
// carved from the caller's arenas, the Ethos-U over it.
#include <cstring>
#include <new>

#include "kiln/cpu.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

static_assert(kBufferAlignment % cpu::kDcacheLine == 0, "the scratch must start on a D-cache line");

constexpr uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// The pieces carve cuts from its arena, in order, and their sizes in bytes (each rounded up to
// kBufferAlignment, so every piece that follows stays aligned).
struct Layout {
  uint64_t planned[kMaxPlannedBuffers] = {};
  uint64_t scratch = 0, values = 0, kernels = 0, slots = 0, pool = 0;
  uint64_t total = 0;
};

Layout layout(const MethodNeeds& needs) {
  Layout l;
  for (size_t k = 0; k < needs.planned_count; ++k) l.planned[k] = round_up(needs.planned[k], kBufferAlignment);
  l.scratch = needs.npu_scratch;  // whole D-cache lines already
  l.values = round_up(needs.values * sizeof(runtime::Value), kBufferAlignment);
  l.kernels = round_up(needs.kernels * sizeof(runtime::KernelFn), kBufferAlignment);
  l.slots = round_up(needs.delegates * sizeof(runtime::DelegateSlot), kBufferAlignment);
  l.pool = round_up(needs.delegates * sizeof(delegates::ethosu::DelegateState), kBufferAlignment);
  for (uint64_t p : l.planned) l.total += p;
  l.total += l.scratch + l.values + l.kernels + l.slots + l.pool;
  return l;
}

// Cuts `bytes` off the front of `rest`.
uint8_t* take(Span<uint8_t>& rest, uint64_t bytes) {
  uint8_t* start = rest.data;
  rest = Span<uint8_t>(rest.data + bytes, rest.size - static_cast<size_t>(bytes));
  return start;
}

// `count` value-initialised T at `at` (suitably aligned, enough bytes).
template <typename T>
T* construct(uint8_t* at, size_t count) {
  T* first = reinterpret_cast<T*>(at);
  for (size_t i = 0; i < count; ++i) ::new (static_cast<void*>(first + i)) T();
  return first;
}

Error too_large(uint64_t needed, size_t limit) {
  const uint64_t clamped = needed > UINT32_MAX ? UINT32_MAX : needed;
  return Error{ErrorCode::kTooLarge, static_cast<uint32_t>(clamped), static_cast<uint32_t>(limit)};
}

}  // namespace

size_t MethodNeeds::arena_bytes() const {
  if (planned_count > kMaxPlannedBuffers) return SIZE_MAX;
  const uint64_t total = layout(*this).total;
  return total > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(total);
}

Result<MethodNeeds> method_needs(const Program& program, size_t index) {
  auto plan = program.method(index);
  if (!plan.ok()) return plan.error();
  const Program& p = plan.value();
  MethodNeeds needs;
  needs.planned_count = p.planned_buffer_count();
  if (needs.planned_count > kMaxPlannedBuffers) return too_large(needs.planned_count, kMaxPlannedBuffers);
  for (size_t k = 0; k < needs.planned_count; ++k) {
    needs.planned[k] = p.planned_buffer_size(static_cast<uint32_t>(k + 1));
  }
  needs.values = p.value_count();
  needs.kernels = p.operator_count();
  needs.delegates = p.delegate_count();
  for (size_t d = 0; d < needs.delegates; ++d) {
    const runtime::DelegateInfo info = p.delegate(d);
    if (info.id != StringView(delegates::ethosu::kBackendId)) continue;  // another backend's
    auto payload = delegates::ethosu::parse_payload(info.payload.data, info.payload.size);
    if (!payload.ok()) return payload.error();
    const uint64_t scratch = round_up(payload.value().scratch_size, cpu::kDcacheLine);
    const uint64_t fast = round_up(delegates::ethosu::fast_scratch_needed(info.compile_specs), cpu::kDcacheLine);
    if (scratch > UINT32_MAX || fast > UINT32_MAX) return too_large(scratch > fast ? scratch : fast, UINT32_MAX);
    if (scratch > needs.npu_scratch) needs.npu_scratch = static_cast<uint32_t>(scratch);
    if (fast > needs.npu_fast_scratch) needs.npu_fast_scratch = static_cast<uint32_t>(fast);
  }
  return needs;
}

Status carve(const MethodNeeds& needs, Span<uint8_t> arena, Span<uint8_t> fast_arena, MethodBuffers& out) {
  if (needs.planned_count > kMaxPlannedBuffers) return too_large(needs.planned_count, kMaxPlannedBuffers);
  const Layout l = layout(needs);
  const uintptr_t address = reinterpret_cast<uintptr_t>(arena.data);
  const uint64_t padding = round_up(address, kBufferAlignment) - address;
  if (padding + l.total > arena.size) return too_large(padding + l.total, arena.size);
  const uintptr_t fast_address = reinterpret_cast<uintptr_t>(fast_arena.data);
  const uint64_t fast_padding =
      needs.npu_fast_scratch == 0 ? 0 : round_up(fast_address, kBufferAlignment) - fast_address;
  if (fast_padding + needs.npu_fast_scratch > fast_arena.size) {
    return too_large(fast_padding + needs.npu_fast_scratch, fast_arena.size);
  }

  Span<uint8_t> rest = arena;
  take(rest, padding);
  out = MethodBuffers{};
  for (size_t k = 0; k < needs.planned_count; ++k) {
    out.planned[k] = Span<uint8_t>(take(rest, l.planned[k]), static_cast<size_t>(needs.planned[k]));
    std::memset(out.planned[k].data, 0, out.planned[k].size);
  }
  out.npu_scratch = Span<uint8_t>(take(rest, l.scratch), needs.npu_scratch);
  out.memory.planned = Span<Span<uint8_t>>(out.planned, needs.planned_count);
  out.memory.values = Span<runtime::Value>(construct<runtime::Value>(take(rest, l.values), needs.values), needs.values);
  out.memory.kernels =
      Span<runtime::KernelFn>(construct<runtime::KernelFn>(take(rest, l.kernels), needs.kernels), needs.kernels);
  out.memory.delegates = Span<runtime::DelegateSlot>(
      construct<runtime::DelegateSlot>(take(rest, l.slots), needs.delegates), needs.delegates);
  out.npu_pool = Span<delegates::ethosu::DelegateState>(
      construct<delegates::ethosu::DelegateState>(take(rest, l.pool), needs.delegates), needs.delegates);
  if (needs.npu_fast_scratch != 0) {
    out.npu_fast_scratch = Span<uint8_t>(fast_arena.data + fast_padding, needs.npu_fast_scratch);
  }
  return Status();
}

Status Npu::start(uintptr_t base, const MethodBuffers& buffers, ethosu::RunOptions options) {
  auto found = ethosu::Driver::create(base);
  if (!found.ok()) return found.error();
  driver = found.value();
  context = delegates::ethosu::Context{};
  context.driver = &driver;
  context.scratch = buffers.npu_scratch;
  context.fast_scratch = buffers.npu_fast_scratch;
  context.pool = buffers.npu_pool;
  context.options = options;
  backend = delegates::ethosu::backend(context);
  list[0] = &backend;
  return Status();
}

}  // namespace kiln
