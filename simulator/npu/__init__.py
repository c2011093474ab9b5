"""kiln's functional model of the Arm Ethos-U55/U65 NPU."""
