// The console on the application's own board (KILN_BOARD empty): kiln's output (kiln::print,
// kiln::write) goes to the application's sink, kiln_console_put (kiln/kiln.h). Part of kiln's
// platform layer (kiln_platform), kept out of platform/ whose files are a kiln board's.
#include "../platform/platform_internal.h"

extern "C" void kiln_console_put(char c);

namespace kiln::platform {

void uart_put(char c) { kiln_console_put(c); }

}  // namespace kiln::platform
