// Exits with status 3: the runner must pass a program's own status through.
#include "kiln/platform.h"

int main() {
  kiln::print("exiting with status 3\n");
  return 3;
}
