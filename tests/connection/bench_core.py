"""CPU per request and response through the sans-io connection core (not collected by pytest).

The fast path is one client request in (`ClientData`) and its response back (`UpstreamData`) on a
connected core built on real parts (helpers.playbook), with the no-op observer and the real
handler-time clock (`time.perf_counter`, as the server injects it). Workloads: Produce v9 acks=1 and
Fetch v12, each without a quota, with one configured but never binding (a rate nobody reaches), with
`metrics.topic_bytes` (an observer that wants each frame's bytes per topic), and with the benchmark's
`kqp-metrics-quotas` (every quota type at every precedence level, never reached, and the Prometheus
observer) on a Spark-like shape: a 16 KiB batch, and a Fetch of two partitions of eight; Heartbeat v4, a
header-only API; then the benchmark's shapes, each frame arriving in 256 KiB reads as uvloop hands
them over: a Produce v9 request of 1 MB (`produce_v9_1mb_reads`) and a Fetch
v16 response of 12 MB, three partitions of four batches (`fetch_v16_12mb_reads`, the consume
workload: every read goes through the core, and the response through the address walk). Each
figure is CPU time (`time.process_time`) per request+response.

    python tests/connection/bench_core.py [--rounds N]     # this tree: medians of 8 (N) rounds
    python tests/connection/bench_core.py --against DIR    # DIR (another checkout with its own .venv)
                                                           # and this tree alternately, side by side

With ``--against``, each round runs this script once per tree, with that tree's interpreter and test
helpers (so both run the same workloads), alternately and in turns (ABBA), so both see the same
machine state; the table gives each tree's median, the ratio this tree / DIR of the medians, and of
the minima (on a loaded machine the steadier figure).
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__":   # tests/ of the tree being measured (--tests), for its helpers package
    _at = sys.argv.index("--tests") + 1 if "--tests" in sys.argv else 0
    sys.path.insert(0, sys.argv[_at] if _at else str(Path(__file__).resolve().parents[1]))

from helpers.playbook import connected_core, fetch_request, fetch_response, produce_frame, produce_response
from helpers.quota_frames import record_batch
from kafka.protocol.consumer import FetchResponse

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request
from kqp.proxy.bench.kqp_target import config_for
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.observability.metrics import PrometheusObserver

ITERATIONS, ROUNDS = 20_000, 8
READ = 256 * 1024   # what uvloop hands over per read
NOW = 100.0
FAR = 1e15   # a rate no exchange here comes near: the quota is configured, never binding
QUOTAS = {"entities": [{"client_id": "c", "producer_byte_rate": FAR, "consumer_byte_rate": FAR}]}


def heartbeat() -> tuple[bytes, bytes]:
    request = encode_request(ApiKey.Heartbeat, 4, 1, "c", group_id="g", generation_id=1, member_id="m",
                             group_instance_id=None)
    head = struct.pack(">i", 1) + b"\x00"                          # flexible response header
    body = struct.pack(">ih", 0, 0) + b"\x00"                      # throttle_time_ms, error_code, no tags
    return request, struct.pack(">i", len(head) + len(body)) + head + body


def big_fetch_response(version: int, correlation_id: int) -> bytes:
    """A Fetch response of about 12 MB: three partitions of four 1 MB batches (the consume workload's shape)."""
    records = b"".join(record_batch("f", 1000) for _ in range(4))
    partitions = [FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=p, error_code=0, high_watermark=1, last_stable_offset=1, log_start_offset=0,
        aborted_transactions=[], preferred_read_replica=-1, records=records) for p in range(3)]
    topic = {"topic_id": uuid.UUID(int=7)} if version >= 13 else {"topic": "t"}
    body = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(partitions=partitions, **topic)]).encode(version=version)
    head = struct.pack(">i", correlation_id) + (b"\x00" if version >= 12 else b"")
    return struct.pack(">i", len(head) + len(body)) + head + bytes(body)


def reads(frame: bytes) -> list[bytes]:
    return [frame[i:i + READ] for i in range(0, len(frame), READ)]


# quotas, request reads, response reads, iterations, the observer ("none", "topic_bytes", "metrics")
Workload = tuple[dict | None, list[bytes], list[bytes], int, str]
SPARK = "kqp-bench-produce"   # a client id the every-quota entries name at each level


def every_quota() -> dict:
    """The benchmark's `kqp-metrics-quotas` quotas, under the config file's default algorithm."""
    quotas = config_for("metrics-quotas", 0, "127.0.0.1:9092", 0.0)["quotas"]
    return {**quotas, "algorithm": "steady"}


def spark_fetch_response(version: int, correlation_id: int) -> bytes:
    """A Fetch response of two partitions of eight 16 KiB batches (the spark-consume workload's shape)."""
    records = b"".join(record_batch("f", 16) for _ in range(8))
    partitions = [FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=p, error_code=0, high_watermark=1, last_stable_offset=1, log_start_offset=0,
        aborted_transactions=[], preferred_read_replica=-1, records=records) for p in range(2)]
    body = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(topic="t", partitions=partitions)]).encode(version=version)
    head = struct.pack(">i", correlation_id) + b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + bytes(body)


class TopicBytes(ProxyObserver):
    """The no-op observer, but asking for every frame's bytes per topic (metrics.topic_bytes)."""

    wants_topics = True


def workloads() -> dict[str, Workload]:
    produce = ([produce_frame("t", 9, 1, "c", records=16, acks=1)], [produce_response(9, 1)])
    fetch = ([fetch_request(12, 1, "c")], [fetch_response(12, 1, records=16)])
    spark_produce = ([produce_frame("t", 9, 1, SPARK, records=16, acks=-1)], [produce_response(9, 1)])
    spark_fetch = ([fetch_request(12, 1, SPARK)], reads(spark_fetch_response(12, 1)))
    return {
        "produce_v9": (None, *produce, ITERATIONS, "none"),
        "produce_v9_quota": (QUOTAS, *produce, ITERATIONS, "none"),
        "produce_v9_topic_bytes": (None, *produce, ITERATIONS, "topic_bytes"),
        "produce_v9_every_quota": (every_quota(), *spark_produce, ITERATIONS, "metrics"),
        "fetch_v12": (None, *fetch, ITERATIONS, "none"),
        "fetch_v12_quota": (QUOTAS, *fetch, ITERATIONS, "none"),
        "fetch_v12_topic_bytes": (None, *fetch, ITERATIONS, "topic_bytes"),
        "fetch_v12_every_quota": (every_quota(), *spark_fetch, ITERATIONS, "metrics"),
        "heartbeat_v4": (None, *map(list, zip(heartbeat())), ITERATIONS, "none"),
        "produce_v9_1mb_reads": (None, reads(produce_frame("t", 9, 1, "c", records=1000, acks=1)),
                                 [produce_response(9, 1)], ITERATIONS // 20, "none"),
        "fetch_v16_12mb_reads": (None, [fetch_request(16, 1, "c")], reads(big_fetch_response(16, 1)),
                                 ITERATIONS // 200, "none"),
    }


def exchange(quotas: dict | None, request: list[bytes], response: list[bytes],
             observer: str = "none") -> Callable[[int], float]:
    """A timed loop of `n` request+response exchanges on one connected core: CPU seconds. The
    request and the response arrive as the reads listed."""
    clock = [NOW]
    observers = {"none": ProxyObserver, "topic_bytes": TopicBytes,
                 "metrics": lambda: PrometheusObserver(clock=lambda: clock[0], process_metrics=False)}
    core = connected_core(quotas, observer=observers[observer]())
    core.wiring.perf, core.wiring.cpu = time.perf_counter, time.thread_time   # as the server injects them
    first = [a for data in request for a in core.handle(ev.ClientData(NOW, data))]
    first += [a for data in response for a in core.handle(ev.UpstreamData(NOW, data))]
    sends = [a for a in first if isinstance(a, ev.Send)]
    assert [s.side for s in sends] == [ev.Side.UPSTREAM, ev.Side.CLIENT], first   # forwarded, answered
    handle, client_data, upstream_data = core.handle, ev.ClientData, ev.UpstreamData

    def run(n: int) -> float:
        t0 = time.process_time()
        for i in range(n):
            now = clock[0] = NOW + i * 1e-4
            for data in request:
                handle(client_data(now, data))
            for data in response:
                handle(upstream_data(now, data))
        return time.process_time() - t0

    return run


def once() -> dict[str, float]:
    """One round: microseconds of CPU per exchange, per workload."""
    out = {}
    for name, (quotas, request, response, iterations, observer) in workloads().items():
        run = exchange(quotas, request, response, observer)
        run(max(1, iterations // 10))   # warm-up
        out[name] = run(iterations) / iterations * 1e6
    return out


def table(columns: dict[str, list[dict[str, float]]]) -> str:
    names = list(next(iter(columns.values()))[0])
    heads = list(columns)
    lines = [f"{'us CPU per request+response':<28}" + "".join(f"{h:>14}" for h in heads)
             + ("  ratio median  ratio min" if len(heads) == 2 else "")]
    for name in names:
        medians = [statistics.median(r[name] for r in rounds) for rounds in columns.values()]
        minima = [min(r[name] for r in rounds) for rounds in columns.values()]
        row = f"{name:<28}" + "".join(f"{m:>14.2f}" for m in medians)
        if len(medians) == 2:
            row += f"{medians[1] / medians[0]:>14.3f}{minima[1] / minima[0]:>11.3f}"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", type=Path, help="another checkout (with .venv) to time alternately")
    parser.add_argument("--once", action="store_true", help="one round, as JSON (used by --against)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per tree (default {ROUNDS})")
    parser.add_argument("--tests", type=Path, help="the tests folder whose helpers to use (--once; default this one's)")
    args = parser.parse_args()
    if args.once:
        print(json.dumps(once()))
        return
    if args.against is None:
        print(table({"this tree": [once() for _ in range(args.rounds)]}))
        return
    here = Path(__file__).resolve().parents[2]
    trees = {args.against.name: args.against.resolve(), "this tree": here}
    columns: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for turn in range(args.rounds):
        for name, root in (list(trees.items()) if turn % 2 == 0 else reversed(trees.items())):
            done = subprocess.run([str(root / ".venv" / "bin" / "python"), __file__, "--once",
                                   "--tests", str(root / "tests")], check=True, capture_output=True, text=True,
                                  timeout=600)
            columns[name].append(json.loads(done.stdout))
    print(table(columns))


if __name__ == "__main__":
    main()
