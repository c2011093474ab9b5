"""The fault report parser and explanations, against bit patterns worked out by hand."""

from kiln.simulator.protocol import FaultReport, ProtocolReader


def feed(*lines):
    reader = ProtocolReader()
    for line in lines:
        reader.feed(line)
    return reader


def test_reader_collects_exit_status_and_registers():
    reader = feed(
        "noise",
        "[kiln] FAULT exception=3",
        "[kiln] CFSR=00020000 HFSR=40000000 MMFAR=00000000 BFAR=00000000 SFSR=00000000 SFAR=00000000",
        "[kiln] PC=10000200 LR=10000101 XPSR=01000000 SP=30007f00 EXC_RETURN=fffffff9",
        "[kiln] exit 134",
    )
    assert reader.exit_status == 134
    assert reader.fault.exception == 3
    assert reader.fault.registers["PC"] == 0x10000200 and reader.fault.registers["HFSR"] == 0x40000000


def test_hardfault_escalated_from_invstate():
    # CFSR bit 17 = INVSTATE; HFSR bit 30 = FORCED.
    report = FaultReport(3, {"CFSR": 1 << 17, "HFSR": 1 << 30, "PC": 0x10000200, "LR": 0})
    causes = report.causes()
    assert any("(INVSTATE)" in c for c in causes) and any("(FORCED)" in c for c in causes)
    assert report.explain()[0] == "firmware fault: HardFault at PC 0x10000200 (LR 0x00000000)"


def test_memmanage_with_valid_address_and_nocp():
    # MMARVALID (bit 7) + DACCVIOL (bit 1); NOCP is bit 19.
    report = FaultReport(4, {"CFSR": (1 << 7) | (1 << 1) | (1 << 19), "MMFAR": 0x20001000})
    causes = report.causes()
    assert "faulting address 0x20001000 (MMFAR)" in causes
    assert any("(DACCVIOL)" in c for c in causes) and any("(NOCP)" in c for c in causes)


def test_stack_overflow_frame_is_not_trusted():
    report = FaultReport(6, {"CFSR": 1 << 20, "PC": 0x1234})
    assert not report.frame_valid
    assert report.explain()[0] == "firmware fault: UsageFault"


def test_unexpected_interrupt_is_named():
    assert FaultReport(16 + 56).name == "unexpected interrupt IRQ 56"
