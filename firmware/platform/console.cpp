// Formatted UART output and program exit. A fixed-size stack buffer per call;
// no heap, no newlib stdio.
#include <cstdarg>
#include <cstdint>

#include "kiln/platform.h"
#include "platform_internal.h"

namespace kiln {
namespace {

struct Sink {
  void put(char c) {
    if (c == '\n') platform::uart_put('\r');
    platform::uart_put(c);
  }
  void pad(char fill, int count) {
    while (count-- > 0) put(fill);
  }
};

// Writes `value` in `base` right-aligned in `width` characters.
void put_number(Sink& out, uint32_t value, bool negative, unsigned base, bool upper, char fill, int width) {
  char digits[11];
  int n = 0;
  const char* alphabet = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  do {
    digits[n++] = alphabet[value % base];
    value /= base;
  } while (value != 0);
  int length = n + (negative ? 1 : 0);
  if (negative && fill == '0') out.put('-');
  out.pad(fill, width - length);
  if (negative && fill != '0') out.put('-');
  while (n > 0) out.put(digits[--n]);
}

}  // namespace

void write(const char* text, std::size_t length) {
  Sink out;
  for (std::size_t i = 0; i < length; ++i) out.put(text[i]);
}

void print(const char* format, ...) {
  Sink out;
  va_list args;
  va_start(args, format);
  for (const char* p = format; *p != '\0'; ++p) {
    if (*p != '%') {
      out.put(*p);
      continue;
    }
    ++p;
    char fill = ' ';
    if (*p == '0') {
      fill = '0';
      ++p;
    }
    int width = 0;
    while (*p >= '0' && *p <= '9') width = width * 10 + (*p++ - '0');
    switch (*p) {
      case 'd': {
        int v = va_arg(args, int);
        uint32_t magnitude = v < 0 ? 0u - static_cast<uint32_t>(v) : static_cast<uint32_t>(v);
        put_number(out, magnitude, v < 0, 10, false, fill, width);
        break;
      }
      case 'u': put_number(out, va_arg(args, unsigned), false, 10, false, fill, width); break;
      case 'x':
      case 'X': put_number(out, va_arg(args, unsigned), false, 16, *p == 'X', fill, width); break;
      case 'c': out.put(static_cast<char>(va_arg(args, int))); break;
      case 's': {
        const char* s = va_arg(args, const char*);
        int length = 0;
        while (s[length] != '\0') ++length;
        out.pad(' ', width - length);
        while (*s != '\0') out.put(*s++);
        break;
      }
      case '%': out.put('%'); break;
      case '\0':
        --p;  // a lone '%' at the end: stop at the terminator
        break;
      default: out.put('%'); out.put(*p);
    }
  }
  va_end(args);
}

void exit(int status) {
  print("[kiln] exit %d\n", status);
  platform::semihosting_exit(status);
}

}  // namespace kiln
