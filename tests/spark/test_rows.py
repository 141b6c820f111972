"""Rows to Kafka messages with the built-in sink's column contract, without Spark."""

from __future__ import annotations

import pickle

import pytest

from kqp.spark.rows import HEADERS_TYPE, MessageEncoder, SinkDataError, SinkSchemaError, arrow_rows


def encoder(fields: list[tuple[str, str]], topic: str | None = None) -> MessageEncoder:
    return MessageEncoder.for_schema(fields, topic)


def test_string_and_binary_columns_become_bytes() -> None:
    enc = encoder([("key", "string"), ("value", "binary"), ("other", "int")], "t")
    assert enc.encode(("k1", bytearray(b"\x00\xff"), 7)) == ("t", b"k1", b"\x00\xff", None, None)
    # Non-ASCII strings are UTF-8, as Spark's cast to binary.
    assert enc.encode(("é", b"v", 0))[1] == "é".encode()


def test_null_key_and_null_value_tombstone_pass_through() -> None:
    enc = encoder([("key", "binary"), ("value", "string")], "t")
    assert enc.encode((None, None)) == ("t", None, None, None, None)


def test_topic_column_is_used_unless_the_option_overrides_it() -> None:
    fields = [("topic", "string"), ("value", "string")]
    assert encoder(fields).encode(("a", "v"))[0] == "a"
    assert encoder(fields, "opt").encode(("a", "v"))[0] == "opt"


def test_null_topic_without_option_is_a_data_error() -> None:
    with pytest.raises(SinkDataError, match="null topic"):
        encoder([("topic", "string"), ("value", "string")]).encode((None, "v"))


def test_headers_and_partition_columns() -> None:
    enc = encoder([("value", "string"), ("headers", HEADERS_TYPE), ("partition", "int")], "t")
    # Arrow gives header structs as dicts; Spark Rows also index by name.
    row = ("v", [{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}], 3)
    assert enc.encode(row) == ("t", None, b"v", [("h1", b"x"), ("h2", None)], 3)
    assert enc.encode(("v", [], None)) == ("t", None, b"v", None, None)
    assert enc.encode(("v", None, None))[3] is None


@pytest.mark.parametrize(
    ("fields", "topic", "message"),
    [
        ([("key", "string")], "t", "required column 'value' not found"),
        ([("value", "int")], "t", "column 'value' must be string or binary, got int"),
        ([("value", "string"), ("key", "bigint")], "t", "column 'key' must be string or binary, got bigint"),
        ([("value", "string"), ("topic", "binary")], None, "column 'topic' must be string, got binary"),
        ([("value", "string")], None, "no 'topic' column and no 'topic' option"),
        ([("value", "string"), ("partition", "bigint")], "t", "column 'partition' must be int, got bigint"),
        ([("value", "string"), ("headers", "array<string>")], "t", "column 'headers' must be array<struct"),
    ],
)
def test_schema_errors_name_the_column(fields: list[tuple[str, str]], topic: str | None, message: str) -> None:
    with pytest.raises(SinkSchemaError, match=message.replace("(", r"\(").replace("[", r"\[")):
        encoder(fields, topic)


def test_unsupported_python_value_is_refused() -> None:
    with pytest.raises(SinkDataError, match="cannot write a int"):
        encoder([("value", "string")], "t").encode((5,))


def test_encoder_pickles_and_encode_all_streams() -> None:
    enc = pickle.loads(pickle.dumps(encoder([("key", "string"), ("value", "string")], "t")))
    assert list(enc.encode_all([("a", "1"), ("b", "2")])) == [
        ("t", b"a", b"1", None, None),
        ("t", b"b", b"2", None, None),
    ]


def test_arrow_rows_walks_batches_column_wise() -> None:
    pa = pytest.importorskip("pyarrow")
    batches = [
        pa.record_batch([pa.array(["a", "b"]), pa.array([b"1", b"2"])], names=["key", "value"]),
        pa.record_batch([pa.array(["c"]), pa.array([None], pa.binary())], names=["key", "value"]),
    ]
    assert list(arrow_rows(batches)) == [("a", b"1"), ("b", b"2"), ("c", None)]
