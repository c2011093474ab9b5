// Never exits: the runner must stop it at its timeout.
#include "kiln/platform.h"

int main() {
  kiln::print("hanging on purpose\n");
  for (volatile int spin = 0;; spin = spin + 1) {
  }
}
