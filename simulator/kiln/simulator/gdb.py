"""A minimal GDB remote serial protocol client for QEMU's gdbstub.

Only what the NPU attachment needs: registers (p/P, after the target
description is read, as QEMU requires), memory (m/M, split into packets QEMU
accepts and pipelined: several requests in flight, replies read in order),
watchpoints (Z4/z4) and continue. QEMU 7.2 has no no-ack mode; it
acknowledges our packets with '+', which the reader skips, and does not wait for
our acknowledgements in system emulation.

Each round trip costs a wake-up of QEMU and one of this process, so writes whose
answer nothing waits for (register_write, memory_write: each answered OK) may be
sent in one go with the continue after them (cont(before)):
QEMU handles packets in order, so the CPU runs only after they took effect; one
that is refused is a GdbError once the stop arrives.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from kiln.errors import GdbError

# QEMU answers m with at most this many bytes (its packet buffer holds 4096 hex digits).
READ_CHUNK = 2048
# M packets carry 2 hex digits per byte plus a 14-character header; QEMU takes up to 4094.
WRITE_CHUNK = 2032
PIPELINE = 32  # requests in flight


@dataclass(frozen=True)
class Stop:
    """Why the CPU stopped: signal stop (with watchpoint kind/address) or exit."""

    exited: bool
    status: int | None = None  # exit status when exited
    watch: str | None = None  # "watch", "rwatch" or "awatch"
    address: int | None = None  # the watchpoint's address as the stub reports it


class GdbClient:
    """One connection to a stopped or running target; not thread-safe."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._buffer = b""
        self.registers: dict[str, int] = {}  # register name -> gdb register number

    # ------------------------------------------------------------ packets

    def _send(self, payload: str | bytes):
        data = payload.encode() if isinstance(payload, str) else payload
        self._sock.sendall(b"$" + data + b"#" + f"{sum(data) & 0xFF:02x}".encode())

    def _receive(self) -> bytes | None:
        """The next packet's payload, or None when the connection closed."""
        while True:
            start = self._buffer.find(b"$")
            if start >= 0:
                end = self._buffer.find(b"#", start)
                if end >= 0 and len(self._buffer) >= end + 3:
                    payload = self._buffer[start + 1 : end]
                    self._buffer = self._buffer[end + 3 :]
                    return payload
            try:
                data = self._sock.recv(1 << 16)
            except OSError:
                return None
            if not data:
                return None
            self._buffer += data

    def request(self, payload: str | bytes) -> bytes:
        self._send(payload)
        reply = self._receive()
        if reply is None:
            raise GdbError(f"the target closed the connection during {_short(payload)}")
        return reply

    def pipelined(self, payloads: list[str]) -> list[bytes]:
        """Sends every request before reading the replies (in order)."""
        for payload in payloads:
            self._send(payload)
        replies = [self._receive() for _ in payloads]
        if any(reply is None for reply in replies):
            raise GdbError(f"the target closed the connection during {_short(payloads[0])}")
        return replies

    def _checked(self, payload: str) -> bytes:
        reply = self.request(payload)
        if reply.startswith(b"E") and len(reply) == 3:
            raise GdbError(f"{_short(payload)} refused ({reply.decode()})")
        return reply

    # ------------------------------------------------------------ set-up

    def read_target_description(self):
        """Reads target.xml and its includes; fills `registers` (name -> number)."""
        pending, seen, number = ["target.xml"], set(), 0
        while pending:
            name = pending.pop(0)
            if name in seen:
                continue
            seen.add(name)
            text = self._read_xfer(name)
            pending += re.findall(r'<xi:include href="([^"]+)"', text)
            for match in re.finditer(r"<reg ([^>]*)/?>", text):
                attrs = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
                number = int(attrs.get("regnum", number))
                self.registers[attrs["name"]] = number
                number += 1

    def _read_xfer(self, annex: str) -> str:
        chunks, offset = [], 0
        while True:
            reply = self._checked(f"qXfer:features:read:{annex}:{offset:x},ffb")
            data = _unescape(reply[1:])
            chunks.append(data)
            offset += len(data)
            if reply[:1] == b"l" or not data:
                return b"".join(chunks).decode()

    # ------------------------------------------------------------ registers

    def read_register(self, name: str) -> int:
        reply = self._checked(f"p{self._number(name):x}")
        return int.from_bytes(bytes.fromhex(reply.decode()), "little")

    def write_register(self, name: str, value: int):
        self.write_registers({name: value})

    def read_all_registers(self, also: list[tuple[int, int]] = ()) -> tuple[bytes, list[bytes | None]]:
        """The bytes of the 'g' packet (every register, in the target's order) and, read in the
        same round trip, each (address, size up to READ_CHUNK) of `also`: None where refused."""
        replies = self.pipelined(["g"] + [f"m{address:x},{size:x}" for address, size in also])
        memory = [
            bytes.fromhex(reply.decode()) if len(reply) == 2 * size and not reply.startswith(b"E") else None
            for (_, size), reply in zip(also, replies[1:])
        ]
        return bytes.fromhex(replies[0].decode()), memory

    def write_registers(self, values: dict[str, int]):
        """Writes 32-bit registers by name, pipelined."""
        self._written(self.pipelined(self.register_writes(values)), [f"writing {name}" for name in values])

    def register_writes(self, values: dict[str, int]) -> list[str]:
        """The packets that write 32-bit registers by name (for cont and step's `before`)."""
        return [
            f"P{self._number(name):x}={(value & 0xFFFF_FFFF).to_bytes(4, 'little').hex()}"
            for name, value in values.items()
        ]

    @staticmethod
    def memory_write(address: int, data: bytes | memoryview) -> str:
        """The packet that writes `data` (at most WRITE_CHUNK bytes) at `address`."""
        if len(data) > WRITE_CHUNK:
            raise ValueError(f"{len(data)} bytes do not fit one memory write packet ({WRITE_CHUNK})")
        return f"M{address:x},{len(data):x}:{bytes(data).hex()}"

    @staticmethod
    def _written(replies: list[bytes | None], what: list[str]):
        """Raises a GdbError naming the first write (what[n]) not answered OK."""
        for reply, label in zip(replies, what):
            if reply != b"OK":
                raise GdbError(f"{label} failed ({_short(reply or b'closed')})")

    def _number(self, name: str) -> int:
        try:
            return self.registers[name]
        except KeyError:
            raise GdbError(f"the target has no register {name!r}; read the target description first") from None

    # ------------------------------------------------------------ memory

    def read_memory(self, address: int, size: int) -> bytes:
        requests = [(a, min(READ_CHUNK, address + size - a)) for a in range(address, address + size, READ_CHUNK)]
        out = bytearray()
        for a, n, data, reply in self._read_chunks(requests):
            if data is None:
                raise GdbError(f"reading {n} bytes at {a:#x} failed ({_short(reply or b'closed')})")
            out += data
        return bytes(out)

    def read_runs(self, runs: list[tuple[int, int]]) -> list[bytes | None]:
        """The memory of each (address, size) of `runs`, every request in flight together (up
        to PIPELINE at a time): None for a run the target refused in part."""
        requests = [
            (i, a, min(READ_CHUNK, address + size - a))
            for i, (address, size) in enumerate(runs)
            for a in range(address, address + size, READ_CHUNK)
        ]
        out: list[bytearray | None] = [bytearray() for _ in runs]
        for (i, _, _), (_, _, data, _) in zip(requests, self._read_chunks([(a, n) for _, a, n in requests])):
            if data is None or out[i] is None:
                out[i] = None
            else:
                out[i] += data
        return [None if data is None else bytes(data) for data in out]

    def _read_chunks(self, requests: list[tuple[int, int]]):
        """Yields (address, size, its bytes or None where refused, the reply) of each m request
        (a size up to READ_CHUNK), PIPELINE of them in flight at a time."""
        for batch in _batches(requests):
            for a, n in batch:
                self._send(f"m{a:x},{n:x}")
            replies = [self._receive() for _ in batch]
            for (a, n), reply in zip(batch, replies):
                refused = reply is None or (reply.startswith(b"E") and len(reply) == 3) or len(reply) != 2 * n
                yield a, n, None if refused else bytes.fromhex(reply.decode()), reply

    def write_memory(self, address: int, data: bytes | memoryview):
        for batch in _batches(_write_chunks(address, data)):
            for a, chunk in batch:
                self._send(self.memory_write(a, chunk))
            self._written([self._receive() for _ in batch], [f"writing {len(c)} bytes at {a:#x}" for a, c in batch])

    def memory_writes(self, address: int, data: bytes | memoryview) -> list[str]:
        """The packets that write `data` at `address` (for cont and step's `before`)."""
        return [self.memory_write(a, chunk) for a, chunk in _write_chunks(address, data)]

    # ------------------------------------------------------------ execution

    def watch(self, address: int, size: int):
        """Stops the CPU before any load or store to [address, address + size)."""
        if self._checked(f"Z4,{address:x},{size:x}") != b"OK":
            raise GdbError(f"the target refused a watchpoint on {address:#x}")

    def cont(self, before: list[str] = ()) -> Stop:
        """Sends the writes `before` (register_writes, memory_write packets), then continues
        until the CPU stops."""
        for payload in before:
            self._send(payload)
        self._send("c")
        self._written([self._receive() for _ in before], [_short(payload) for payload in before])
        return self._stop()

    def _stop(self) -> Stop:
        while True:
            reply = self._receive()
            if reply is None:
                return Stop(exited=True)
            kind = reply[:1]
            if kind in (b"W", b"X"):
                return Stop(exited=True, status=int(reply[1:3] or b"0", 16))
            if kind in (b"T", b"S"):
                return _parse_stop(reply.decode())
            # 'O' console output or anything else: keep waiting for the stop.


def _parse_stop(text: str) -> Stop:
    for field in text[3:].split(";"):
        key, _, value = field.partition(":")
        if key in ("watch", "rwatch", "awatch"):
            return Stop(exited=False, watch=key, address=int(value, 16))
    return Stop(exited=False)


def _write_chunks(address: int, data: bytes | memoryview) -> list[tuple[int, memoryview]]:
    """`data` at `address` cut into the pieces one M packet carries: (address, bytes)."""
    view = memoryview(data).cast("B")
    return [
        (a, view[a - address : a - address + WRITE_CHUNK]) for a in range(address, address + len(view), WRITE_CHUNK)
    ]


def _batches(items: list) -> list[list]:
    return [items[i : i + PIPELINE] for i in range(0, len(items), PIPELINE)]


def _unescape(data: bytes) -> bytes:
    out, escaped = bytearray(), False
    for byte in data:
        if escaped:
            out.append(byte ^ 0x20)
            escaped = False
        elif byte == 0x7D:  # '}'
            escaped = True
        else:
            out.append(byte)
    return bytes(out)


def _short(payload: str | bytes) -> str:
    text = payload if isinstance(payload, str) else payload.decode("latin-1")
    return text if len(text) <= 40 else text[:37] + "..."
