"""RecordCounts.add_from against record data built by kafka-python's own record builders.

Every magic (0, 1, 2) and every codec kafka-python can write here (none and gzip always, lz4 and
zstd when their libraries are installed): counts must equal what was appended for magic 2, and
follow Kafka's shallow view for magic 0/1 (one record and one batch per outer message, a
compressed wrapper included). kafka-python's own shallow iterator (MemoryRecords.next_batch)
is the second opinion on batch boundaries.
"""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import pytest
from kafka import codec
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kqp.protocol.records import BodyError, RecordCounts

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
_AVAILABLE = {NONE: True, GZIP: codec.has_gzip(), SNAPPY: codec.has_snappy(), LZ4: codec.has_lz4(),
              ZSTD: codec.has_zstd()}  # fmt: skip
CODECS = [c for c, ok in _AVAILABLE.items() if ok]


def build(magic: int, compression: int, n: int, *, offset: int = 0) -> bytes:
    builder = MemoryRecordsBuilder(magic, compression, 1 << 20, offset=offset)
    for i in range(n):
        assert builder.append(1_700_000_000_000 + i, b"key%d" % i, b"value" * (i % 7)) is not None
    builder.close()
    return bytes(builder.buffer())


def count_records(data: bytes | memoryview) -> RecordCounts:
    """The counts of one records field, as the body walk hands it to ``add_from``."""
    counts = RecordCounts()
    assert counts.add_from(data, 0, len(data)) <= len(data)
    return counts


def kafka_python_counts(data: bytes) -> RecordCounts:
    """The same shallow count through kafka-python's batch iterator."""
    records = MemoryRecords(data)
    counts = RecordCounts()
    while (batch := records.next_batch()) is not None:
        counts.batches += 1
        counts.records += batch.records_count if batch.magic == 2 else 1
    return counts


@pytest.mark.parametrize("compression", CODECS)
@pytest.mark.parametrize("n", [1, 2, 17])
def test_magic2_counts_appended_records(compression: int, n: int) -> None:
    data = build(2, compression, n)
    assert count_records(memoryview(data)) == RecordCounts(records=n, batches=1)
    assert count_records(data) == kafka_python_counts(data)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_uncompressed_counts_one_record_per_message(magic: int) -> None:
    data = build(magic, NONE, 5)
    assert count_records(memoryview(data)) == RecordCounts(records=5, batches=5)
    assert count_records(data) == kafka_python_counts(data)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", [c for c in CODECS if c != NONE and c != ZSTD])
def test_legacy_compressed_wrapper_counts_as_one(magic: int, compression: int) -> None:
    # Shallow iteration, as Kafka's: the wrapper is one batch, its inner messages are never
    # decompressed, so 6 appended records count as 1.
    data = build(magic, compression, 6)
    assert count_records(memoryview(data)) == RecordCounts(records=1, batches=1)
    assert count_records(data) == kafka_python_counts(data)


def test_concatenated_batches_of_mixed_sizes() -> None:
    parts = [build(2, NONE, 3), build(2, GZIP, 10, offset=3), build(2, NONE, 1, offset=13)]
    data = b"".join(parts)
    assert count_records(memoryview(data)) == RecordCounts(records=14, batches=3)
    assert count_records(data) == kafka_python_counts(data)


def test_v2_batches_around_a_legacy_message_and_a_partial_tail() -> None:
    # The usual magic 2 batch is stepped through by a loop of its own; a legacy message, a short
    # tail or a cut batch hands over to the general one, and the v2 batches after are counted still.
    parts = [build(2, NONE, 3), build(2, NONE, 5, offset=3), build(1, NONE, 1, offset=8),
             build(2, GZIP, 4, offset=9), build(0, NONE, 2, offset=13)]
    data = b"".join(parts)
    assert count_records(memoryview(data)) == RecordCounts(records=15, batches=6)
    assert count_records(data) == kafka_python_counts(data)
    cut = b"".join(parts[:2]) + parts[3][:-1]   # the last v2 batch runs past the field's end
    counts = RecordCounts()
    assert counts.add_from(cut, 0, len(cut)) == len(parts[0]) + len(parts[1])
    assert counts == RecordCounts(records=8, batches=2)


def test_empty_records() -> None:
    assert count_records(memoryview(b"")) == RecordCounts(0, 0)


def test_every_truncation_ignores_only_the_partial_trailing_batch() -> None:
    first, second = build(2, NONE, 4), build(2, GZIP, 9, offset=4)
    data = first + second
    for cut in range(len(data) + 1):
        # The trailing partial batch a Fetch response may end with is dropped, never an error.
        expected = RecordCounts(4, 1) if cut >= len(first) else RecordCounts(0, 0)
        if cut == len(data):
            expected = RecordCounts(13, 2)
        assert count_records(memoryview(data)[:cut]) == expected, cut


def test_size_below_minimum_is_corrupt() -> None:
    data = bytearray(build(2, NONE, 2))
    struct.pack_into(">i", data, 8, 13)  # smaller than any legal message (14)
    with pytest.raises(BodyError):
        count_records(memoryview(data))


def test_magic2_size_below_batch_header_is_corrupt() -> None:
    data = bytearray(build(2, NONE, 2))
    struct.pack_into(">i", data, 8, 40)  # legal for magic 0, too small for a v2 header
    with pytest.raises(BodyError):
        count_records(memoryview(data[: 12 + 40]))


def test_unknown_magic_is_corrupt() -> None:
    data = bytearray(build(2, NONE, 2))
    data[16] = 3
    with pytest.raises(BodyError):
        count_records(memoryview(data))


def test_negative_record_count_is_corrupt() -> None:
    data = bytearray(build(2, NONE, 2))
    struct.pack_into(">i", data, 57, -1)
    with pytest.raises(BodyError):
        count_records(memoryview(data))


def test_body_error_is_a_value_error() -> None:
    assert issubclass(BodyError, ValueError)


@pytest.mark.parametrize("module", ["records", "produce", "fetch", "mutations"])
def test_body_readers_are_sans_io(module: str) -> None:
    source = Path(__file__).parents[2] / "protocol" / f"{module}.py"
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.add(node.module.split(".")[0])
    assert not imported & {"asyncio", "socket", "time", "selectors", "uvloop"}, imported
