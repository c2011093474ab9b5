"""The fault report's names where tests/simulator/test_faults.py imports them from; they are
kiln.simulator.protocol's (the firmware's UART protocol, the fault report's lines among them)."""

from kiln.simulator.protocol import FaultReport, Lockup, ProtocolReader, symbolize

__all__ = ["FaultReport", "Lockup", "ProtocolReader", "symbolize"]
