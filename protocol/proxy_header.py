"""The PROXY protocol header (HAProxy's proxy-protocol.txt, v1 text and v2 binary), read incrementally.

A load balancer in front of kqp writes this header before the client's own stream, so that kqp
learns who the client really is. `ProxyHeaderParser.receive(data)` returns how many bytes of
`data` belong to the header, never more: the listener reading it off the raw socket (before any
TLS handshake) takes exactly those and leaves the client's first bytes unread. `result` is then a
`ProxyHeader`, or `NO_HEADER` when the first byte cannot start either signature (nothing taken).

A header the specification refuses raises `ProxyHeaderError` (a `ProtocolError`, closing that
connection only), sticky as the frame reader's errors are. `source` is None where the
specification says to keep the socket's own peer (v1 `UNKNOWN`, v2 `LOCAL`, `AF_UNSPEC`, `AF_UNIX`,
UDP). TLVs are checked for shape and skipped; a v2 header is bounded by `MAX_V2_LENGTH`.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Final

from .errors import ProtocolError

__all__ = [
    "MAX_V1_LINE",
    "MAX_V2_LENGTH",
    "NO_HEADER",
    "V2_SIGNATURE",
    "ProxyHeader",
    "ProxyHeaderError",
    "ProxyHeaderParser",
]

V1_PREFIX: Final = b"PROXY "
V2_SIGNATURE: Final = b"\r\n\r\n\x00\r\nQUIT\n"
MAX_V1_LINE: Final = 107            # the specification's worst case, CRLF included
MAX_V2_LENGTH: Final = 4096         # address block + TLVs after the 16 fixed bytes; kqp's bound
_V2_FIXED = 16
# v2 family byte (high nibble: family, low: transport) -> (address block size, IP version) for what kqp reads
_V2_TCP = {0x11: (12, 4), 0x21: (36, 6)}
# Valid combinations the specification lets a receiver treat as UNSPEC: UDP over IP, Unix stream and datagram
_V2_UNSPEC_FALLBACK = {0x00: 0, 0x12: 12, 0x22: 36, 0x31: 216, 0x32: 216}


class ProxyHeaderError(ProtocolError):
    """Bytes that claim to be a PROXY header and do not match the specification."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    version: int                              # 1 or 2
    command: str                              # "PROXY", or "LOCAL" (v2: the balancer's own connection)
    source: tuple[str, int] | None            # the real client; None: use the socket's peer
    destination: tuple[str, int] | None
    length: int                               # bytes of the header on the wire


class _NoHeader:
    def __repr__(self) -> str:
        return "NO_HEADER"


NO_HEADER: Final = _NoHeader()


class ProxyHeaderParser:
    """One connection's header, fed as it arrives (h11's way: bytes in, a result out, no I/O)."""

    def __init__(self, max_v2_length: int = MAX_V2_LENGTH) -> None:
        self._max_v2 = max_v2_length
        self._buf = bytearray()
        self._need: int | None = None      # v2: the header's whole length, once the fixed part is in
        self._error: ProxyHeaderError | None = None
        self.result: ProxyHeader | _NoHeader | None = None

    def receive(self, data: bytes | bytearray | memoryview) -> int:
        """Take what of `data` belongs to the header; return how many bytes that is (the rest is the
        client's own stream). Raises `ProxyHeaderError` for a malformed header."""
        if self._error is not None:
            raise self._error
        if self.result is not None or not data:
            return 0
        try:
            return self._receive(bytes(data))
        except ProxyHeaderError as exc:
            self._error = exc
            raise

    def _receive(self, data: bytes) -> int:
        if not self._buf and data[0] not in (V1_PREFIX[0], V2_SIGNATURE[0]):
            self.result = NO_HEADER
            return 0
        v1 = (self._buf or data)[0] == V1_PREFIX[0]
        return self._receive_v1(data) if v1 else self._receive_v2(data)

    # -- v1: one line of text ---------------------------------------------------------------------
    def _receive_v1(self, data: bytes) -> int:
        chunk = data[:MAX_V1_LINE - len(self._buf)]
        newline = chunk.find(b"\n")
        if newline >= 0:   # the first LF ends the line: a lone one is refused when the line is read
            self._buf += chunk[:newline + 1]
            self.result = _parse_v1(bytes(self._buf))
            return newline + 1
        self._buf += chunk
        head = bytes(self._buf[:len(V1_PREFIX)])
        if not V1_PREFIX.startswith(head):   # abort as early as possible, as the specification asks
            raise ProxyHeaderError(f"not a PROXY header: starts {head!r}")
        if len(self._buf) >= MAX_V1_LINE:
            raise ProxyHeaderError(f"PROXY v1 line without CRLF in its first {MAX_V1_LINE} bytes")
        return len(chunk)

    # -- v2: a fixed part, then its length in addresses and TLVs ---------------------------------
    def _receive_v2(self, data: bytes) -> int:
        taken = 0
        if self._need is None:
            want = _V2_FIXED - len(self._buf)
            part = data[:want]
            self._buf += part
            taken = len(part)
            head = bytes(self._buf[:len(V2_SIGNATURE)])
            if not V2_SIGNATURE.startswith(head):
                raise ProxyHeaderError(f"not a PROXY header: starts {bytes(self._buf)!r}")
            if len(self._buf) < _V2_FIXED:
                return taken
            (length,) = struct.unpack_from(">H", self._buf, 14)
            if length > self._max_v2:
                raise ProxyHeaderError(f"PROXY v2 header of {length} bytes after its fixed part: "
                                       f"above kqp's bound of {self._max_v2}")
            self._need = _V2_FIXED + length
            data = data[taken:]
        part = data[:self._need - len(self._buf)]
        self._buf += part
        taken += len(part)
        if len(self._buf) == self._need:
            self.result = _parse_v2(bytes(self._buf))
        return taken


def _parse_v1(line: bytes) -> ProxyHeader:
    body = line[len(V1_PREFIX):-2]
    if not line.startswith(V1_PREFIX):
        raise ProxyHeaderError(f"not a PROXY header: starts {line[:len(V1_PREFIX)]!r}")
    if not line.endswith(b"\r\n") or b"\r" in body:
        raise ProxyHeaderError("PROXY v1 line must end with CRLF, and hold no other CR or LF")
    if body == b"UNKNOWN" or body.startswith(b"UNKNOWN "):
        # Anything up to the CRLF is ignored: the socket's own peer counts.
        return ProxyHeader(1, "PROXY", None, None, len(line))
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        raise ProxyHeaderError("PROXY v1 line is not US-ASCII") from None
    fields = text.split(" ")   # exactly one space between fields: two make an empty field, refused below
    if fields[0] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError(f"PROXY v1 protocol must be TCP4, TCP6 or UNKNOWN, got {fields[0]!r}")
    if len(fields) != 5:
        raise ProxyHeaderError(f"PROXY v1 {fields[0]} line needs 4 fields after it, got {text!r}")
    version = 4 if fields[0] == "TCP4" else 6
    source, destination = (_v1_address(fields[i], version) for i in (1, 2))
    sport, dport = (_v1_port(fields[i]) for i in (3, 4))
    return ProxyHeader(1, "PROXY", (source, sport), (destination, dport), len(line))


def _v1_address(text: str, version: int) -> str:
    if version == 4:
        octets = text.split(".")
        if len(octets) != 4 or not all(_decimal(o) and int(o) <= 255 for o in octets):
            raise ProxyHeaderError(f"PROXY v1 TCP4 address must be 4 decimal numbers 0-255 without "
                                   f"leading zeros, got {text!r}")
        return text
    if not text or not all(c in "0123456789abcdefABCDEF:." for c in text):   # no scope id, no brackets
        raise ProxyHeaderError(f"PROXY v1 TCP6 address is not an IPv6 address: {text!r}")
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        raise ProxyHeaderError(f"PROXY v1 TCP6 address is not an IPv6 address: {text!r}") from None


def _v1_port(text: str) -> int:
    if not _decimal(text) or int(text) > 65535:
        raise ProxyHeaderError(f"PROXY v1 port must be 0-65535 without leading zeros, got {text!r}")
    return int(text)


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0")) and len(text) <= 5


def _parse_v2(header: bytes) -> ProxyHeader:
    version, command = header[12] >> 4, header[12] & 0x0F
    if version != 2:
        raise ProxyHeaderError(f"PROXY v2 signature with version {version}")
    length = len(header)
    if command == 0:   # LOCAL: the balancer's own connection (a health check); the block is ignored
        return ProxyHeader(2, "LOCAL", None, None, length)
    if command != 1:
        raise ProxyHeaderError(f"PROXY v2 command {command} is neither LOCAL nor PROXY")
    family = header[13]
    block = header[_V2_FIXED:]
    if family in _V2_TCP:
        size, ip_version = _V2_TCP[family]
    elif family in _V2_UNSPEC_FALLBACK:
        size, ip_version = _V2_UNSPEC_FALLBACK[family], 0
    else:
        raise ProxyHeaderError(f"PROXY v2 address family and transport 0x{family:02x} are not defined")
    if len(block) < size:
        raise ProxyHeaderError(f"PROXY v2 address block of {len(block)} bytes, family 0x{family:02x} needs {size}")
    _check_tlvs(block[size:])
    if not ip_version:
        return ProxyHeader(2, "PROXY", None, None, length)
    width = size // 2 - 2
    source = str(ipaddress.ip_address(block[:width]))
    destination = str(ipaddress.ip_address(block[width:2 * width]))
    sport, dport = struct.unpack_from(">HH", block, 2 * width)
    return ProxyHeader(2, "PROXY", (source, sport), (destination, dport), length)


def _check_tlvs(tlvs: bytes) -> None:
    """Every TLV (1 byte type, 2 bytes length, the value) lies inside the header; their values are skipped."""
    pos = 0
    while pos < len(tlvs):
        if pos + 3 > len(tlvs):
            raise ProxyHeaderError(f"PROXY v2 TLV cut short: {len(tlvs) - pos} bytes left at offset {pos}")
        (size,) = struct.unpack_from(">H", tlvs, pos + 1)
        pos += 3 + size
        if pos > len(tlvs):
            raise ProxyHeaderError(f"PROXY v2 TLV of type 0x{tlvs[pos - 3 - size]:02x} runs past the header")
