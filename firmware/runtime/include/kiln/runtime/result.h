// Result<T>: either a T or an Error (kiln/runtime/error.h); Status: success or an Error.
//
// Contract:
//  - A Result made from an Error is never ok: an Error whose code is kOk becomes
//    kInternal (a = 0, b = 0), so a caller that forgot to pick a real code sees a
//    failure instead of an "ok" result holding a default T.
//  - value() is only for an ok Result. On an error it does not return and reads
//    nothing: it traps (UDF, __builtin_trap), so the platform's fault path reports the
//    trapping PC (UsageFault UNDEFINSTR) and ends the program with kFaultExitStatus
//    (on the host: SIGILL). A broken invariant, never an input error: check ok() first
//    (KILN_TRY does) unless the value is known good (e.g. re-reading verified data).
//  - T is default-constructible and copyable: it is stored by value beside the Error
//    (no heap, no placement new); it is T{} when the Result holds an error.
#pragma once

#include "kiln/runtime/error.h"

namespace kiln::runtime {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : value_(value), error_{ErrorCode::kOk, 0, 0} {}  // NOLINT: implicit
  Result(const Error& error) : value_{}, error_(error) {  // NOLINT
    if (error_.code == ErrorCode::kOk) error_ = Error{ErrorCode::kInternal, 0, 0};
  }
  Result(ErrorCode) = delete;  // an Error names its values: Error{code, a, b}

  bool ok() const { return error_.code == ErrorCode::kOk; }
  const T& value() const {
    if (!ok()) __builtin_trap();
    return value_;
  }
  T& value() {
    if (!ok()) __builtin_trap();
    return value_;
  }
  // The error; Error{kOk} when ok().
  const Error& error() const { return error_; }

 private:
  T value_;
  Error error_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() : error_{ErrorCode::kOk, 0, 0} {}
  Result(const Error& error) : error_(error) {  // NOLINT
    if (error_.code == ErrorCode::kOk) error_ = Error{ErrorCode::kInternal, 0, 0};
  }
  Result(ErrorCode) = delete;

  bool ok() const { return error_.code == ErrorCode::kOk; }
  const Error& error() const { return error_; }

 private:
  Error error_;
};

using Status = Result<void>;

}  // namespace kiln::runtime
