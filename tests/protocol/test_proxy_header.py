"""The PROXY header parser (protocol/proxy_header.py): HAProxy's proxy-protocol.txt, v1 and v2.

Every header is fed whole, with trailing bytes (which must be left to the client's stream), byte by
byte, and cut at every position; malformed ones raise `ProxyHeaderError` (a `ProtocolError`) and
keep raising it; hypothesis checks that whatever the bytes, the parser never takes a byte past the
header and raises nothing else. The headers are built here from the specification's layout.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kqp.protocol.errors import ProtocolError
from kqp.protocol.proxy_header import (
    MAX_V1_LINE,
    MAX_V2_LENGTH,
    NO_HEADER,
    V2_SIGNATURE,
    ProxyHeader,
    ProxyHeaderError,
    ProxyHeaderParser,
)

CLIENT_BYTES = b"\x00\x00\x00\x15\x00\x12"   # what follows: a Kafka frame's size prefix and api key


def v2(command: int, family: int, block: bytes, version: int = 2) -> bytes:
    return V2_SIGNATURE + bytes([version << 4 | command, family]) + struct.pack(">H", len(block)) + block


def v2_tcp(source: str, sport: int, destination: str, dport: int, tlvs: bytes = b"") -> bytes:
    src, dst = ipaddress.ip_address(source), ipaddress.ip_address(destination)
    family = 0x11 if src.version == 4 else 0x21
    return v2(1, family, src.packed + dst.packed + struct.pack(">HH", sport, dport) + tlvs)


def tlv(kind: int, value: bytes) -> bytes:
    return bytes([kind]) + struct.pack(">H", len(value)) + value


VALID = {
    "v1-tcp4": (b"PROXY TCP4 127.0.0.2 127.0.0.1 51000 19092\r\n",
                ProxyHeader(1, "PROXY", ("127.0.0.2", 51000), ("127.0.0.1", 19092), 44)),
    "v1-tcp4-widest": (b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n",
                       ProxyHeader(1, "PROXY", ("255.255.255.255", 65535), ("255.255.255.255", 65535), 56)),
    "v1-tcp4-zeros": (b"PROXY TCP4 0.0.0.0 10.0.0.1 0 0\r\n",
                      ProxyHeader(1, "PROXY", ("0.0.0.0", 0), ("10.0.0.1", 0), 33)),
    "v1-tcp6": (b"PROXY TCP6 2001:DB8::7 ::1 443 19092\r\n",
                ProxyHeader(1, "PROXY", ("2001:db8::7", 443), ("::1", 19092), 38)),
    "v1-unknown-short": (b"PROXY UNKNOWN\r\n", ProxyHeader(1, "PROXY", None, None, 15)),
    "v1-unknown-worst-case": (b"PROXY UNKNOWN " + b"f" * 39 + b" " + b"\xff" * 39 + b" 65535 65535\r\n",
                              ProxyHeader(1, "PROXY", None, None, MAX_V1_LINE)),
    "v2-tcp4": (v2_tcp("127.0.0.3", 40000, "127.0.0.1", 19092),
                ProxyHeader(2, "PROXY", ("127.0.0.3", 40000), ("127.0.0.1", 19092), 28)),
    "v2-tcp6": (v2_tcp("2001:db8::1", 1, "::1", 2),
                ProxyHeader(2, "PROXY", ("2001:db8::1", 1), ("::1", 2), 52)),
    # An AWS NLB's VPC endpoint id (0xEA), HAProxy's unique id (0x05) and a NOOP (0x04): skipped.
    "v2-tcp4-tlvs": (v2_tcp("10.1.2.3", 5, "10.0.0.9", 9092, tlv(0xEA, b"\x01vpce-0123") + tlv(5, b"x" * 100)
                            + tlv(4, b"")),
                     ProxyHeader(2, "PROXY", ("10.1.2.3", 5), ("10.0.0.9", 9092), 28 + 13 + 103 + 3)),
    "v2-local": (v2(0, 0x00, b""), ProxyHeader(2, "LOCAL", None, None, 16)),
    # LOCAL: the block, family included, is ignored whatever it holds.
    "v2-local-with-block": (v2(0, 0x11, bytes(12)), ProxyHeader(2, "LOCAL", None, None, 28)),
    "v2-unspec": (v2(1, 0x00, b""), ProxyHeader(2, "PROXY", None, None, 16)),
    "v2-unix": (v2(1, 0x31, b"/run/a.sock".ljust(108, b"\0") + bytes(108)), ProxyHeader(2, "PROXY", None, None, 232)),
    "v2-udp4": (v2(1, 0x12, bytes(12)), ProxyHeader(2, "PROXY", None, None, 28)),
}

MALFORMED = {
    "v1-no-space": b"PROXYTCP4 1.2.3.4 1.2.3.5 1 2\r\n",
    "v1-two-spaces": b"PROXY TCP4  1.2.3.4 1.2.3.5 1 2\r\n",
    "v1-lone-lf": b"PROXY TCP4 1.2.3.4 1.2.3.5 1 22\n",
    "v1-lone-cr-in-unknown": b"PROXY UNKNOWN x\ry\r\n",
    "v1-lone-cr": b"PROXY TCP4 1.2.3.4\r1.2.3.5 1 2\r\n",
    "v1-tcp5": b"PROXY TCP5 1.2.3.4 1.2.3.5 1 2\r\n",
    "v1-leading-zero-address": b"PROXY TCP4 01.2.3.4 1.2.3.5 1 2\r\n",
    "v1-octet-256": b"PROXY TCP4 1.2.3.256 1.2.3.5 1 2\r\n",
    "v1-three-octets": b"PROXY TCP4 1.2.3 1.2.3.5 1 2\r\n",
    "v1-v6-in-tcp4": b"PROXY TCP4 ::1 ::1 1 2\r\n",
    "v1-v4-in-tcp6": b"PROXY TCP6 1.2.3.4 1.2.3.5 1 2\r\n",
    "v1-v6-scope": b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n",
    "v1-port-65536": b"PROXY TCP4 1.2.3.4 1.2.3.5 65536 2\r\n",
    "v1-port-leading-zero": b"PROXY TCP4 1.2.3.4 1.2.3.5 080 2\r\n",
    "v1-port-sign": b"PROXY TCP4 1.2.3.4 1.2.3.5 +80 2\r\n",
    "v1-missing-port": b"PROXY TCP4 1.2.3.4 1.2.3.5 80\r\n",
    "v1-extra-field": b"PROXY TCP4 1.2.3.4 1.2.3.5 80 81 82\r\n",
    "v1-not-ascii": b"PROXY TCP4 1.2.3.4 1.2.3.\xc3\xa9 1 2\r\n",
    "v1-too-long": b"PROXY UNKNOWN " + b"x" * 200 + b"\r\n",
    "v1-unknownx": b"PROXY UNKNOWNX\r\n",
    "v1-prefix-then-garbage": b"PRXY",
    "v2-broken-signature": V2_SIGNATURE[:6] + b"X" + V2_SIGNATURE[7:] + bytes(4),
    "v2-version-1": v2(1, 0x11, bytes(12), version=1),
    "v2-version-3": v2(1, 0x11, bytes(12), version=3),
    "v2-command-2": v2(2, 0x11, bytes(12)),
    "v2-family-4": v2(1, 0x41, bytes(12)),
    "v2-transport-3": v2(1, 0x13, bytes(12)),
    "v2-short-ipv4-block": v2(1, 0x11, bytes(11)),
    "v2-short-ipv6-block": v2(1, 0x21, bytes(12)),
    "v2-short-unix-block": v2(1, 0x31, bytes(215)),
    "v2-tlv-cut": v2_tcp("1.2.3.4", 1, "1.2.3.5", 2, b"\x04\x00"),
    "v2-tlv-past-end": v2_tcp("1.2.3.4", 1, "1.2.3.5", 2, b"\x04\x00\x09abc"),
    "v2-over-kqps-bound": V2_SIGNATURE + b"\x21\x11" + struct.pack(">H", MAX_V2_LENGTH + 1),
}


def feed_in_pieces(data: bytes, cuts: list[int]) -> tuple[ProxyHeaderParser, int]:
    """Feed `data` cut at `cuts`; return the parser and the bytes it took. Pieces after the result are
    still offered (a caller may read past it), and must be left alone."""
    parser, taken, start = ProxyHeaderParser(), 0, 0
    for end in [*cuts, len(data)]:
        taken += parser.receive(data[start:end])
        start = end
    return parser, taken


@pytest.mark.parametrize("name", VALID)
def test_a_header_whole_and_with_the_clients_bytes_after_it(name: str) -> None:
    header, expected = VALID[name]
    for trailing in (b"", CLIENT_BYTES, b"\x16\x03\x01\x02\x00"):   # nothing, a Kafka frame, a TLS ClientHello
        parser = ProxyHeaderParser()
        assert parser.receive(header + trailing) == len(header)
        assert parser.result == expected
        assert parser.receive(b"more") == 0   # done: nothing more is the header's


@pytest.mark.parametrize("name", VALID)
def test_a_header_cut_at_every_position_and_byte_by_byte(name: str) -> None:
    header, expected = VALID[name]
    data = header + CLIENT_BYTES
    for cut in range(1, len(data)):
        parser, taken = feed_in_pieces(data, [cut])
        assert (taken, parser.result) == (len(header), expected), cut
    parser, taken = feed_in_pieces(data, list(range(1, len(data))))
    assert (taken, parser.result) == (len(header), expected)


@pytest.mark.parametrize("first", [b"\x00", b"\x16", b"G", b"\n", b"Q", b"proxy TCP4 "])
def test_a_stream_that_cannot_start_a_header_is_no_header_and_loses_no_byte(first: bytes) -> None:
    parser = ProxyHeaderParser()
    assert parser.receive(first + CLIENT_BYTES) == 0
    assert parser.result is NO_HEADER


def test_nothing_received_decides_nothing() -> None:
    parser = ProxyHeaderParser()
    assert parser.receive(b"") == 0
    assert parser.result is None


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_header_raises_a_protocol_error_that_sticks(name: str) -> None:
    data = MALFORMED[name]
    with pytest.raises(ProxyHeaderError) as raised:
        feed_in_pieces(data, [])
    assert isinstance(raised.value, ProtocolError)
    with pytest.raises(ProxyHeaderError):   # sticky, as the frame reader's errors are
        ProxyHeaderParser.receive(_failed(data), b"PROXY UNKNOWN\r\n")
    with pytest.raises(ProxyHeaderError):   # and byte by byte too
        feed_in_pieces(data, list(range(1, len(data))))


def _failed(data: bytes) -> ProxyHeaderParser:
    parser = ProxyHeaderParser()
    with pytest.raises(ProxyHeaderError):
        parser.receive(data)
    return parser


def test_errors_come_as_early_as_the_bytes_allow() -> None:
    # The specification asks to abort as soon as possible: a wrong prefix, or 107 bytes without CRLF.
    with pytest.raises(ProxyHeaderError, match="not a PROXY header"):
        ProxyHeaderParser().receive(b"PRX")
    with pytest.raises(ProxyHeaderError, match="not a PROXY header"):
        ProxyHeaderParser().receive(V2_SIGNATURE[:5] + b"\x01")
    parser = ProxyHeaderParser()
    assert parser.receive(b"PROXY UNKNOWN " + b"x" * (MAX_V1_LINE - 15)) == MAX_V1_LINE - 1   # one short: waits
    with pytest.raises(ProxyHeaderError, match="without CRLF"):
        parser.receive(b"x")
    with pytest.raises(ProxyHeaderError, match="bound"):   # v2's length is judged from its 16 fixed bytes
        ProxyHeaderParser().receive(V2_SIGNATURE + b"\x21\x11\xff\xff")


def test_the_v2_bound_is_inclusive_and_configurable() -> None:
    at_bound = v2_tcp("1.2.3.4", 1, "1.2.3.5", 2, tlv(4, bytes(MAX_V2_LENGTH - 12 - 3)))
    parser = ProxyHeaderParser()
    assert parser.receive(at_bound) == 16 + MAX_V2_LENGTH
    assert parser.result is not None
    with pytest.raises(ProxyHeaderError):
        ProxyHeaderParser(max_v2_length=12).receive(v2_tcp("1.2.3.4", 1, "1.2.3.5", 2, tlv(4, b"")))


@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=6))
def test_any_bytes_are_a_result_or_a_header_error_and_never_more_than_the_header(data: bytes,
                                                                                 cuts: list[int]) -> None:
    cuts = sorted({c for c in cuts if 0 < c < len(data)})
    try:
        parser, taken = feed_in_pieces(data, cuts)
    except ProxyHeaderError:
        return
    if isinstance(parser.result, ProxyHeader):
        assert taken == parser.result.length
    elif parser.result is NO_HEADER:
        assert taken == 0
    else:
        assert taken == len(data)   # still waiting: every byte so far is the header's


@given(st.sampled_from(["v1", "v2"]), st.ip_addresses(), st.integers(0, 65535), st.integers(0, 65535),
       st.binary(max_size=40), st.lists(st.integers(1, 200), max_size=8))
def test_any_address_and_port_round_trip(form: str, source: ipaddress.IPv4Address | ipaddress.IPv6Address,
                                         sport: int, dport: int, trailing: bytes, cuts: list[int]) -> None:
    destination = "10.0.0.1" if source.version == 4 else "::1"
    if form == "v1":
        header = f"PROXY TCP{source.version} {source} {destination} {sport} {dport}\r\n".encode()
    else:
        header = v2_tcp(str(source), sport, destination, dport)
    data = header + trailing
    parser, taken = feed_in_pieces(data, sorted({c for c in cuts if c < len(data)}))
    assert taken == len(header)
    assert parser.result == ProxyHeader(int(form[1]), "PROXY", (str(source), sport), (destination, dport), len(header))
