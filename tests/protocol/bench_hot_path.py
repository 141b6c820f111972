"""Micro-benchmark of kqp.protocol's per-frame hot path (not collected by pytest; timing only).

Run ``python tests/protocol/bench_hot_path.py [package ...]``: each argument is an importable
package laid out like ``kqp.protocol`` (default: ``kqp.protocol``), so a saved copy of an older
protocol/ folder can be timed side by side with the current one (given last) in the same process and
machine state. Prints, per operation, the median and the minimum over several rounds (packages interleaved) of
the time per call; on a loaded machine the minimum is the steadier figure.

Frames are what the proxy meets most: a Produce v9 and v10 request carrying one 16 KB batch (16
records of 1 KB), their responses, and a 1 MB Fetch v16 response of 50 partitions (5 topics x 10
partitions, two 10 KB batches each). The operations are the ones ``kqp.proxy.connection.core`` runs
per read, per request and per response. The "in place" rows read a stream as the core's
``FrameReader`` reads a socket (into its buffers, whole frames cut, the rest owned). The "split" rows
read the same frames as the parts a socket would deliver them in (64 KB reads, starting mid-read),
without joining them; the others get the frame in one part, the common case, which must cost what it
did before split frames were read.
"""

from __future__ import annotations

import importlib
import itertools
import statistics
import struct
import sys
import timeit
import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

ROUNDS = 9
PRODUCE, FETCH = ApiKey.Produce, ApiKey.Fetch


def batch(n: int, size: int, offset: int = 0) -> bytes:
    builder = MemoryRecordsBuilder(2, 0, 1 << 22, offset=offset)
    for i in range(n):
        builder.append(1_700_000_000_000 + i, None, bytes([i & 0xFF]) * size)
    builder.close()
    return bytes(builder.buffer())


def request_frame(api_key: int, version: int, header_version: int, body: bytes) -> bytes:
    client = b"rdkafka"
    head = struct.pack(">hhih", api_key, version, 7, len(client)) + client + (b"\x00" if header_version == 2 else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body


def response_frame(header_version: int, body: bytes) -> bytes:
    head = struct.pack(">i", 7) + (b"\x00" if header_version == 1 else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body


def produce_request(version: int) -> bytes:
    part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch(16, 1000))
    topic = ProduceRequest.TopicProduceData(name="bench-topic", partition_data=[part])
    body = ProduceRequest(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[topic]).encode(version=version)
    return request_frame(PRODUCE, version, 2 if version >= 9 else 1, bytes(body))


def produce_response(version: int) -> bytes:
    part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    topic = ProduceResponse.TopicProduceResponse(name="bench-topic", partition_responses=[
        part(index=0, error_code=0, base_offset=1000, log_append_time_ms=-1, log_start_offset=0)])
    body = ProduceResponse(responses=[topic], throttle_time_ms=0).encode(version=version)
    return response_frame(1 if version >= 9 else 0, bytes(body))


def fetch_response(version: int = 16) -> bytes:
    data = FetchResponse.FetchableTopicResponse.PartitionData
    topics = []
    for t in range(5):
        partitions = [
            data(partition_index=p, error_code=0, high_watermark=10_000, last_stable_offset=10_000,
                 log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                 records=batch(10, 1000) + batch(10, 1000, offset=10))
            for p in range(10)
        ]  # fmt: skip
        topics.append(FetchResponse.FetchableTopicResponse(topic_id=uuid.UUID(int=t + 1), partitions=partitions))
    body = FetchResponse(throttle_time_ms=0, error_code=0, session_id=5, responses=topics).encode(version=version)
    return response_frame(1, bytes(body))


def reads(frame: bytes, size: int = 65536, first: int = 1000) -> tuple[memoryview, ...]:
    """``frame`` as a socket delivers it: a first read's tail of ``first`` bytes, then ``size``-byte reads."""
    view = memoryview(frame)
    cuts = [0, *range(first, len(frame), size), len(frame)]
    return tuple(view[a:b] for a, b in itertools.pairwise(cuts))


def read_in_place(frames: Any, stream: bytes, read: int) -> Callable[[], int]:
    """`stream` (whole frames) read by a `FrameReader` as the connection core reads it: each read into
    `get_buffer` (at most `read` bytes), `received(nbytes)` unless `took` it, the whole frames cut, what is
    left owned, as the edge and the core do. (An older package without it shows "-".)"""
    reader = frames.FrameReader(100 << 20) if hasattr(frames, "FrameReader") else None
    view = memoryview(stream)

    def run() -> int:
        pos = cut = 0
        while pos < len(view):
            buf = reader.get_buffer(read)
            n = min(len(buf), read, len(view) - pos)
            buf[:n] = view[pos : pos + n]
            del buf
            pos += n
            if reader.took(n):
                continue
            reader.received(n)
            while reader.next_frame_parts(4096) is not None:
                cut += 1
            if reader.buffered:
                reader.own()
        return cut

    return run


def cases(pkg: str) -> dict[str, Callable[[], Any]]:
    def mod(name: str) -> Any:
        return importlib.import_module(f"{pkg}.{name}")

    frames, headers, produce = mod("frames"), mod("headers"), mod("produce")
    fetch, addresses, throttle = mod("fetch"), mod("addresses"), mod("throttle_field")
    p9, p10 = produce_request(9), produce_request(10)
    r9, r10 = memoryview(produce_response(9)), memoryview(produce_response(10))
    f16 = memoryview(fetch_response(16))
    assert len(f16) > 1_000_000
    p9v = memoryview(p9)
    hdr = headers.parse_request_header(p9v)
    off9 = hdr.body_offset
    off10 = headers.parse_request_header(memoryview(p10)).body_offset
    f_off = headers.response_body_offset(FETCH, 16, f16)
    r10_off = headers.response_body_offset(PRODUCE, 10, r10)

    def mapper(node: int, host: str, port: int) -> tuple[str, int]:
        return "127.0.0.1", 19092 + node

    reader = frames.FrameReader(100 << 20) if hasattr(frames, "FrameReader") else None

    def decode_one() -> Any:
        reader.received(p9)
        frame = reader.next_frame()
        reader.next_frame()
        return frame

    p10v = memoryview(p10)
    p9_split = reads(p9, size=8192, first=300)  # a 16 KB request over a few reads
    f16_split = reads(bytes(f16))
    counts_type = importlib.import_module(f"{pkg}.records").RecordCounts
    return {
        "FrameReader received+next_frame x2 (16 KB)": decode_one,
        # 64 KiB of 1 KB frames per read (one cut by each read's end); a 1 MB frame read 64 KiB at a time.
        "FrameReader in place: 1 KB frames, 64 KiB reads (x1000)":
            read_in_place(frames, request_frame(PRODUCE, 9, 2, bytes(1000)) * 1000, 65536),
        "FrameReader in place: 1 MB frame, 64 KiB reads": read_in_place(frames, bytes(f16), 65536),
        "parse_request_header (Produce v9)": lambda: headers.parse_request_header(p9v),
        "produce_acks v9 (incl. body slice)": lambda: produce.produce_acks(9, p9v[off9:]),
        "produce_acks v10 (incl. body slice)": lambda: produce.produce_acks(10, p10v[off10:]),
        "produce_request_counts v9": lambda: produce.produce_request_counts(9, p9v[off9:]),
        "produce_request_counts v10": lambda: produce.produce_request_counts(10, p10v[off10:]),
        "produce_request_counts_parts v9 (1 part)": lambda: produce.produce_request_counts_parts(9, (p9v,), off9),
        "produce_request_counts_parts v9 (split)": lambda: produce.produce_request_counts_parts(9, p9_split, off9),
        "response_correlation_id": lambda: headers.response_correlation_id(r9),
        "response_body_offset (Produce v9)": lambda: headers.response_body_offset(PRODUCE, 9, r9),
        "response_body_offset (Fetch v16)": lambda: headers.response_body_offset(FETCH, 16, f16),
        "may_carry_addresses (Fetch v16)": lambda: addresses.may_carry_addresses(FETCH, 16),
        "rewrite_addresses Produce v10 resp": lambda: addresses.rewrite_addresses(PRODUCE, 10, r10, r10_off, mapper),
        "rewrite_addresses Fetch v16 1MB/50p": lambda: addresses.rewrite_addresses(FETCH, 16, f16, f_off, mapper),
        "rewrite_addresses_parts Fetch v16 (1 part)":
            lambda: addresses.rewrite_addresses_parts(FETCH, 16, (f16,), f_off, mapper, counts_type()),
        "rewrite_addresses_parts Fetch v16 (split)":
            lambda: addresses.rewrite_addresses_parts(FETCH, 16, f16_split, f_off, mapper, counts_type()),
        "join Fetch v16 (what split costs without)": lambda: b"".join(f16_split),
        "fetch_response_counts v16 1MB/50p": lambda: fetch.fetch_response_counts(16, f16[f_off:]),
        "fetch_response_counts_parts v16 (split)": lambda: fetch.fetch_response_counts_parts(16, f16_split, f_off),
        "throttle_patch_parts Produce v9 (walk)": lambda: throttle.throttle_patch_parts(PRODUCE, 9, (r9,), 9, 500),
        "throttle_patch_parts Fetch v16 (first)": lambda: throttle.throttle_patch_parts(FETCH, 16, (f16,), f_off, 500),
        "throttle_patch_parts Fetch v16 (split)":
            lambda: throttle.throttle_patch_parts(FETCH, 16, f16_split, f_off, 500),
    }


def _runs(case: Callable[[], Any]) -> bool:
    try:
        case()
    except Exception:  # an older package: the last one given is the one under test, and must run
        return False
    return True


def main(packages: list[str]) -> None:
    tables = {pkg: cases(pkg) for pkg in packages}
    names = list(next(iter(tables.values())))
    width = max(map(len, names))
    print(f"{'operation':{width}}  " + "  ".join(f"{p[-18:]:>18}" for p in packages) + "   (ns/call: median / min)")
    for name in names:
        # Rounds of the packages interleaved, so load from other processes hits them alike. An
        # operation an older package lacks, or has with another signature, is shown as "-" for it.
        present = [p for p in packages[:-1] if _runs(tables[p][name])] + packages[-1:]
        timers = [timeit.Timer(tables[p][name]) for p in present]
        number = max(1, timers[0].autorange()[0] // 4)
        samples: dict[str, list[float]] = {p: [] for p in present}
        for _ in range(ROUNDS):
            for p, timer in zip(present, timers, strict=True):
                samples[p].append(timer.timeit(number) / number * 1e9)
        cells = (f"{statistics.median(samples[p]):,.0f} / {min(samples[p]):,.0f}" if p in samples else "-"
                 for p in packages)
        print(f"{name:{width}}  " + "  ".join(f"{c:>18}" for c in cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["kqp.protocol"])
