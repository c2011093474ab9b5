"""Decoding the Thumb load or store that touched a watched device register.

Only single 32-bit LDR/STR forms are accepted (the Ethos-U's registers are
32-bit and kiln's driver accesses them as aligned volatile words): the 16-bit
immediate and register forms, and the 32-bit LDR.W/STR.W with a 12-bit
immediate, an 8-bit immediate (offset, pre-indexed or post-indexed, with
writeback) or a shifted register. Anything else (LDRD/STRD, LDM/STM, byte and
halfword accesses, vector loads) raises UnsupportedAccess naming the encoding,
so a driver change that emits one fails loudly instead of being emulated wrongly.
Encodings: Armv8-M Architecture Reference Manual, C2 (T32 instruction set).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.errors import UnsupportedAccess

PC, SP = 15, 13


@dataclass(frozen=True)
class Access:
    """A decoded 32-bit load or store: address = base + offset, or base for post-indexing."""

    load: bool
    rt: int  # the register loaded or stored
    rn: int  # the base register
    offset: int  # signed byte offset (immediate), or None when `rm` is used
    rm: int | None  # index register (register form)
    shift: int  # left shift applied to rm
    index: bool  # True: the access uses base + offset; False: post-indexed (uses base)
    writeback: bool  # base += offset after the access
    size: int  # instruction length in bytes (2 or 4)

    def address(self, registers: dict[int, int]) -> int:
        return self.base_after(registers) if self.index else registers[self.rn]

    def base_after(self, registers: dict[int, int]) -> int:
        """The base register's value plus the offset (the writeback value)."""
        offset = self.offset if self.rm is None else (registers[self.rm] << self.shift)
        return (registers[self.rn] + offset) & 0xFFFF_FFFF


def is_32bit(first_halfword: int) -> bool:
    return (first_halfword >> 11) in (0b11101, 0b11110, 0b11111)


def decode(hw1: int, hw2: int | None = None) -> Access:
    """The access made by the instruction whose halfwords are hw1 (and hw2 if 32-bit)."""
    if not is_32bit(hw1):
        return _decode16(hw1)
    if hw2 is None:
        raise ValueError("a 32-bit Thumb instruction needs its second halfword")
    return _decode32(hw1, hw2)


def _decode16(hw: int) -> Access:
    rt, rn = hw & 7, (hw >> 3) & 7
    if hw >> 11 in (0b01100, 0b01101):  # STR/LDR (immediate) T1: imm5 * 4
        return Access(bool(hw & 0x0800), rt, rn, ((hw >> 6) & 0x1F) * 4, None, 0, True, False, 2)
    if hw >> 9 in (0b0101000, 0b0101100):  # STR/LDR (register) T1
        return Access(bool(hw & 0x0800), rt, rn, 0, (hw >> 6) & 7, 0, True, False, 2)
    raise UnsupportedAccess(
        f"16-bit instruction {hw:#06x} is not a 32-bit LDR/STR (byte, halfword, "
        f"SP-relative, LDM/STM or another instruction)"
    )


def _decode32(hw1: int, hw2: int) -> Access:
    top = hw1 & 0xFFF0
    rn, rt = hw1 & 0xF, hw2 >> 12
    name = f"32-bit instruction {hw1:#06x} {hw2:#06x}"
    if top in (0xF8C0, 0xF8D0):  # STR.W/LDR.W (immediate) T3: imm12
        access = Access(top == 0xF8D0, rt, rn, hw2 & 0xFFF, None, 0, True, False, 4)
    elif top in (0xF840, 0xF850) and hw2 & 0x0800:  # T4: P U W imm8
        p, u, w = bool(hw2 & 0x400), bool(hw2 & 0x200), bool(hw2 & 0x100)
        if not p and not w:
            raise UnsupportedAccess(f"{name}: undefined LDR/STR addressing (P=0, W=0)")
        if p and u and not w:
            raise UnsupportedAccess(f"{name}: unprivileged LDRT/STRT")
        imm = hw2 & 0xFF
        access = Access(top == 0xF850, rt, rn, imm if u else -imm, None, 0, p, w, 4)
    elif top in (0xF840, 0xF850) and (hw2 & 0x0FC0) == 0:  # T2: register, LSL imm2
        access = Access(top == 0xF850, rt, rn, 0, hw2 & 0xF, (hw2 >> 4) & 3, True, False, 4)
    else:
        raise UnsupportedAccess(
            f"{name} is not a 32-bit LDR/STR (LDRD/STRD, LDM/STM, byte, halfword, "
            f"exclusive, vector or another instruction)"
        )
    if rn == PC:
        raise UnsupportedAccess(f"{name}: PC-relative (literal) access")
    if rt == PC or (access.rm is not None and access.rm in (SP, PC)):
        raise UnsupportedAccess(f"{name}: uses PC/SP where the driver never does")
    return access


def advance_itstate(xpsr: int) -> int:
    """xPSR after one instruction of an IT block (unchanged outside one).

    ITSTATE is xPSR[15:10]:xPSR[26:25]; its low 3 bits zero ends the block,
    else bits 4..0 shift left by one."""
    it = ((xpsr >> 8) & 0xFC) | ((xpsr >> 25) & 0x3)
    if (it & 0xF) == 0:
        return xpsr
    it = 0 if (it & 0x7) == 0 else (it & 0xE0) | ((it << 1) & 0x1F)
    cleared = xpsr & ~((0x3F << 10) | (0x3 << 25))
    return cleared | ((it >> 2) << 10) | ((it & 3) << 25)
