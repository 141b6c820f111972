"""Turning a DataFrame's rows into Kafka messages, with the built-in Kafka sink's column contract.

Spark's built-in sink reads the columns `value` (string or binary, required), `key`, `topic`
(required without the `topic` option, which overrides it), `headers`
(`array<struct<key:string,value:binary>>`) and `partition` (int) by exact name and checks their
types before any task starts; kqp's sink keeps that contract (deploy/spark/README.md has the
table), so a job moves between the two without touching its DataFrame. Other columns are ignored;
strings are written as UTF-8, as the built-in sink casts them.

The schema is described by `(name, simpleString)` pairs so this module never imports pyspark:
it is checked on the driver, pickled to the executors, and unit-tested on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

# (topic, key, value, headers, partition): the arguments of one Producer.produce call.
Message = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int | None]

HEADERS_TYPE = "array<struct<key:string,value:binary>>"
BYTES_TYPES = ("string", "binary")


class SinkSchemaError(ValueError):
    """The DataFrame cannot be written to Kafka as it is; str() names the column."""


class SinkDataError(ValueError):
    """A row cannot be written (a null topic with no `topic` option)."""


@dataclass(frozen=True, slots=True)
class MessageEncoder:
    """Column positions, found once on the driver, and the per-row conversion."""

    value_index: int
    key_index: int | None = None
    topic_index: int | None = None
    headers_index: int | None = None
    partition_index: int | None = None
    default_topic: str | None = None

    @classmethod
    def for_schema(cls, fields: Sequence[tuple[str, str]], default_topic: str | None) -> MessageEncoder:
        """Check the columns as the built-in sink does; raise SinkSchemaError naming the culprit."""
        types = {name: (index, type_) for index, (name, type_) in enumerate(fields)}

        def column(name: str, allowed: Sequence[str], required: bool = False) -> int | None:
            if name not in types:
                if required:
                    raise SinkSchemaError(f"required column {name!r} not found (columns: {list(types)})")
                return None
            index, type_ = types[name]
            if type_ not in allowed:
                expected = " or ".join(allowed)
                raise SinkSchemaError(f"column {name!r} must be {expected}, got {type_}")
            return index

        value_index = column("value", BYTES_TYPES, required=True)
        assert value_index is not None  # required=True raised otherwise
        topic_index = column("topic", ("string",))
        if topic_index is None and default_topic is None:
            raise SinkSchemaError("no 'topic' column and no 'topic' option: set one of them")
        return cls(
            value_index=value_index,
            key_index=column("key", BYTES_TYPES),
            # The option wins over the column, as in the built-in sink.
            topic_index=None if default_topic is not None else topic_index,
            headers_index=column("headers", (HEADERS_TYPE,)),
            partition_index=column("partition", ("int",)),
            default_topic=default_topic,
        )

    def encode(self, row: Sequence[object]) -> Message:
        """One row (a Row or a tuple in schema order) as produce() arguments."""
        if self.topic_index is None:
            topic = self.default_topic
        else:
            topic = row[self.topic_index]  # type: ignore[assignment]
        if topic is None:
            raise SinkDataError("null topic in the data: set the 'topic' option for a default topic")
        key = None if self.key_index is None else _as_bytes(row[self.key_index])
        headers = None
        if self.headers_index is not None:
            raw = row[self.headers_index]
            if raw:
                # Arrow gives dicts, Spark Rows index by name too: h["key"] works for both.
                headers = [(h["key"], _as_bytes(h["value"])) for h in raw]  # type: ignore[index, attr-defined]
        partition = None if self.partition_index is None else row[self.partition_index]
        return (str(topic), key, _as_bytes(row[self.value_index]), headers, partition)  # type: ignore[return-value]

    def encode_all(self, rows: Iterable[Sequence[object]]) -> Iterator[Message]:
        encode = self.encode
        for row in rows:
            yield encode(row)


def _as_bytes(value: object) -> bytes | None:
    # librdkafka takes str or read-only bytes; Spark Rows carry binary as bytearray.
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise SinkDataError(f"cannot write a {type(value).__name__} as Kafka bytes")


def arrow_rows(batches: Iterable[object]) -> Iterator[tuple[object, ...]]:
    """Rows of pyarrow RecordBatches as tuples in schema order, one column conversion per batch."""
    for batch in batches:
        columns = [column.to_pylist() for column in batch.columns]  # type: ignore[attr-defined]
        yield from zip(*columns, strict=True)
