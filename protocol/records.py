"""Kafka record data read shallowly: how many records and batches a ``records`` field holds.

kqp charges record and batch counts (KIP-731) for Produce requests and Fetch responses, so this
runs per partition on the hot path. It never decompresses and never copies record bytes: it steps
from batch to batch by each batch's size field and reads only the fixed RecordBatch header fields
it needs with ``struct.unpack_from`` on the caller's buffer.

:meth:`RecordCounts.add_from` is shaped as the schema walker's ``on_records`` callback, so one
walk both skips the body and counts its records; ``add_from_parts`` counts a split frame in place,
copying at most a batch header that a part boundary cuts. ``BodyError`` is re-exported from the
walker.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .parts import SplitFrame
from .walker import BodyError, Buffer, MessageWalker

__all__ = ["BodyError", "RecordCounts", "count_body_records", "count_body_records_parts"]

# Every record format (magic 0, 1 and 2) starts with offset int64 and a size int32 counting the
# bytes after it, and keeps its magic byte at offset 16; Kafka's ByteBufferLogInputStream relies
# on the same layout to step from batch to batch without knowing the format.
_LOG_OVERHEAD = 12
_HEADER_UP_TO_MAGIC = 17
_LEGACY_RECORD_OVERHEAD_V0 = 14  # smallest legal size field of a magic 0 message
_BATCH_OVERHEAD_V2 = 61  # a magic 2 RecordBatch header, up to and including recordsCount
_MIN_SIZE_V2 = _BATCH_OVERHEAD_V2 - _LOG_OVERHEAD  # smallest legal size field of a magic 2 batch
# Read at offset 8: size, (partition leader epoch skipped), magic; then, when a whole v2 header is
# there, also recordsCount at offset 57: one unpack per batch in the common case.
_SIZE_MAGIC = struct.Struct(">i4xb").unpack_from
_SIZE_MAGIC_COUNT = struct.Struct(">i4xb40xi").unpack_from


def _batch_records(size: int, magic: int, count: int) -> int:
    """The records one whole batch counts for; BodyError for a header no legal batch has.

    ``count`` is the v2 recordsCount, or -1 when it was not read (a batch shorter than a v2 header).
    """
    if magic == 2:
        if size < _MIN_SIZE_V2:
            raise BodyError(f"record batch size {size} is below the magic 2 header size")
        if count < 0:
            raise BodyError(f"record batch claims {count} records")
        return count
    if magic == 0 or magic == 1:
        # A magic 0/1 message set has no record count. Kafka's shallow view treats each outer
        # message as one batch (AbstractLegacyRecordBatch) whose count is unknown (countOrNull()
        # is null) until a compressed wrapper is decompressed, which kqp never does: an
        # uncompressed message is exactly one record, a compressed wrapper is counted as one
        # record too, an undercount only pre-0.11 clients can cause.
        return 1
    raise BodyError(f"unknown record magic {magic}")


@dataclass(slots=True)
class RecordCounts:
    records: int = 0
    batches: int = 0

    def add_from(self, buf: Buffer, pos: int, end: int) -> int:
        """Add the records and batches of ``buf[pos:end]`` (one ``records`` field) to the counts.

        Mirrors Kafka's shallow batch iteration (ByteBufferLogInputStream.nextBatch): fewer than
        17 bytes left, or a batch running past the end, is a partial trailing batch (a Fetch
        response may be cut at fetch.max.bytes / partition max bytes) and ends the walk quietly;
        an impossible size or magic is corruption. Returns where it stopped: ``end``, or the start
        of that partial batch.
        """
        records = batches = 0
        # The usual batch, a whole magic 2 header in reach, in a loop of its own (a Fetch response
        # of 16 KiB batches steps through 64 of them per MB); anything else falls to the loop below.
        unpack, last_header = _SIZE_MAGIC_COUNT, end - _BATCH_OVERHEAD_V2
        while pos <= last_header:
            size, magic, count = unpack(buf, pos + 8)
            if magic != 2 or count < 0 or size < _MIN_SIZE_V2 or pos + _LOG_OVERHEAD + size > end:
                break
            records += count
            batches += 1
            pos += _LOG_OVERHEAD + size
        while end - pos >= _HEADER_UP_TO_MAGIC:
            if end - pos >= _BATCH_OVERHEAD_V2:
                size, magic, count = _SIZE_MAGIC_COUNT(buf, pos + 8)
            else:  # only a legacy message, or a partial trailing batch, can be this short
                size, magic = _SIZE_MAGIC(buf, pos + 8)
                count = -1
            if size < _LEGACY_RECORD_OVERHEAD_V0:
                raise BodyError(f"record batch size {size} is below the minimum")
            batch_end = pos + _LOG_OVERHEAD + size
            if batch_end > end:
                break
            if magic == 2 and count >= 0 and size >= _MIN_SIZE_V2:  # the usual batch, checked inline
                records += count
            else:
                records += _batch_records(size, magic, count)
            batches += 1
            pos = batch_end
        self.records += records
        self.batches += batches
        return pos

    def add_from_parts(self, frame: SplitFrame, pos: int, end: int) -> None:
        """:meth:`add_from` for bytes ``pos`` up to ``end`` of a split frame, as if it were joined.

        Whole batches inside a part are counted in place by ``add_from``; a batch that runs across
        a part boundary has its header read in place too, or from a window (a copy of at most 61
        bytes) when the boundary cuts the header itself, and its records are skipped by its size.
        """
        while end - pos >= _HEADER_UP_TO_MAGIC:
            part, base = frame.at(pos)
            stop = base + len(part)
            if end <= stop:
                self.add_from(part, pos - base, end - base)
                return
            pos = base + self.add_from(part, pos - base, stop - base)
            if pos == stop or end - pos < _HEADER_UP_TO_MAGIC:
                continue  # the part ended at a batch boundary (or the field has no whole header left)
            # The batch at pos runs past this part.
            need = _BATCH_OVERHEAD_V2 if end - pos >= _BATCH_OVERHEAD_V2 else _HEADER_UP_TO_MAGIC
            head, start = (part, base) if pos + need <= stop else frame.window(pos, need)
            if need == _BATCH_OVERHEAD_V2:
                size, magic, count = _SIZE_MAGIC_COUNT(head, pos - start + 8)
            else:
                size, magic = _SIZE_MAGIC(head, pos - start + 8)
                count = -1
            if size < _LEGACY_RECORD_OVERHEAD_V0:
                raise BodyError(f"record batch size {size} is below the minimum")
            batch_end = pos + _LOG_OVERHEAD + size
            if batch_end > end:
                return
            self.records += _batch_records(size, magic, count)
            self.batches += 1
            pos = batch_end


def count_body_records(walkers: dict[int, MessageWalker], message: str, api_version: int,
                       body: Buffer) -> RecordCounts:
    """Records and record batches across every ``records`` field of a message body, in one walk."""
    walker = walkers.get(api_version)
    if walker is None:
        raise BodyError(f"{message} has no version {api_version}")
    counts = RecordCounts()
    walker.body_end(body, 0, counts.add_from)
    return counts


def count_body_records_parts(walkers: dict[int, MessageWalker], message: str, api_version: int,
                             frame: SplitFrame, body_offset: int) -> RecordCounts:
    """:func:`count_body_records` for a split frame whose body starts at ``body_offset``."""
    walker = walkers.get(api_version)
    if walker is None:
        raise BodyError(f"{message} has no version {api_version}")
    counts = RecordCounts()
    walker.body_end_parts(frame, body_offset, counts)
    return counts
