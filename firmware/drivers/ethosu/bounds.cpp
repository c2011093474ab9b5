// check_stream_bounds: proves, before a command stream ever runs, that every memory access
// of its operations stays inside the buffer of the region it names (see driver.h).
//
// What each operation accesses (the Ethos-U55/U65 command semantics, as kiln's NPU model
// simulator/kiln/simulator/npu/{blockops,featuremap}.py and npu/u55/{blockops,elementwise,dma}.py execute them):
//   CONV, DEPTHWISE, POOL: the IFM box of rows x cols x channels the kernel covers, minus
//     padding: rows = (OFM_H - 1) * stride_y + KERNEL_HEIGHT_M1 + 1 - pad_top - pad_bottom
//     (halved, rounded up, with IFM upscaling), cols likewise; channels = IFM depth (CONV,
//     POOL REDUCE_SUM) or OFM depth (DEPTHWISE, POOL); the OFM box OFM_H x OFM_W x OFM_D;
//     CONV and DEPTHWISE also read WEIGHT_LENGTH bytes at WEIGHT_BASE and the scale records
//     at SCALE_BASE (at least 10 bytes per OFM channel the core computes), per core.
//   ELEMENTWISE: IFM and OFM boxes of the OFM's shape; a tensor IFM2 (not a scalar) of the
//     OFM's shape with broadcast axes of size 1 (binary modes only).
//   DMA_START: LEN bytes per row; a 1-D side is contiguous, a 2-D side SIZE0 rows of LEN
//     bytes (LEN + SKIP0 apart), a 3-D side SIZE1 planes of those (SIZE0 * LEN + SKIP1
//     apart); rows = 1 (1-D), SIZE0 (2-D) or SIZE0 * SIZE1 (3-D) of the wider side. An
//     internal destination is a SHRAM offset (the LUT), checked against the SHRAM.
// The Ethos-U85 (StreamBounds::u85; its opcodes and fields, ethos_u85_interface.hpp) adds:
//   RESIZE: the IFM box KERNEL_HEIGHT x KERNEL_WIDTH x OFM depth (Vela programs the kernel
//     as the IFM's size for a resize); POOL's modes SUM, MIN, ARGMAX_X/Y (ARGMAX: the larger
//     of the IFM and OFM depths); an IFM broadcast like IFM2's (H, W, C axes of size 1, or
//     a scalar: no read); 64-bit elements; operands in the chain buffer or with storage
//     NONE (no memory access); the OFM box transposed (OFM_PRECISION's transpose names its
//     memory axes; reverse writes the same bytes); one weight stream per core (WEIGHT,
//     WEIGHT1..3, zero length: none), one scale stream for all cores; DMA with strides
//     (rows STRIDE0 apart, planes STRIDE1 apart, the source's stride mode for both sides)
//     and the 2 KiB LUT as its internal destination; accumulators that start from IFM2
//     (ACC_FORMAT's acc_input) read an IFM2 box of the OFM's shape; CONV with its weights in
//     IFM2 (weights_ifm2, Vela's MATMUL: a 1x1 kernel whose weight [o, i] is IFM2's element
//     at row 0, column o, channel i) reads the IFM box as any CONV, the IFM2 box 1 x OFM depth
//     x IFM depth (IFM_DEPTH_M1 is both inputs') at IFM2's element size whatever
//     IFM2_BROADCAST holds, no weight stream, and scale records only with per-channel scaling
//     (OFM_PRECISION's scale_mode); indexed DMA (gather, scatter: see dma_u85). Refused as
//     unprovable: BRANCH, DMA indexed on both sides, weights from
//     IFM2 with a kernel other than 1x1 (what it reads is not modelled), 3x1 tiles, reserved
//     modes and transposes.
// A feature map's element (y, x, c) of tile t is at tile base + y * STRIDE_Y + x * sx +
// (c / 16) * sc + (c % 16) * element size, with sx = STRIDE_X, sc = 16 * element size for
// NHWC and sx = 16 * element size, sc = STRIDE_C for NHCWB16 (whose channels are counted in
// whole bricks of 16). Every term is unsigned, so the box spans [min tile base, max over the
// used tiles of the last element's end): tiles split the box at WIDTH0 columns, HEIGHT0
// rows (left) and HEIGHT1 rows (right).
//
// Arithmetic: every address, length and stride register is 48 bits; one whose bits 47..32
// are not zero lies past any region (regions are below 4 GiB) and is refused before use.
// Sizes are below 2^16 per axis, so each product below is under 2^48 and each sum of a few
// under 2^51: uint64_t never wraps.
//
// Cost: one pass over the stream, no memory beyond the stack frame (the registers: Regs,
// 1.5 KiB). Counted on the virtual platform (Cortex-M55, the runner's build; kiln run
// --count-instructions=kiln::ethosu::check_stream_bounds, tests/fvp/test_npu_bounds_on_device.py):
// ds_cnn's stream of 324 commands (452 words, 24 operations) takes 22,948 instructions, 71 per
// command on average, once per delegate at init; a register command costs a decode and a
// store, an operation a few hundred instructions for its boxes, weights and scales.
#include <cstddef>
#include <cstdint>

#include "kiln/ethosu/driver.h"
#include "kiln/ethosu/registers.h"

namespace kiln::ethosu {
namespace {

using runtime::NpuAccess;
namespace c = reg::cmd;

constexpr uint64_t kLow32 = 0xFFFF'FFFFu;

// The registers the accesses depend on, as the NPU holds them, each at its opcode: the
// one-word commands' 16-bit parameters (opcodes 0x100..0x18F) and the payload commands'
// 48-bit values (payload | parameter << 32; opcodes 0x000..0x097). A number means what its
// family's map says (the U85 reuses some: DMA0_SKIP0 is its DMA0_SRC_STRIDE0), and the
// checks below read each by its family's name. Unset registers read as zero, as after
// reset. 1.5 KiB, on the stack of check_stream_bounds.
struct Regs {
  static constexpr uint32_t kCmd0First = 0x100, kCmd0End = 0x190, kCmd1End = 0x098;
  uint16_t cmd0[kCmd0End - kCmd0First] = {};
  uint64_t cmd1[kCmd1End] = {};

  uint32_t param(uint32_t op) const { return cmd0[op - kCmd0First]; }
  uint64_t value(uint32_t op) const { return cmd1[op]; }
  uint32_t region(uint32_t op) const { return param(op) & 7; }  // a *_REGION register's region
};

// A feature map's registers: BASE0..3 then STRIDE_X, _Y, _C from its *_BASE0 (payload
// commands); WIDTH0_M1, HEIGHT0_M1, HEIGHT1_M1 from its *_WIDTH0_M1, and its REGION 5 after.
struct FeatureMap {
  uint16_t base0, width0_m1, precision;
  uint64_t base(const Regs& r, int tile) const { return r.value(base0 + tile); }
  uint64_t stride(const Regs& r, int axis) const { return r.value(base0 + c::kTiles + axis); }  // X, Y, C
  uint32_t extent(const Regs& r, int n) const { return r.param(width0_m1 + n) + 1; }  // WIDTH0, HEIGHT0, HEIGHT1
  uint32_t region(const Regs& r) const { return r.region(width0_m1 + 5); }
};
constexpr FeatureMap kIfm{c::kIfmBase0, c::kIfmWidth0M1, c::kIfmPrecision};
constexpr FeatureMap kIfm2{c::kIfm2Base0, c::kIfm2Width0M1, c::kIfm2Precision};
constexpr FeatureMap kOfm{c::kOfmBase0, c::kOfmWidth0M1, c::kOfmPrecision};
static_assert(c::kIfmStrideC == c::kIfmBase0 + 6 && c::kIfm2StrideC == c::kIfm2Base0 + 6 &&
                  c::kOfmStrideC == c::kOfmBase0 + 6 && c::kIfmHeight1M1 == c::kIfmWidth0M1 + 2 &&
                  c::kIfmRegion == c::kIfmWidth0M1 + 5 && c::kIfm2Region == c::kIfm2Width0M1 + 5 &&
                  c::kOfmRegion == c::kOfmWidth0M1 + 5 && c::kOfmHeight1M1 == c::kOfmWidth0M1 + 2 &&
                  c::kIfm2Height1M1 == c::kIfm2Width0M1 + 2,
              "each feature map's registers lie at these distances");

// Each core's weight stream (*_BASE; its *_LENGTH is the next opcode): cores 0..1 on an
// Ethos-U65-512, 0..3 on an Ethos-U85; the U55/U65's scale stream per core (the U85 has one).
constexpr uint16_t kWeightBases[] = {c::kWeightBase, c::kWeight1Base, c::kWeight2Base, c::kWeight3Base};
constexpr uint16_t kScaleBases[] = {c::kScaleBase, c::kScale1Base};
static_assert(c::kWeightLength == c::kWeightBase + 1 && c::kWeight1Length == c::kWeight1Base + 1 &&
                  c::kWeight2Length == c::kWeight2Base + 1 && c::kWeight3Length == c::kWeight3Base + 1 &&
                  c::kScaleLength == c::kScaleBase + 1 && c::kScale1Length == c::kScale1Base + 1,
              "a stream's length follows its base");

// Known opcodes, as bitmaps (bit n: opcode n is a command of the stream format).
struct OpcodeSet {
  uint32_t bits[(Regs::kCmd0End + 31) / 32] = {};
  constexpr void add(uint16_t op) { bits[op / 32] |= 1u << (op % 32); }
  constexpr bool has(uint32_t op) const { return op < Regs::kCmd0End && (bits[op / 32] >> (op % 32)) & 1; }
};

// Every one-word opcode of the map (Vela's cmd0).
constexpr uint16_t kCmd0List[] = {
    c::kOpStop,         c::kOpIrq,        c::kOpConv,        c::kOpDepthwise,   c::kOpPool,         c::kOpElementwise,
    c::kOpDmaStart,     c::kOpDmaWait,    c::kOpKernelWait,  c::kOpPmuMask,     c::kIfmPadTop,      c::kIfmPadLeft,
    c::kIfmPadRight,    c::kIfmPadBottom, c::kIfmDepthM1,    c::kIfmPrecision,  c::kIfmUpscale,     c::kIfmZeroPoint,
    c::kIfmWidth0M1,    c::kIfmHeight0M1, c::kIfmHeight1M1,  c::kIfmIbEnd,      c::kIfmRegion,      c::kOfmWidthM1,
    c::kOfmHeightM1,    c::kOfmDepthM1,   c::kOfmPrecision,  c::kOfmBlkWidthM1, c::kOfmBlkHeightM1, c::kOfmBlkDepthM1,
    c::kOfmZeroPoint,   c::kOfmWidth0M1,  c::kOfmHeight0M1,  c::kOfmHeight1M1,  c::kOfmRegion,      c::kKernelWidthM1,
    c::kKernelHeightM1, c::kKernelStride, c::kParallelMode,  c::kAccFormat,     c::kActivation,     c::kActivationMin,
    c::kActivationMax,  c::kWeightRegion, c::kScaleRegion,   c::kAbStart,       c::kBlockdep,       c::kDma0SrcRegion,
    c::kDma0DstRegion,  c::kDma0Size0,    c::kDma0Size1,     c::kIfm2Broadcast, c::kIfm2Scalar,     c::kIfm2Precision,
    c::kIfm2ZeroPoint,  c::kIfm2Width0M1, c::kIfm2Height0M1, c::kIfm2Height1M1, c::kIfm2IbStart,    c::kIfm2Region,
};

// The Ethos-U85's one-word opcodes (ethos_u85_interface.hpp's cmd0_opcode).
constexpr uint16_t kCmd0ListU85[] = {
    c::kOpStop,          c::kOpIrq,           c::kOpConv,         c::kOpDepthwise,   c::kOpPool,
    c::kOpElementwise,   c::kOpResize,        c::kOpDmaStart,     c::kOpDmaWait,     c::kOpKernelWait,
    c::kOpPmuMask,       c::kIfmPadTop,       c::kIfmPadLeft,     c::kIfmPadRight,   c::kIfmPadBottom,
    c::kIfmDepthM1,      c::kIfmPrecision,    c::kIfmUpscale,     c::kIfmBroadcast,  c::kIfmZeroPoint,
    c::kIfmWidth0M1,     c::kIfmHeight0M1,    c::kIfmHeight1M1,   c::kIfmRegion,     c::kOfmWidthM1,
    c::kOfmHeightM1,     c::kOfmDepthM1,      c::kOfmPrecision,   c::kOfmBlkWidthM1, c::kOfmBlkHeightM1,
    c::kOfmBlkDepthM1,   c::kOfmZeroPoint,    c::kOfmWidth0M1,    c::kOfmHeight0M1,  c::kOfmHeight1M1,
    c::kOfmRegion,       c::kKernelWidthM1,   c::kKernelHeightM1, c::kKernelStride,  c::kAccFormat,
    c::kActivation,      c::kActivationMin,   c::kActivationMax,  c::kWeightRegion,  c::kScaleRegion,
    c::kResizeXScaleNM1, c::kResizeYScaleNM1, c::kResizeXOffset,  c::kResizeYOffset, c::kWeightFormat,
    c::kBlockdep,        c::kDma0SrcRegion,   c::kDma0DstRegion,  c::kDma0Size0,     c::kDma0Size1,
    c::kDma0IdxRegion,   c::kIfm2Broadcast,   c::kIfm2Precision,  c::kIfm2ZeroPoint, c::kIfm2Width0M1,
    c::kIfm2Height0M1,   c::kIfm2Height1M1,   c::kIfm2Region,
};

// The payload-word opcodes: runs of consecutive numbers, each a group's first opcode and
// its last index (cmd1_opcode of ethos_u65_interface.hpp and ethos_u85_interface.hpp).
struct Run {
  uint16_t first, last_index;
};
constexpr Run kCmd1Runs[] = {{0x000, 6}, {0x010, 6}, {0x020, 6}, {0x030, 4}, {0x080, 6}, {0x090, 3}};
constexpr Run kCmd1RunsU85[] = {{0x000, 6}, {0x010, 6}, {0x020, 7},       {0x030, 9},
                                {0x080, 6}, {0x090, 7}, {c::kOpBranch, 0}};

template <size_t N>
constexpr OpcodeSet opcodes(const uint16_t (&list)[N]) {
  OpcodeSet set;
  for (uint16_t op : list) set.add(op);
  return set;
}

template <size_t N>
constexpr OpcodeSet opcodes(const Run (&runs)[N]) {
  OpcodeSet set;
  for (const Run& run : runs) {
    for (uint16_t i = 0; i <= run.last_index; ++i) set.add(run.first + i);
  }
  return set;
}

// Every payload-word register has its place in Regs::cmd1 (BRANCH is refused, never stored).
template <size_t N>
constexpr bool stored(const Run (&runs)[N]) {
  for (const Run& run : runs) {
    if (run.first != c::kOpBranch && run.first + run.last_index >= Regs::kCmd1End) return false;
  }
  return true;
}
static_assert(stored(kCmd1Runs) && stored(kCmd1RunsU85), "Regs::cmd1 holds every payload-word register");

constexpr OpcodeSet kCmd0 = opcodes(kCmd0List);
constexpr OpcodeSet kCmd1 = opcodes(kCmd1Runs);
constexpr OpcodeSet kCmd0U85 = opcodes(kCmd0ListU85);
constexpr OpcodeSet kCmd1U85 = opcodes(kCmd1RunsU85);

// A 48-bit register value: payload | parameter << 32.
uint64_t wide(uint32_t header, uint32_t payload) { return (uint64_t{header >> 16} << 32) | payload; }

// One operation's checks, on the registers as its command finds them. Each check records
// a failure and returns; the first failure is kept (error()) and every check after it does
// nothing, so an operation's checks run straight on and the stream's walk stops after it.
// `at` is the word index of the operation's command, `word` the command.
class Checker {
 public:
  Checker(const StreamBounds& bounds, const Regs& regs, uint32_t at, uint32_t word)
      : bounds_(bounds), regs_(regs), at_(at), word_(word) {}

  bool ok() const { return error_.code == runtime::ErrorCode::kOk; }
  const runtime::Error& error() const { return error_; }

  // [offset, offset + length) of `region` for access `what`; `write`: the NPU writes it.
  void span(NpuAccess what, uint32_t region, uint64_t offset, uint64_t length, bool write) {
    if (region >= static_cast<uint32_t>(bounds_.count)) return fault(runtime::ErrorCode::kNpuAccessNoRegion, what);
    const RegionLimit& limit = bounds_.regions[region];
    if (write && !limit.writable) return fault(runtime::ErrorCode::kNpuAccessReadOnly, what);
    if (offset > kLow32 || length > kLow32 || offset + length > limit.size) outside(what);
  }

  // The box rows x cols x channels of feature map `fm` (elements of `elem` bytes).
  void box(NpuAccess what, const FeatureMap& fm, uint32_t elem, uint32_t rows, uint32_t cols, uint32_t channels,
           bool write) {
    const Regs& r = regs_;
    const uint32_t format = c::precision_format(r.param(fm.precision));
    if (format > c::kFormatNhcwb16) return unprovable();
    if (rows == 0 || cols == 0 || channels == 0) return;
    const bool bricks = format == c::kFormatNhcwb16;
    if ((fm.stride(r, 0) | fm.stride(r, 1) | fm.stride(r, 2)) > kLow32) return outside(what);
    // Each factor below is under 2^32 (elements of at most 8 bytes, sizes under 2^16): 64-bit products.
    const uint32_t stride_y = static_cast<uint32_t>(fm.stride(r, 1));
    const uint32_t sx = bricks ? c::kBrick * elem : static_cast<uint32_t>(fm.stride(r, 0));
    const uint32_t sc = bricks ? static_cast<uint32_t>(fm.stride(r, 2)) : c::kBrick * elem;
    const uint32_t last_c = bricks ? (channels + c::kBrick - 1) / c::kBrick * c::kBrick - 1 : channels - 1;
    const uint64_t channel_end = uint64_t{last_c / c::kBrick} * sc + (last_c % c::kBrick) * elem + elem;
    const uint32_t width0 = fm.extent(r, 0), height0 = fm.extent(r, 1), height1 = fm.extent(r, 2);
    const uint32_t left = cols < width0 ? cols : width0;
    const uint32_t right = cols - left;
    // (rows, cols) of tiles 0..3
    const uint32_t tile_rows[c::kTiles] = {rows < height0 ? rows : height0, rows < height1 ? rows : height1,
                                           rows > height0 ? rows - height0 : 0, rows > height1 ? rows - height1 : 0};
    const uint32_t tile_cols[c::kTiles] = {left, right, left, right};
    uint64_t lo = ~uint64_t{0}, hi = 0;
    for (int t = 0; t < c::kTiles; ++t) {
      if (tile_rows[t] == 0 || tile_cols[t] == 0) continue;
      const uint64_t base = fm.base(r, t);
      if (base > kLow32) return outside(what);
      const uint64_t end = base + uint64_t{tile_rows[t] - 1} * stride_y + uint64_t{tile_cols[t] - 1} * sx + channel_end;
      if (base < lo) lo = base;
      if (end > hi) hi = end;
    }
    span(what, fm.region(r), lo, hi - lo, write);
  }

  void outside(NpuAccess what) { fault(runtime::ErrorCode::kNpuAccessOutside, what); }
  void unprovable() { fail(runtime::Error{runtime::ErrorCode::kNpuStreamUnprovable, at_, word_}); }

 private:
  void fault(runtime::ErrorCode code, NpuAccess what) { fail(runtime::Error{code, static_cast<uint32_t>(what), at_}); }
  void fail(const runtime::Error& error) {
    if (ok()) error_ = error;
  }

  const StreamBounds& bounds_;
  const Regs& regs_;
  uint32_t at_, word_;
  runtime::Error error_{runtime::ErrorCode::kOk, 0, 0};
};

// The OFM's H, W and C.
uint32_t ofm_height(const Regs& r) { return r.param(c::kOfmHeightM1) + 1; }
uint32_t ofm_width(const Regs& r) { return r.param(c::kOfmWidthM1) + 1; }
uint32_t ofm_depth(const Regs& r) { return r.param(c::kOfmDepthM1) + 1; }

// Bytes of a U55/U65 OFM element (size field of bits 2..1), 0 if reserved.
uint32_t elem_bytes(uint32_t size_field) { return size_field <= 2 ? 1u << size_field : 0; }

// A feature map read of rows x cols x channels; an axis whose bit is set in `broadcast` (H,
// W, C: bits 0..2 on every family) reads 1. The U55/U65 (`u85` false): an element size the
// family reserves is unprovable. The Ethos-U85: elements of up to 64 bits; chained (the
// chain buffer) or NONE (a scalar) storage reads no memory, nor does a SCALAR broadcast; 3x1
// tiles and reserved broadcasts are unprovable.
void read(Checker& check, const Regs& r, bool u85, NpuAccess what, const FeatureMap& fm, uint32_t broadcast,
          uint32_t rows, uint32_t cols, uint32_t channels) {
  const uint32_t precision = r.param(fm.precision), size = c::precision_ifm_size(precision);
  if (u85) {
    const uint32_t storage = c::precision_storage(precision);
    if (storage == c::kStorageTile3x1 || broadcast > c::kBroadcastLastU85) return check.unprovable();
    if (storage == c::kStorageChained || storage == c::kStorageNone || broadcast == c::kBroadcastScalarU85) return;
  } else if (size > 2) {
    return check.unprovable();
  }
  check.box(what, fm, 1u << size, broadcast & c::kIfm2BroadcastH ? 1 : rows, broadcast & c::kIfm2BroadcastW ? 1 : cols,
            broadcast & c::kIfm2BroadcastC ? 1 : channels, false);
}

// Rows or columns of IFM samples the kernel covers (before upscaling), 0 if padding leaves none.
// Every operand is a 16-bit register field (the stride at most 16), so 32 bits hold each sum.
uint32_t ifm_extent(uint32_t out_m1, uint32_t stride, uint32_t kernel_m1, uint32_t before, uint32_t after,
                    uint32_t factor) {
  const int32_t n = static_cast<int32_t>(out_m1 * stride + kernel_m1 + 1) - static_cast<int32_t>(before + after);
  if (n <= 0) return 0;
  return (static_cast<uint32_t>(n) + factor - 1) / factor;
}

// IFM rows and columns the kernel covers (`stride_y`, `stride_x`: the family's decoding of
// KERNEL_STRIDE), halved with IFM upscaling; 0 and 0 when padding leaves none.
void ifm_rows_cols(const Regs& r, uint32_t stride_y, uint32_t stride_x, uint32_t& rows, uint32_t& cols) {
  const uint32_t factor = (r.param(c::kIfmUpscale) & 3) == c::kUpscaleNone ? 1 : 2;
  rows = ifm_extent(r.param(c::kOfmHeightM1), stride_y, r.param(c::kKernelHeightM1), r.param(c::kIfmPadTop),
                    r.param(c::kIfmPadBottom), factor);
  cols = ifm_extent(r.param(c::kOfmWidthM1), stride_x, r.param(c::kKernelWidthM1), r.param(c::kIfmPadLeft),
                    r.param(c::kIfmPadRight), factor);
}

// The U55/U65's weight and scale streams, one of each per core.
void weights_and_scales(Checker& check, const Regs& r, uint32_t cores) {
  const uint32_t depth = ofm_depth(r);
  for (uint32_t core = 0; core < cores && core < 2; ++core) {
    const uint32_t channels = depth / cores + (core < depth % cores ? 1 : 0);  // core k: channels k, k + cores, ...
    if (channels == 0) continue;
    check.span(core == 0 ? NpuAccess::kWeights : NpuAccess::kWeights1, r.region(c::kWeightRegion),
               r.value(kWeightBases[core]), r.value(kWeightBases[core] + 1), false);
    const uint64_t records = uint64_t{channels} * c::kScaleRecordBytes;
    const uint64_t length = r.value(kScaleBases[core] + 1);
    check.span(core == 0 ? NpuAccess::kScales : NpuAccess::kScales1, r.region(c::kScaleRegion),
               r.value(kScaleBases[core]), length > records ? length : records, false);
  }
}

void elementwise(Checker& check, const Regs& r, uint32_t mode) {
  const uint32_t h = ofm_height(r), w = ofm_width(r), d = ofm_depth(r);
  read(check, r, false, NpuAccess::kIfm, kIfm, 0, h, w, d);
  const uint32_t b = r.param(c::kIfm2Broadcast);
  const bool unary = mode >= c::kElementwiseFirstUnary && mode <= c::kElementwiseLastUnary;
  if (!unary && !(b & c::kIfm2BroadcastScalar)) read(check, r, false, NpuAccess::kIfm2, kIfm2, b, h, w, d);
}

// DMA0_SIZE0 and DMA0_SIZE1, 0 read as 1.
uint32_t dma_size(const Regs& r, uint32_t op) { return r.param(op) ? r.param(op) : 1; }

// Bytes from a DMA side's start to the end of its last row, LEN bytes per row: 1-D, `rows`
// rows back to back; 2-D, SIZE0 rows `row_stride` apart; 3-D, SIZE1 planes of those
// `plane_stride` apart. (Each family's strides: dma() and dma_u85().)
uint64_t dma_extent(const Regs& r, uint32_t mode, uint64_t rows, uint64_t row_stride, uint64_t plane_stride) {
  const uint64_t len = r.value(c::kDma0Len);
  if (mode == c::kDma1d) return rows * len;
  const uint64_t planes = mode == c::kDma3d ? (dma_size(r, c::kDma0Size1) - 1) * plane_stride : 0;
  return planes + (dma_size(r, c::kDma0Size0) - 1) * row_stride + len;
}

// The U55/U65's DMA: rows LEN + SKIP0 apart, planes SIZE0 rows + SKIP1 apart.
void dma(Checker& check, const Regs& r, uint32_t shram_bytes) {
  const uint32_t src = r.param(c::kDma0SrcRegion), dst = r.param(c::kDma0DstRegion);
  const uint32_t src_mode = c::dma_mode(src), dst_mode = c::dma_mode(dst);
  if (src_mode > c::kDma3d || dst_mode > c::kDma3d || c::dma_internal(src)) return check.unprovable();
  if (r.value(c::kDma0Len) > kLow32 || r.value(c::kDma0Skip0) > kLow32 || r.value(c::kDma0Skip1) > kLow32) {
    return check.span(NpuAccess::kDmaSource, c::dma_region(src), r.value(c::kDma0Src), ~uint64_t{0}, false);
  }
  const uint32_t mode = src_mode > dst_mode ? src_mode : dst_mode;
  const uint64_t size0 = dma_size(r, c::kDma0Size0), size1 = dma_size(r, c::kDma0Size1);
  const uint64_t rows = mode == c::kDma1d ? 1 : size0 * (mode == c::kDma3d ? size1 : 1);
  const uint64_t len = r.value(c::kDma0Len);
  const uint64_t row = len + r.value(c::kDma0Skip0), plane = size0 * len + r.value(c::kDma0Skip1);
  const uint64_t src_length = dma_extent(r, src_mode, rows, row, plane);
  check.span(NpuAccess::kDmaSource, c::dma_region(src), r.value(c::kDma0Src), src_length, false);
  const uint64_t dst_length = dma_extent(r, dst_mode, rows, row, plane);
  if (!c::dma_internal(dst)) {
    return check.span(NpuAccess::kDmaDestination, c::dma_region(dst), r.value(c::kDma0Dst), dst_length, true);
  }
  // a SHRAM offset, not a region's
  if (r.value(c::kDma0Dst) > kLow32 || r.value(c::kDma0Dst) + dst_length > shram_bytes) {
    check.outside(NpuAccess::kDmaDestination);
  }
}

// --- Ethos-U85 operations -----------------------------------------------------------

// The OFM write: the computed H x W x C box laid out in memory as OFM_PRECISION's
// transpose says (reverse writes the same bytes in another order); chained or NONE
// storage writes no memory.
void write_ofm_u85(Checker& check, const Regs& r) {
  const uint32_t precision = r.param(c::kOfmPrecision), storage = c::precision_storage(precision);
  if (storage == c::kStorageTile3x1) return check.unprovable();
  if (storage == c::kStorageChained || storage == c::kStorageNone) return;
  const uint32_t h = ofm_height(r), w = ofm_width(r), d = ofm_depth(r);
  uint32_t rows = h, cols = w, channels = d;
  switch (c::ofm_transpose(precision)) {
    case c::kTransposeHwc: break;
    case c::kTransposeWhc: rows = w, cols = h; break;
    case c::kTransposeHcw: cols = d, channels = w; break;
    case c::kTransposeWch: rows = w, cols = d, channels = h; break;
    case c::kTransposeChw: rows = d, cols = h, channels = w; break;
    case c::kTransposeCwh: rows = d, cols = w, channels = h; break;
    default: return check.unprovable();  // 4, 5: reserved
  }
  check.box(NpuAccess::kOfm, kOfm, 1u << c::precision_ofm_size(precision), rows, cols, channels, true);
}

// The one scale stream of all cores: at least 10 bytes per OFM channel.
void scales_u85(Checker& check, const Regs& r) {
  const uint64_t records = uint64_t{ofm_depth(r)} * c::kScaleRecordBytes, length = r.value(c::kScaleLength);
  check.span(NpuAccess::kScales, r.region(c::kScaleRegion), r.value(c::kScaleBase), length > records ? length : records,
             false);
}

// One weight stream per core (WEIGHT, WEIGHT1..3; a zero length reads nothing), then the scales.
void weights_and_scales_u85(Checker& check, const Regs& r, uint32_t cores) {
  static constexpr NpuAccess kStreams[] = {NpuAccess::kWeights, NpuAccess::kWeights1, NpuAccess::kWeights2,
                                           NpuAccess::kWeights3};
  for (uint32_t core = 0; core < cores && core < 4; ++core) {
    const uint64_t length = r.value(kWeightBases[core] + 1);
    if (length != 0) check.span(kStreams[core], r.region(c::kWeightRegion), r.value(kWeightBases[core]), length, false);
  }
  scales_u85(check, r);
}

// OFM_PRECISION's scale_mode (bit 8 of its parameter): 1 = GLOBAL (OFM_SCALE), 0 = per channel.
constexpr uint32_t kOfmScaleGlobal = 1u << 8;

// NPU_OP_CONV with weights_ifm2 (Vela's MATMUL, a 1x1 kernel; the U85 model's _ifm2_weights):
// weight [o, i] is IFM2's element (0, o, i), so the NPU reads one IFM2 row of OFM-depth columns
// of IFM-depth channels from IFM2's tiles, strides and element size. IFM2_BROADCAST does not
// apply (Vela sets it only for elementwise operations: here it holds an earlier one's). There
// is no weight stream; scale records are read only with per-channel scaling.
void weights_from_ifm2(Checker& check, const Regs& r) {
  read(check, r, true, NpuAccess::kIfm2, kIfm2, 0, 1, ofm_depth(r), r.param(c::kIfmDepthM1) + 1);
  if (!(r.param(c::kOfmPrecision) & kOfmScaleGlobal)) scales_u85(check, r);
}

// CONV, DEPTHWISE, POOL and (Ethos-U85) RESIZE: the IFM box, then weights and scales (CONV,
// DEPTHWISE; a U85 CONV with weights_ifm2: IFM2, see weights_from_ifm2). Each family decodes
// KERNEL_STRIDE its own way; the U85's pooling modes go further (SUM, MIN, ARGMAX_X/Y).
// RESIZE reads at most KERNEL_HEIGHT x KERNEL_WIDTH IFM samples per channel: Vela sets
// them to the IFM's size for it (ethos_u85_register_cs_generator.cpp, GenerateResizeOp).
void block_operation(Checker& check, const Regs& r, bool u85, uint32_t op, uint32_t param, uint32_t cores) {
  const uint32_t ifm_depth = r.param(c::kIfmDepthM1) + 1;
  const bool ifm2_weights = u85 && op == c::kOpConv && c::conv_weights_ifm2(param);
  uint32_t rows = r.param(c::kKernelHeightM1) + 1, cols = r.param(c::kKernelWidthM1) + 1, channels = ofm_depth(r);
  if (op == c::kOpResize) {  // the U55/U65 have no such opcode
    if (param > c::kResizeLastMode) return check.unprovable();
  } else {
    const bool kernel_1x1 = (r.param(c::kKernelWidthM1) | r.param(c::kKernelHeightM1)) == 0;
    if ((r.param(c::kIfmUpscale) & 3) > c::kUpscaleTranspose || (ifm2_weights && !kernel_1x1) ||
        (u85 && op == c::kOpPool && param > c::kPoolLastU85)) {
      return check.unprovable();
    }
    const uint32_t stride = r.param(c::kKernelStride);
    ifm_rows_cols(r, u85 ? c::u85_stride_y(stride) : c::stride_y(stride),
                  u85 ? c::u85_stride_x(stride) : c::stride_x(stride), rows, cols);
    if (rows == 0 || cols == 0) return check.unprovable();
    if (op == c::kOpConv || (op == c::kOpPool && param == c::kPoolReduceSum)) channels = ifm_depth;
    // ARGMAX over X or Y: the box of whichever depth is larger (bounds over-approximated).
    if (u85 && op == c::kOpPool && param >= c::kPoolArgmaxX && ifm_depth > channels) channels = ifm_depth;
  }
  read(check, r, u85, NpuAccess::kIfm, kIfm, 0, rows, cols, channels);
  if (op == c::kOpPool || op == c::kOpResize) return;
  if (!u85) return weights_and_scales(check, r, cores);
  ifm2_weights ? weights_from_ifm2(check, r) : weights_and_scales_u85(check, r, cores);
}

// ELEMENTWISE: IFM and IFM2 of the OFM's shape, each with its own broadcast axes or a
// scalar; the unary modes read no IFM2.
void elementwise_u85(Checker& check, const Regs& r, uint32_t mode) {
  if (!c::u85_elementwise_known(mode)) return check.unprovable();
  const uint32_t h = ofm_height(r), w = ofm_width(r), d = ofm_depth(r);
  read(check, r, true, NpuAccess::kIfm, kIfm, r.param(c::kIfmBroadcast), h, w, d);
  if (!c::u85_elementwise_unary(mode)) {
    read(check, r, true, NpuAccess::kIfm2, kIfm2, r.param(c::kIfm2Broadcast), h, w, d);
  }
}

// A U85 DMA side's extent (dma_extent): SIZE0 rows in 1-D (1 there, as Vela writes it,
// counted as contiguous rows in case it is not), STRIDE0 and STRIDE1 from `stride0`.
static_assert(c::kDma0SrcStride1 == c::kDma0SrcStride0 + 1 && c::kDma0DstStride1 == c::kDma0DstStride0 + 1,
              "a DMA side's STRIDE1 follows its STRIDE0");
uint64_t dma_extent_u85(const Regs& r, uint32_t mode, uint32_t stride0) {
  return dma_extent(r, mode, dma_size(r, c::kDma0Size0), r.value(stride0), r.value(stride0 + 1));
}

// DMA_START: the source region's stride mode is both sides'. Indexed (source: gather,
// destination: scatter): row r of plane p of the indexed side is at p * STRIDE1 + index * STRIDE0,
// the index an int32 of the table at DMA0_IDX in DMA0_IDX_REGION, read in order, 4 bytes a row
// and IDX_SKIP1 more after each plane (as kiln's model, simulator/kiln/simulator/npu/u85/dma.py,
// and Vela 5.2.0 drive it); the side spans (planes - 1) * STRIDE1 + IDX_MAX * STRIDE0 + LEN bytes
// for indices in [0, IDX_MAX]. Vela sets IDX_MAX to the indexed dim's last row; kiln's programs
// bound the indices by it on the CPU first (kiln::checked_index), as the U85's handling of a
// larger index is not in Vela's sources. Both sides indexed and an internal source are not
// modelled: refused.
void dma_u85(Checker& check, const Regs& r, uint32_t lut_bytes) {
  const uint32_t src = r.param(c::kDma0SrcRegion), dst = r.param(c::kDma0DstRegion), mode = c::dma_mode(src);
  const bool gather = c::u85_dma_indexed(src), scatter = c::u85_dma_indexed(dst);
  if (mode > c::kDma3d || c::dma_internal(src) || (gather && scatter) || (scatter && c::dma_internal(dst))) {
    return check.unprovable();
  }
  const uint64_t len = r.value(c::kDma0Len), idx_max = r.value(c::kDma0IdxMax);
  const uint64_t widest = r.value(c::kDma0SrcStride0) | r.value(c::kDma0SrcStride1) | r.value(c::kDma0DstStride0) |
                          r.value(c::kDma0DstStride1);
  // a negative (40-bit two's complement) or huge stride
  if (len > kLow32 || widest > kLow32) return check.outside(NpuAccess::kDmaSource);
  // each operand below 2^32, rows and planes below 2^16: the products and sums stay below 2^64
  const uint64_t planes = mode == c::kDma3d ? dma_size(r, c::kDma0Size1) : 1;
  const uint64_t rows = mode == c::kDma1d ? 1 : dma_size(r, c::kDma0Size0);
  if (gather || scatter) {
    const uint64_t skip = planes > 1 ? r.value(c::kDma0IdxSkip1) : 0;
    if (idx_max > kLow32 || skip > kLow32) return check.outside(NpuAccess::kDmaIndex);
    const uint64_t table = (planes - 1) * (rows * 4 + skip) + rows * 4;
    check.span(NpuAccess::kDmaIndex, r.region(c::kDma0IdxRegion), r.value(c::kDma0Idx), table, false);
  }
  const auto indexed_extent = [&](uint32_t stride0) {
    return (planes - 1) * r.value(stride0 + 1) + idx_max * r.value(stride0) + len;
  };
  const uint64_t src_length = gather ? indexed_extent(c::kDma0SrcStride0) : dma_extent_u85(r, mode, c::kDma0SrcStride0);
  check.span(NpuAccess::kDmaSource, c::u85_dma_region(src), r.value(c::kDma0Src), src_length, false);
  const uint64_t dst_length =
      scatter ? indexed_extent(c::kDma0DstStride0) : dma_extent_u85(r, mode, c::kDma0DstStride0);
  if (!c::dma_internal(dst)) {
    return check.span(NpuAccess::kDmaDestination, c::u85_dma_region(dst), r.value(c::kDma0Dst), dst_length, true);
  }
  // an offset into the LUT, not a region's
  if (r.value(c::kDma0Dst) > kLow32 || r.value(c::kDma0Dst) + dst_length > lut_bytes) {
    check.outside(NpuAccess::kDmaDestination);
  }
}

// --- An operation of each family ----------------------------------------------------

void operation(Checker& check, const StreamBounds& bounds, const Regs& r, uint32_t op, uint32_t param) {
  if (op == c::kOpConv || op == c::kOpDepthwise || op == c::kOpPool) {
    block_operation(check, r, false, op, param, bounds.cores);
  } else if (op == c::kOpElementwise) {
    elementwise(check, r, param);
  } else {
    if (op == c::kOpDmaStart) dma(check, r, bounds.shram_bytes);
    return;  // DMA done; IRQ, waits, PMU mask: no memory access
  }
  const uint32_t elem = elem_bytes(c::precision_ofm_size(r.param(c::kOfmPrecision)));
  if (elem == 0) return check.unprovable();
  check.box(NpuAccess::kOfm, kOfm, elem, ofm_height(r), ofm_width(r), ofm_depth(r), true);
}

void operation_u85(Checker& check, const StreamBounds& bounds, const Regs& r, uint32_t op, uint32_t param) {
  if (op == c::kOpDmaStart) return dma_u85(check, r, bounds.shram_bytes);
  const bool block = op == c::kOpConv || op == c::kOpDepthwise || op == c::kOpPool || op == c::kOpResize;
  if (!block && op != c::kOpElementwise) return;  // IRQ, waits, PMU mask: no memory access
  block ? block_operation(check, r, true, op, param, bounds.cores) : elementwise_u85(check, r, param);
  // Accumulators that start from IFM2 read it whole in the OFM's shape (its own element size).
  if (c::acc_input(r.param(c::kAccFormat)) == c::kAccInputIfm2) {
    read(check, r, true, NpuAccess::kIfm2, kIfm2, 0, ofm_height(r), ofm_width(r), ofm_depth(r));
  }
  write_ofm_u85(check, r);
}

}  // namespace

Status check_stream_bounds(const CommandStream& stream, const StreamBounds& bounds) {
  if (bounds.count < 0 || bounds.count > reg::kRegions || (bounds.count > 0 && bounds.regions == nullptr) ||
      bounds.cores == 0 || (stream.words == nullptr && stream.size_bytes != 0)) {
    return runtime::Error{runtime::ErrorCode::kInvalidArgument, 1, static_cast<uint32_t>(bounds.count)};
  }
  Regs r;
  const bool u85 = bounds.u85;
  const OpcodeSet& cmd0 = u85 ? kCmd0U85 : kCmd0;
  const OpcodeSet& cmd1 = u85 ? kCmd1U85 : kCmd1;
  const uint32_t words = stream.size_bytes / 4;
  for (uint32_t i = 0; i < words;) {
    const uint32_t header = stream.words[i];
    const uint32_t op = header & c::kOpcodeMask;
    const uint32_t payload = (header >> c::kPayloadShift) & 3;
    if (header & c::kReservedMask) return runtime::Error{runtime::ErrorCode::kNpuStreamUnprovable, i, header};
    if (payload == 0) {
      if (!cmd0.has(op)) return runtime::Error{runtime::ErrorCode::kNpuStreamUnprovable, i, header};
      if (op == c::kOpStop) return {};  // the NPU stops here: nothing after it runs
      if (op < c::kIfmPadTop) {
        Checker check(bounds, r, i, header);
        u85 ? operation_u85(check, bounds, r, op, header >> 16) : operation(check, bounds, r, op, header >> 16);
        if (!check.ok()) return check.error();
      } else {
        r.cmd0[op - Regs::kCmd0First] = static_cast<uint16_t>(header >> 16);
      }
      i += 1;
    } else if (payload == 1 && cmd1.has(op) && op != c::kOpBranch && words - i >= 2) {
      // (A U85 BRANCH may jump anywhere in the stream: a one-pass check cannot follow it.)
      r.cmd1[op] = wide(header, stream.words[i + 1]);
      i += 2;
    } else {
      return runtime::Error{runtime::ErrorCode::kNpuStreamUnprovable, i, header};
    }
  }
  return {};
}

StreamBounds bounds_for(uint32_t config, const RegionLimit* regions, int count) {
  const uint32_t cores = reg::cores_of(config);
  const reg::Family* family = reg::family_of(config);
  const bool u85 = family != nullptr && family->u85_commands;
  const uint32_t internal = u85 ? family->lut_bytes : reg::config_shram_kib(config) * 1024 / cores;
  return StreamBounds{regions, count, internal, cores, u85};
}

Status Driver::check_bounds(const CommandStream& stream, const RegionLimit* regions, int count) const {
  return check_stream_bounds(stream, bounds_for(config_, regions, count));
}

}  // namespace kiln::ethosu
