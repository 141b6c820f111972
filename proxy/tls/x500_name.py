r"""A certificate's subject written as Kafka sees it: Java's `X500Principal.getName()` (RFC 2253).

Kafka's `ssl.principal.mapping.rules` match this exact string character for character, so kqp
renders it as Java does rather than as an RFC 4514 library does: RDNs last to first, joined by
``,`` (a multi-valued RDN's attributes by ``+``, in encoded order); only RFC 2253's keywords (CN,
C, L, ST, O, OU, STREET, DC, UID), any other attribute, or a value of a type Java does not read as
a string, written as its dotted OID and ``#`` plus the hex of its DER; string bytes read as UTF-8
whatever their type; ``, = + < > # ; " \`` escaped wherever they are (``=`` and ``#`` too, which
`cryptography` leaves alone inside a value), NUL as ``\00``, leading and trailing spaces and
carriage returns escaped, everything else as it is.

The subject is read straight from the certificate's DER (one OpenSSL has just verified), so no
X.509 library is needed on the handshake path. Pure: bytes in, a string out.
"""

from __future__ import annotations

__all__ = ["CertificateFormatError", "subject_name"]

# RFC 2253's keywords, by OID: Java writes only these by name.
_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# The string types Java renders as text (the tags `AVA.isDerString` accepts). Java turns their bytes
# into text as UTF-8 whatever the type says (a BMPString's UTF-16 comes out with a NUL before each
# ASCII letter, escaped as \00), and so does kqp, since the point is Java's string, not the right one.
_STRING_TAGS = frozenset({
    0x0C,   # UTF8String
    0x13,   # PrintableString
    0x14,   # T61String (TeletexString)
    0x16,   # IA5String
    0x1B,   # GeneralString
    0x1E,   # BMPString
})
_ESCAPED = frozenset(',=+<>#;"\\')
_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06


class CertificateFormatError(ValueError):
    """The bytes are not the DER certificate (or Name) they were said to be."""


def subject_name(certificate: bytes) -> str:
    """The subject of a DER certificate, as `X500Principal.getName()` writes it."""
    cert = _Reader(certificate).expect(_SEQUENCE)
    tbs = _Reader(cert).expect(_SEQUENCE)
    fields = _Reader(tbs)
    if fields.peek() == 0xA0:           # [0] version, present from v2 on
        fields.read()
    for _ in range(4):                  # serialNumber, signature, issuer, validity
        fields.read()
    return rfc2253(fields.expect(_SEQUENCE))


def rfc2253(name: bytes) -> str:
    """An X.501 Name's content (the inside of its SEQUENCE) as Java's RFC 2253 string."""
    rdns = []
    reader = _Reader(name)
    while not reader.done:
        rdn = _Reader(reader.expect(_SET))
        avas = []
        while not rdn.done:
            ava = _Reader(rdn.expect(_SEQUENCE))
            oid = _oid(ava.expect(_OID))
            tag, value, encoded = ava.read()
            avas.append(_attribute(oid, tag, value, encoded))
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def _attribute(oid: str, tag: int, value: bytes, encoded: bytes) -> str:
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{encoded.hex()}"
    return f"{keyword}={_escape(value.decode('utf-8', errors='replace'))}"


def _escape(text: str) -> str:
    chars = ["\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in text]
    lead = 0
    while lead < len(chars) and chars[lead] in (" ", "\r"):
        lead += 1
    trail = len(chars)
    while trail > lead and chars[trail - 1] in (" ", "\r"):
        trail -= 1
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(chars))


def _oid(content: bytes) -> str:
    if not content:
        raise CertificateFormatError("an empty OBJECT IDENTIFIER")
    first = content[0]
    arcs = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    value = 0
    for byte in content[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    return ".".join(map(str, arcs))


class _Reader:
    """Reads DER TLVs off a buffer, checking every length against what is left."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def done(self) -> bool:
        return self.pos >= len(self.data)

    def peek(self) -> int | None:
        return None if self.done else self.data[self.pos]

    def read(self) -> tuple[int, bytes, bytes]:
        """(tag, content, the whole TLV) of the next element."""
        start, data = self.pos, self.data
        if start + 2 > len(data):
            raise CertificateFormatError("truncated DER")
        tag, length, pos = data[start], data[start + 1], start + 2
        if tag & 0x1F == 0x1F:
            raise CertificateFormatError("multi-byte DER tags do not occur in certificate names")
        if length & 0x80:
            count = length & 0x7F
            if count == 0 or count > 4 or pos + count > len(data):
                raise CertificateFormatError("bad DER length")
            length = int.from_bytes(data[pos:pos + count], "big")
            pos += count
        end = pos + length
        if end > len(data):
            raise CertificateFormatError("DER length beyond the data")
        self.pos = end
        return tag, bytes(data[pos:end]), bytes(data[start:end])

    def expect(self, tag: int) -> bytes:
        got, content, _ = self.read()
        if got != tag:
            raise CertificateFormatError(f"expected DER tag 0x{tag:02x}, got 0x{got:02x}")
        return content
