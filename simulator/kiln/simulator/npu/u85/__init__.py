"""The Ethos-U85 family: its command-stream opcodes and register fields, its operations and its
cycle estimate. What it shares with the Ethos-U55/U65 lives in kiln.simulator.npu itself; its
opcode table is the U55/U65's (u55/commands.py) with some gone and its own added."""
