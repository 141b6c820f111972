"""A client certificate's subject, rendered as Kafka's brokers render it (Java's X500Principal).

The hand-written expectations were each checked against Java 17's `X500Principal.getName()`; the
last tests ask Java again, over every name below, wherever a JDK is installed.
"""

from __future__ import annotations

import warnings

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID, ObjectIdentifier
from helpers.java_reference import JavaReference

from kqp.proxy.tls.x500_name import CertificateFormatError, rfc2253, subject_name

A, RDN = x509.NameAttribute, x509.RelativeDistinguishedName


def name(*rdns: x509.NameAttribute | x509.RelativeDistinguishedName) -> x509.Name:
    """A Name from first RDN to last, as it is encoded (RFC 2253 writes it back to front)."""
    return x509.Name([r if isinstance(r, RDN) else RDN([r]) for r in rdns])


def cn_in_acme(common_name: str) -> x509.Name:
    return name(A(NameOID.COUNTRY_NAME, "US"), A(NameOID.ORGANIZATION_NAME, "Acme"),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"), A(NameOID.COMMON_NAME, common_name))


def typed_cn(value: str, asn1_type: _ASN1Type) -> x509.Name:
    with warnings.catch_warnings():   # cryptography warns about the legacy string types
        warnings.simplefilter("ignore")
        return name(A(NameOID.COMMON_NAME, value, _type=asn1_type))


def rendered(n: x509.Name) -> str:
    der = n.public_bytes()
    assert der[0] == 0x30
    return rfc2253(der[2:] if der[1] < 0x80 else der[2 + (der[1] & 0x7F):])


CASES: list[tuple[x509.Name, str]] = [
    (cn_in_acme("alice"), "CN=alice,OU=eng,O=Acme,C=US"),
    # Escaped wherever they are, = and # included (RFC 4514 writers leave those two alone inside).
    (cn_in_acme("a,b"), r"CN=a\,b,OU=eng,O=Acme,C=US"),
    (cn_in_acme("a=b"), r"CN=a\=b,OU=eng,O=Acme,C=US"),
    (cn_in_acme("mid#dle"), r"CN=mid\#dle,OU=eng,O=Acme,C=US"),
    (cn_in_acme('x<y>z;"q"\\+'), r'CN=x\<y\>z\;\"q\"\\\+,OU=eng,O=Acme,C=US'),
    # Every leading and trailing space, and carriage return; a NUL as \00.
    (cn_in_acme("  two  "), r"CN=\ \ two\ \ ,OU=eng,O=Acme,C=US"),
    (cn_in_acme("\rcr\r"), "CN=\\\rcr\\\r,OU=eng,O=Acme,C=US"),
    (cn_in_acme("a\0b"), r"CN=a\00b,OU=eng,O=Acme,C=US"),
    # Anything else as it is, non-ASCII included.
    (cn_in_acme("under_score@x! é 日本"), "CN=under_score@x! é 日本,OU=eng,O=Acme,C=US"),
    # Only RFC 2253's keywords by name; other attributes as OID=#hex of their DER.
    (name(A(NameOID.COMMON_NAME, "alice"), A(NameOID.EMAIL_ADDRESS, "alice@example.com")),
     "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,CN=alice"),
    (name(A(NameOID.DOMAIN_COMPONENT, "com"), A(NameOID.DOMAIN_COMPONENT, "example"), A(NameOID.USER_ID, "u1"),
          A(NameOID.STREET_ADDRESS, "Main St"), A(NameOID.LOCALITY_NAME, "Town"),
          A(NameOID.STATE_OR_PROVINCE_NAME, "MD"), A(NameOID.SERIAL_NUMBER, "123")),
     "2.5.4.5=#1303313233,ST=MD,L=Town,STREET=Main St,UID=u1,DC=example,DC=com"),
    (name(A(ObjectIdentifier("1.2.3.4.5"), "x")), "1.2.3.4.5=#0c0178"),
    # A multi-valued RDN in its encoded order (DER sorts a SET by encoding).
    (name(RDN([A(NameOID.COMMON_NAME, "zed"), A(NameOID.USER_ID, "a1")])), "CN=zed+UID=a1"),
    # String types: Java reads the bytes of each as UTF-8, and writes the others as #hex.
    (typed_cn("Bob", _ASN1Type.PrintableString), "CN=Bob"),
    (typed_cn("Bob", _ASN1Type.IA5String), "CN=Bob"),
    (typed_cn("Bob", _ASN1Type.BMPString), r"CN=\00B\00o\00b"),
    (typed_cn("Bob", _ASN1Type.UniversalString), "CN=#1c0c000000420000006f00000062"),
    (typed_cn("Bob", _ASN1Type.VisibleString), "CN=#1a03426f62"),
    (x509.Name([]), ""),
]


@pytest.mark.parametrize(("subject", "expected"), CASES, ids=[expected or "empty" for _, expected in CASES])
def test_rendered_as_java_renders_it(subject: x509.Name, expected: str) -> None:
    assert rendered(subject) == expected


def test_the_subject_of_a_certificate() -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("alice@example.com", common_name="alice", organization_name="Acme",
                         organization_unit_name="eng")
    der = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).public_bytes(Encoding.DER)
    assert subject_name(der) == "CN=alice,OU=eng,O=Acme"


@pytest.mark.parametrize("garbage", [b"", b"\x30", b"\x30\x05\x30\x03\x02\x01", b"\x04\x00",
                                     b"\x30\x84\xff\xff\xff\xff"])
def test_garbage_is_a_format_error(garbage: bytes) -> None:
    with pytest.raises(CertificateFormatError):
        subject_name(garbage)


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> JavaReference:
    return JavaReference(tmp_path_factory.mktemp("java"))


def test_java_agrees(java: JavaReference) -> None:
    extra = [cn_in_acme(v) for v in ("#lead", " lead", "trail ", " ", "tab\there", "a'b(c)/d:e?f", "😀")]
    extra += [typed_cn("Jürgen", t) for t in (_ASN1Type.T61String, _ASN1Type.BMPString, _ASN1Type.UTF8String)]
    names = [n for n, _ in CASES] + extra
    assert [rendered(n) for n in names] == java.names([n.public_bytes() for n in names])
