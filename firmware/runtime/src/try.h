// Early return on error for the runtime's own sources (internal).
//   KILN_TRY(auto x, expr): expr is a Result<T>; returns its Error, else binds x.
//   KILN_CHECK(expr): expr is a Status (Result<void>); returns its Error.
#pragma once

#define KILN_CONCAT_(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_(a, b)
#define KILN_TRY_(tmp, decl, expr) \
  auto tmp = (expr);               \
  if (!tmp.ok()) return tmp.error(); \
  decl = tmp.value()
#define KILN_TRY(decl, expr) KILN_TRY_(KILN_CONCAT(kiln_try_, __LINE__), decl, expr)
#define KILN_CHECK(expr)                            \
  do {                                              \
    auto kiln_check_ = (expr);                      \
    if (!kiln_check_.ok()) return kiln_check_.error(); \
  } while (0)
