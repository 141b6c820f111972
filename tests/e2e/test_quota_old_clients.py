"""KIP-219 with a real pre-KIP-219 client: kafka-python 2.x speaking Kafka 0.11's or 0.10's versions.

The incident behind this file: a Kafka-0.11-era producer (Produce v3) at a 100 kB/s quota with a
5 s request timeout got 1247 timeouts in 48 s, because kqp held old-version responses for the
throttle. A broker since KIP-219 answers every version at once and mutes the channel; a client
that does not back off by itself (Produce v3 predates shouldClientThrottle, v6+) then finds its
next request waiting in the muted socket, never a response overdue. These tests run such a
client for real: kafka-python 2.x pinned to `api_version=(0, 11)` (helpers.old_kafka_python; it
records throttle_time_ms but only backs off from (2, 0) on), through client tap -> `kqp run` ->
upstream tap -> one-broker mock cluster (helpers.quota_path).

Pinned to `(0, 10)` the same client speaks versions Kafka 4 dropped and a Kafka 3.x upstream
(and librdkafka's mock, which advertises Produce v0-v10 and Fetch v0-v16) still serves: Produce v2
with magic 1 message sets, Fetch v2 (no response-level max_bytes to cap, 32 kB per partition),
and ListOffsets v0, which kqp forwards on its header alone. kqp advertises those versions and
meters them with layouts from Kafka 3.9's definitions (`kqp.protocol.kafka39`); a magic 1 message
counts as one record, as Kafka's shallow iteration counts it.

Each asserts: no request timed out and no error (request.timeout.ms 5 s, retries off), every
message reached the upstream exactly once, the client really sent the pinned release's versions
(read on the upstream tap), and throttling really happened: responses carried throttle_time_ms
(Produce v1+ and Fetch v1+ have the field), no request reached the upstream while its connection
was muted, and the rate the upstream saw after the first burst is within 20% of the quota.

Kafka's arithmetic, 100 kB/s with 0.2 s x 11 windows: a fresh sensor counts (11 - 1) x 0.2 s =
2 s of history, so the first 200 kB pass at once; after that the upstream sees the quota. 1000
messages of 1 kB are ~1.05 MB on the wire, so ~8.5 s at the quota after the burst: the first
span (2.2 s) is skipped and the slope judged over ~6 s, almost three spans. Each throttle is
X = (O - T) / T x W with O measured over the whole span, so it swings with the sawtooth (tens of
ms to under a second); on average five pipelined 16 kB requests are 80 kB / 100 kB/s = 0.8 s of
quota, how long the last of them waits in the muted socket: far from the 5 s timeout.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import old_kafka_python
from helpers.names import unique_topic
from helpers.quota_analysis import (
    Event,
    cumulative_slope,
    fetch_response_events,
    mute_report,
    request_events,
)
from helpers.quota_clients import preload, read_partition
from helpers.quota_path import QuotaPath, open_quota_path, quota_upstream
from helpers.topics import ensure_topic
from helpers.wire_tap import WireTap
from kafka.protocol.api_key import ApiKey
from upstreams.launch import Upstream

pytestmark = pytest.mark.e2e

QUOTA = 100_000                  # bytes/s
WINDOWS = {"window_size_seconds": 0.2, "window_count": 11}
SPAN = WINDOWS["window_size_seconds"] * WINDOWS["window_count"]
MESSAGES = 1000                  # of 1 kB: ~8 s at the quota after the 200 kB burst (docstring)
RATE_TOLERANCE = 0.20
# The newest version each release knew of each API such a client uses (Kafka's protocol guide).
KAFKA_VERSIONS = {
    (0, 11): {ApiKey.Produce: 3, ApiKey.Fetch: 5, ApiKey.ListOffsets: 2, ApiKey.Metadata: 4,
              ApiKey.OffsetCommit: 3, ApiKey.OffsetFetch: 3, ApiKey.FindCoordinator: 1, ApiKey.ApiVersions: 1},
    (0, 10): {ApiKey.Produce: 2, ApiKey.Fetch: 2, ApiKey.ListOffsets: 0, ApiKey.Metadata: 1,
              ApiKey.OffsetCommit: 2, ApiKey.OffsetFetch: 1, ApiKey.FindCoordinator: 0, ApiKey.ApiVersions: 0},
}
RELEASES = pytest.mark.parametrize("release", sorted(KAFKA_VERSIONS), ids=lambda r: "kafka-" + ".".join(map(str, r)))

OpenPath = Callable[..., QuotaPath]


@pytest.fixture(scope="session")
def kafka_python2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a session-wide virtual environment holding kafka-python 2.x."""
    try:
        return old_kafka_python.build(tmp_path_factory.mktemp("kafka-python2") / "venv")
    except old_kafka_python.IndexUnreachable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with quota_upstream(tmp_path_factory.mktemp("quota-old-clients")) as bootstrap:
        yield bootstrap


@pytest.fixture
def quota_path(kqp: Any, upstream: Upstream) -> Iterator[OpenPath]:
    with contextlib.ExitStack() as stack:
        yield lambda quotas, **config: open_quota_path(stack, kqp, upstream, quotas, **config)


def assert_no_timeout_no_error(report: dict[str, Any], client_tap: WireTap, mode: str) -> None:
    assert not report["errors"], f"kafka-python 2.x {mode}: errors {report['errors'][:5]}"
    assert not report["timeouts"], \
        f"kafka-python 2.x {mode}: {len(report['timeouts'])} request timeouts, e.g. {report['timeouts'][:3]}"
    assert not report["timeout_lines"], f"kafka-python 2.x {mode} logged timeouts: {report['timeout_lines'][:3]}"
    # On the wire: a client whose request times out closes that connection while still owed a response.
    gave_up = [c for c in client_tap.connections() if c.closed_by == "client" and c.unanswered_at_close
               and c.closed_at is not None and c.closed_at < report["finished"]]
    assert not gave_up, f"kafka-python 2.x {mode} closed connections owing responses: {gave_up}"


def assert_release_versions(path: QuotaPath, client_id: str, release: tuple[int, int],
                            *apis: ApiKey) -> Counter[tuple[str, int]]:
    """What reached the upstream from `client_id`: only `release`'s versions, `apis` at its newest."""
    known = KAFKA_VERSIONS[release]
    sent = Counter((ApiKey(r.api_key).name, r.api_version) for r in path.upstream_tap.requests(client_id=client_id))
    newer = {(name, v) for name, v in sent if v > known.get(ApiKey[name], -1)}
    assert not newer, f"versions Kafka {release} did not have reached the upstream: {sorted(newer)} (all: {sent})"
    for api in apis:
        assert {v for name, v in sent if name == api.name} == {known[api]}, \
            f"{api.name} went upstream as {sorted(sent)}, expected v{known[api]} only"
    return sent


def assert_throttled_to_quota(path: QuotaPath, client_id: str, api_key: int, events: list[Event]) -> float:
    """The rate the upstream saw after the first span, and proof that kqp throttled and muted."""
    assert events, "nothing reached the upstream"
    start, end = events[0][0] + SPAN, events[-1][0]
    assert end - start >= 2 * SPAN, f"too short to judge a rate: {end - start:.1f}s after the first span"
    rate = cumulative_slope(events, start, end)
    assert abs(rate - QUOTA) <= RATE_TOLERANCE * QUOTA, \
        f"upstream saw {rate / 1000:.1f} kB/s against a quota of {QUOTA / 1000:.0f} kB/s"
    throttled = [r.throttle_ms for r in path.client_tap.responses(api_key=api_key) if r.throttle_ms]
    assert throttled, "no response carried throttle_time_ms: the client was never throttled"
    report = mute_report(path.client_tap, path.upstream_tap, client_id)
    assert report.checked == report.throttled_responses, \
        f"only {report.checked} of {report.throttled_responses} throttled responses could be checked"
    assert not report.breaches, "requests reached the upstream while muted:\n" + \
        "\n".join(str(b) for b in report.breaches[:10])
    return rate


@RELEASES
def test_kafka_python2_producer_at_old_versions_never_times_out(
        release: tuple[int, int], kafka_python2: Path, quota_path: OpenPath, upstream: Upstream) -> None:
    client_id = f"kp2-producer-{release[1]}"
    path = quota_path({**WINDOWS, "entities": [{"client_id": client_id, "producer_byte_rate": QUOTA}]})
    topic = unique_topic("kp2-produce")
    ensure_topic(upstream, topic, 1, upstream_kind=upstream.kind)

    report = old_kafka_python.run_client(kafka_python2, "produce", path.bootstrap, topic, client_id, MESSAGES,
                                         api_version=release)

    assert_no_timeout_no_error(report, path.client_tap, "producer")
    expected = [f"{client_id}-{i:08d}" for i in range(MESSAGES)]
    assert sorted(report["acked"]) == expected, f"{MESSAGES - len(report['acked'])} messages unacknowledged"
    produced = path.upstream_tap.requests(client_id=client_id, api_key=ApiKey.Produce)
    # Every record that went upstream, counted from batch headers: a resent request counts twice.
    assert sum(r.records for r in produced) == MESSAGES, \
        f"the upstream received {sum(r.records for r in produced)} records for {MESSAGES} messages"
    stored = Counter(read_partition(upstream, topic))
    assert sorted(stored) == expected and set(stored.values()) == {1}, \
        f"the partition holds {sum(stored.values())} records, {len(stored)} distinct, for {MESSAGES} messages"
    assert_release_versions(path, client_id, release, ApiKey.Produce)
    assert_throttled_to_quota(path, client_id, ApiKey.Produce, request_events(produced))
    assert report["throttle_max_ms"], "kafka-python 2.x recorded no throttle time of its own"


@RELEASES
def test_kafka_python2_consumer_at_old_versions_never_times_out(
        release: tuple[int, int], kafka_python2: Path, quota_path: OpenPath, upstream: Upstream) -> None:
    """Fetch v5 (v2) under consumer_byte_rate; kqp delivers an over-quota response with its throttle
    (`fetch_throttle: deliver`) and mutes, and the client's next Fetch waits in the muted socket."""
    client_id = f"kp2-consumer-{release[1]}"
    path = quota_path({**WINDOWS, "entities": [{"client_id": client_id, "consumer_byte_rate": QUOTA}]})
    topic = unique_topic("kp2-consume")
    ensure_topic(upstream, topic, 1, upstream_kind=upstream.kind)
    expected = preload(upstream, topic, MESSAGES)

    report = old_kafka_python.run_client(kafka_python2, "consume", path.bootstrap, topic, client_id, MESSAGES,
                                         api_version=release)

    assert_no_timeout_no_error(report, path.client_tap, "consumer")
    assert report["received"] == expected, \
        f"received {len(report['received'])} records ({len(set(report['received']))} distinct) of {MESSAGES}"
    # ListOffsets too: at 0.10 that is v0, which kqp passes on its header alone.
    assert_release_versions(path, client_id, release, ApiKey.Fetch, ApiKey.ListOffsets)
    # The rate is what the upstream sent in Fetch responses carrying records, not the empty tail.
    events = [(at, size) for at, size in fetch_response_events(path.upstream_tap, client_id) if size > 1000]
    assert_throttled_to_quota(path, client_id, ApiKey.Fetch, events)
    assert report["throttle_max_ms"], "kafka-python 2.x recorded no throttle time of its own"
