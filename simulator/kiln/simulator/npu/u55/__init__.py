"""The Ethos-U55/U65 family: its command-stream opcodes and register fields, its operations and
its cycle estimate (the U65 is this family's NPU with 128-bit AXI ports and up to two cores).
What the U85 shares with it lives in kiln.simulator.npu itself."""
