// Reads the value of a failed Result: Result::value() must trap (UDF) into the fault
// path instead of returning the default value it holds.
#include "kiln/platform.h"
#include "kiln/runtime/result.h"

int main() {
  const kiln::runtime::Result<int> failed = kiln::runtime::Error{kiln::runtime::ErrorCode::kTooLarge, 1, 2};
  kiln::print("about to read the value of a failed Result\n");
  kiln::print("value %d\n", failed.value());
  return 0;
}
