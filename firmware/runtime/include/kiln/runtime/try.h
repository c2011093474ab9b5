// Early return on error, for any function that returns a Result<T> or a Status
// (kiln/runtime/result.h): the loader, the method, the kernels, the Ethos-U delegate and
// driver, and apps.
//
//   KILN_TRY(decl, expr)  `expr` is a Result<T>. On error, returns its Error from the
//                         enclosing function; else `decl` takes its value. `decl` declares
//                         a variable (KILN_TRY(fb::Table t, fb::table_at(r, pos))) or names
//                         one already declared (KILN_TRY(t, fb::table_at(r, pos))).
//   KILN_CHECK(expr)      `expr` is a Status (or a Result<T> whose value is not needed). On
//                         error, returns its Error from the enclosing function.
//
// The enclosing function returns a Result<U> or a Status: an Error converts to either.
// Plain if/return (no statement expressions), so it is standard C++17. KILN_TRY declares a
// temporary named after its line: at most one KILN_TRY per line.
#pragma once

#include "kiln/runtime/result.h"

#define KILN_CONCAT_(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_(a, b)
#define KILN_TRY_(tmp, decl, expr)   \
  auto tmp = (expr);                 \
  if (!tmp.ok()) return tmp.error(); \
  decl = tmp.value()
#define KILN_TRY(decl, expr) KILN_TRY_(KILN_CONCAT(kiln_try_, __LINE__), decl, expr)
#define KILN_CHECK(expr)                               \
  do {                                                 \
    auto kiln_check_ = (expr);                         \
    if (!kiln_check_.ok()) return kiln_check_.error(); \
  } while (0)
