// The runner's bundle mode (runner.h: run_bundle): every case of every method suite of the
// BundledProgram baked in, run on the device and checked against its expected outputs.
#include <cstring>
#include <type_traits>

#include "bundle.h"
#include "kiln/cpu.h"
#include "kiln/platform.h"
#include "model.h"
#include "npu.h"
#include "runner.h"

namespace kiln::runner {
namespace {

using runtime::Method;
using runtime::ScalarType;
using runtime::Tensor;

// "<what> failed: " and the error, as fail() prints a loader's; then kExitLoad.
int reject(const char* what, const runtime::Error& error) { return fail(what, error, kExitLoad); }

// The console's print has no precision: a name that is not NUL-terminated goes byte by byte.
void print_name(runtime::StringView name) {
  for (size_t i = 0; i < name.size; ++i) print("%c", name.data[i]);
}

void print_shape(int8_t type, const int32_t* sizes, size_t dims, size_t nbytes) {
  print("%s [", type_name(static_cast<ScalarType>(type)));
  for (size_t d = 0; d < dims; ++d) print(d ? ", %d" : "%d", int(sizes[d]));
  print("] (%u bytes)", unsigned(nbytes));
}

// The DimOrder of bundle tensor `v` (none given: contiguous); false for one the runtime does
// not read.
bool bundle_order(const BundleValue& v, runtime::DimOrder* order) {
  *order = runtime::DimOrder::kContiguous;
  if (v.dim_order.size == 0) return true;
  return v.dim_order.size == v.sizes.size && runtime::dim_order_of(v.sizes.data, v.dim_order.data, v.sizes.size, order);
}

// Whether bundle value `v` is a tensor of `t`'s type, sizes and bytes, in a dim order the
// runtime reads (its own or `t`'s: elements are matched by index, element_index); else prints
// "bundle: <method> case C <input|output> I: ..." saying how it differs, and returns false.
bool matches(const BundleValue& v, const Tensor& t, runtime::StringView method, uint32_t c, const char* side,
             uint32_t i) {
  runtime::DimOrder order;
  bool same = v.kind == BundleValueKind::kTensor && v.type == static_cast<int8_t>(t.type) && v.sizes.size == t.dim &&
              v.data.size == t.nbytes;
  for (uint8_t d = 0; same && d < t.dim; ++d) same = v.sizes[d] == t.sizes[d];
  if (same && !bundle_order(v, &order)) {
    print("bundle: ");
    print_name(method);
    print(" case %u %s %u: the bundle's dim order is not one the runtime reads\n", unsigned(c), side, unsigned(i));
    return false;
  }
  if (same) return true;
  print("bundle: ");
  print_name(method);
  print(" case %u %s %u: the bundle gives ", unsigned(c), side, unsigned(i));
  if (v.kind == BundleValueKind::kTensor) {
    print_shape(v.type, v.sizes.data, v.sizes.size, v.data.size);
  } else {
    print("a value of kind %u, not a tensor", unsigned(v.kind));
  }
  print("; the method's is ");
  print_shape(static_cast<int8_t>(t.type), t.sizes, t.dim, t.nbytes);
  print("\n");
  return false;
}

// One element as the check compares it: integers exactly as int64, floats as double.
struct Element {
  bool integral = false;
  int64_t whole = 0;
  double real = 0.0;  // the value (an integer's rounded beyond 2^53)
};

// Element i of `bytes` as a T (an unaligned read).
template <typename T>
Element load(const uint8_t* bytes, uint32_t i) {
  T v;
  std::memcpy(&v, bytes + sizeof(T) * i, sizeof(T));
  Element e;
  e.integral = std::is_integral_v<T>;
  if constexpr (std::is_integral_v<T>) e.whole = static_cast<int64_t>(v);
  e.real = static_cast<double>(v);
  return e;
}

// Element i of `bytes` read as `type` into `out`; false for a type the check does not compare
// (half, bfloat16, quantized, ...).
bool element_at(ScalarType type, const uint8_t* bytes, uint32_t i, Element& out) {
  switch (type) {
    case ScalarType::kFloat: out = load<float>(bytes, i); return true;
    case ScalarType::kDouble: out = load<double>(bytes, i); return true;
    case ScalarType::kChar: out = load<int8_t>(bytes, i); return true;
    case ScalarType::kByte:
    case ScalarType::kBool: out = load<uint8_t>(bytes, i); return true;
    case ScalarType::kShort: out = load<int16_t>(bytes, i); return true;
    case ScalarType::kInt: out = load<int32_t>(bytes, i); return true;
    case ScalarType::kLong: out = load<int64_t>(bytes, i); return true;
    default: return false;
  }
}

// Whether outputs of `type` can be compared (element_at reads them).
bool comparable(ScalarType type) {
  static const uint8_t kZero[8] = {};
  Element ignored;
  return element_at(type, kZero, 0, ignored);
}

// |a - e|: an integers' exact difference (at least 1 when they differ), rounded to a double;
// NaN when a float is NaN.
double difference(const Element& a, const Element& e) {
  if (a.integral) {
    const uint64_t ua = static_cast<uint64_t>(a.whole), ue = static_cast<uint64_t>(e.whole);
    return static_cast<double>(a.whole > e.whole ? ua - ue : ue - ua);
  }
  return a.real > e.real ? a.real - e.real : e.real - a.real;
}

// `x` in decimal with up to six fractional digits; below 0.001 (but not 0) as d.dddddde-N, so
// that a difference no fixed-point digit shows still reads as one; "nan"; "inf" beyond 10^18.
void print_decimal(double x) {
  if (x != x) return (void)print("nan");
  if (x < 0) {
    print("-");
    x = -x;
  }
  if (x >= 1e18) return (void)print("inf");
  int exponent = 0;
  if (x != 0.0 && x < 1e-3) {
    while (x < 1.0) {
      x *= 10.0;
      ++exponent;
    }
  }
  uint64_t whole = static_cast<uint64_t>(x);
  uint32_t micro = static_cast<uint32_t>((x - static_cast<double>(whole)) * 1e6 + 0.5);
  if (micro >= 1000000u) {
    whole += 1;
    micro -= 1000000u;
  }
  print_u64(whole);
  if (micro != 0) {
    print(".");
    for (uint32_t unit = 100000u; micro != 0; unit /= 10) {  // no trailing zeros
      print("%c", char('0' + micro / unit));
      micro %= unit;
    }
  }
  if (exponent != 0) print("e-%d", exponent);
}

// Compares output `t` with `expected` (same type and size: matches() said so) element by
// element, |actual - expected| <= atol + rtol * |expected| (equal values, infinities too, and
// NaN against NaN are within); prints the output's line (docs/running.md) and returns whether
// every element is within.
bool check_output(const Tensor& t, const BundleValue& expected, const Options& o, runtime::StringView method,
                  uint32_t c, uint32_t i) {
  double largest = 0.0;
  uint32_t at = 0;
  bool within = true;
  const auto* actual = static_cast<const uint8_t*>(t.data);
  runtime::DimOrder order;
  (void)bundle_order(expected, &order);  // one the runtime reads: matches() said so
  for (uint32_t k = 0; k < t.numel; ++k) {  // k: the element's row-major index
    Element a, e;
    (void)element_at(t.type, actual, runtime::element_index(t.order, t.sizes, t.dim, k), a);  // comparable
    (void)element_at(t.type, expected.data.data, runtime::element_index(order, t.sizes, t.dim, k), e);
    if (a.integral ? a.whole == e.whole : a.real == e.real) continue;  // equal (infinities too)
    if (a.real != a.real && e.real != e.real) continue;                // both NaN
    const double diff = difference(a, e);                               // NaN when one is
    const bool close = diff <= o.atol + o.rtol * (e.real < 0 ? -e.real : e.real);
    within = within && close;
    if (!(diff <= largest)) {  // the first NaN or a larger difference
      if (largest != largest) continue;
      largest = diff;
      at = k;
    }
  }
  print("bundle ");
  print_name(method);
  print(" case %u output %u: max |diff| ", unsigned(c), unsigned(i));
  print_decimal(largest);
  print(" at element %u (atol ", unsigned(at));
  print_decimal(o.atol);
  print(", rtol ");
  print_decimal(o.rtol);
  print("): %s\n", within ? "pass" : "FAIL");
  return within;
}

// Bundle input `v` (matches() `t`) into `t`, each element to its place in t's dim order.
void copy_input(Tensor& t, const BundleValue& v) {
  runtime::DimOrder order;
  (void)bundle_order(v, &order);
  if (order == t.order) return (void)std::memcpy(t.data, v.data.data, t.nbytes);
  const size_t size = runtime::element_size(static_cast<int8_t>(t.type));
  auto* to = static_cast<uint8_t*>(t.data);
  for (uint32_t k = 0; k < t.numel; ++k) {
    std::memcpy(to + size * runtime::element_index(t.order, t.sizes, t.dim, k),
                v.data.data + size * runtime::element_index(order, t.sizes, t.dim, k), size);
  }
}

struct Tally {
  uint32_t cases = 0, outputs = 0, outside = 0, inference = 0;
};

// Runs every case of suite `s` on its method; kExitOk, or the exit status of a failure.
int run_suite(const Bundle& bundle, uint32_t s, const runtime::Program& program, const Options& options, bool counting,
              Tally& tally) {
  const runtime::StringView name = bundle.method_name(s);
  auto index = program.method_index(name);
  if (!index.ok() || index.value() >= kModel.methods.size) {
    print("bundle: suite %u names method '", unsigned(s));
    print_name(name);
    print("', which the program does not have\n");
    return kExitLoad;
  }
  auto method =
      Method::create(program, index.value(), kModel.methods[index.value()], runtime::kKernelTable, npu_backends());
  if (!method.ok()) return fail("binding the program", method.error(), kExitBind);
  Method& m = method.value();
  m.set_work_budget(runtime::runner_work_budget(m.work_per_run()));
  for (uint32_t c = 0; c < bundle.case_count(s); ++c) {
    const uint32_t n_in = bundle.value_count(s, c, false), n_out = bundle.value_count(s, c, true);
    if (n_in != m.input_count() || n_out != m.output_count()) {
      print("bundle: ");
      print_name(name);
      print(" case %u gives %u inputs and %u outputs; the method has %u and %u\n", unsigned(c), unsigned(n_in),
            unsigned(n_out), unsigned(m.input_count()), unsigned(m.output_count()));
      return kExitLoad;
    }
    for (uint32_t i = 0; i < n_in; ++i) {
      const BundleValue v = bundle.value(s, c, false, i);
      Tensor* t = m.input(i);
      if (t == nullptr || t->data == nullptr || !matches(v, *t, name, c, "input", i)) return kExitLoad;
      copy_input(*t, v);
    }
    for (uint32_t i = 0; i < n_out; ++i) {  // before running: a case that cannot be checked is refused
      const Tensor* t = m.output(i);
      if (t == nullptr || !matches(bundle.value(s, c, true, i), *t, name, c, "output", i)) return kExitLoad;
      if (!comparable(t->type)) {
        print("bundle: output %u is %s, which the runner does not compare\n", unsigned(i), type_name(t->type));
        return kExitLoad;
      }
    }
    reset_npu_counts();
    const uint32_t begin = cpu::cycle_count();
    runtime::Status run = m.execute();
    const uint32_t cycles = cpu::cycle_count() - begin;
    if (!run.ok()) return fail_inference(run.error());
    print("inference %u: ", unsigned(tally.inference++));
    print_run(counting, cycles);
    for (uint32_t i = 0; i < n_out; ++i) {
      const bool within = check_output(*m.output(i), bundle.value(s, c, true, i), options, name, c, i);
      tally.outputs += 1;
      tally.outside += within ? 0 : 1;
    }
    tally.cases += 1;
  }
  return kExitOk;
}

}  // namespace

int run_bundle(const uint8_t* data, size_t size, const Options& options) {
  if (options.input_count != 0 || options.output_dir != nullptr) {
    print("runner: the bundle's cases are the inputs and it checks the outputs: leave out --input and --output-dir\n");
    return kExitUsage;
  }
  auto bundle = Bundle::load(data, size);
  if (!bundle.ok()) return reject("loading the bundle", bundle.error());
  const runtime::Span<const uint8_t> pte = bundle.value().program();
  auto program = runtime::Program::load(pte.data, pte.size);
  if (!program.ok()) return reject("loading the .pte", program.error());
  bool delegates = false;
  for (size_t i = 0; i < program.value().method_count(); ++i) {
    auto method = program.value().method(i);
    delegates = delegates || (method.ok() && method.value().delegate_count() > 0);
  }
  if (int status = start_npu(delegates, options.npu_timeout_ms)) return status;
  print("bundle: %u method suite(s), the program %u bytes\n", unsigned(bundle.value().suite_count()),
        unsigned(pte.size));
  const bool counting = cpu::start_cycle_counter();
  Tally tally;
  for (uint32_t s = 0; s < bundle.value().suite_count(); ++s) {
    if (int status = run_suite(bundle.value(), s, program.value(), options, counting, tally)) return status;
  }
  if (tally.outside != 0) {
    print("bundle: FAIL, %u of %u output(s) outside the tolerance\n", unsigned(tally.outside), unsigned(tally.outputs));
    return kExitMismatch;
  }
  print("bundle: PASS, %u case(s), %u output(s) within the tolerance\n", unsigned(tally.cases),
        unsigned(tally.outputs));
  return kExitOk;
}

}  // namespace kiln::runner
