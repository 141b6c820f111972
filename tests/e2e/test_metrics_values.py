"""kqp's counters equal the workload that caused them (issue 5): bytes, records, requests per API,
throttle seconds as the client saw them, for the right entity labels.

A raw client (helpers.raw_client) sends a known workload through a real kqp process in front of
Tansu and keeps its own tally: frame sizes, record counts, every response's throttle_time_ms. kqp
runs with `--log-format json`, so the same test checks that every log line is one JSON object.
"""

from __future__ import annotations

import json
import time

import pytest
from helpers.names import unique_topic
from helpers.observability import scrape, start_with_metrics
from helpers.raw_client import RawConnection, Tally
from helpers.topics import ensure_topic

pytestmark = pytest.mark.e2e

CLIENT = "metered"
RATE = 40_000          # producer_byte_rate, bytes/s
REQUESTS, RECORDS, VALUE = 12, 10, 1000   # about 10 KB per request, 120 KB in all: 3 s at RATE
QUOTAS = {"window_size_seconds": 0.2, "window_count": 6,
          "entities": [{"client_id": CLIENT, "producer_byte_rate": RATE}]}


def test_counters_equal_what_the_client_sent_and_saw(tansu, kqp) -> None:
    proxy, url = start_with_metrics(kqp, tansu, quotas=QUOTAS, extra_args=["--log-format", "json"])
    topic = unique_topic("metrics-values")
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind=tansu.kind)
    tally = Tally()
    with RawConnection(proxy.bootstrap, CLIENT, tally) as boot:
        leader = boot.leader_address(topic)
    with RawConnection(leader, CLIENT, tally) as conn:
        for i in range(REQUESTS):
            conn.produce(topic, [b"%d-" % i + b"v" * (VALUE - 8)] * RECORDS)
        offset, deadline = 0, time.monotonic() + 20
        while offset < REQUESTS * RECORDS and time.monotonic() < deadline:
            _, offset = conn.fetch(topic, offset)
    assert offset == REQUESTS * RECORDS, f"fetched up to offset {offset}"
    assert tally.throttled_responses > 0, "the workload was meant to exceed the quota"

    samples = scrape(url)
    who = {"user": "ANONYMOUS", "client_id": CLIENT}

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, frozenset({**who, **labels}.items())))

    assert value("kqp_bytes_total", direction="produce") == tally.produce_bytes
    assert value("kqp_records_total", direction="produce") == REQUESTS * RECORDS == tally.produce_records
    assert value("kqp_bytes_total", direction="fetch") == tally.fetch_bytes
    assert value("kqp_records_total", direction="fetch") == tally.fetch_records >= REQUESTS * RECORDS
    for api in ("Produce", "Fetch", "Metadata"):
        assert value("kqp_requests_total", api=api) == tally.requests[api], api
    assert value("kqp_requests_total", api="ApiVersions") is None    # the raw client never asks
    # The client saw throttle_time_ms = round(seconds * 1000) (at least 1) on each throttled
    # response, so the sums differ by at most 1 ms per response.
    seen = tally.throttle_seconds
    counted = value("kqp_throttle_seconds_total", quota="producer_byte_rate")
    assert counted is not None and abs(counted - seen) <= 0.001 * tally.throttled_responses, (counted, seen)
    assert value("kqp_throttled_responses_total", quota="producer_byte_rate") == tally.throttled_responses
    assert value("kqp_quota_limit", quota="producer_byte_rate") == RATE
    assert (value("kqp_request_handler_seconds_total") or 0) > 0
    # Only this client produced and fetched through this kqp (the admin client creates the topic).
    assert samples[("kqp_upstream_request_duration_seconds_count", frozenset({("api", "Produce")}))] == REQUESTS
    assert samples[("kqp_upstream_request_duration_seconds_count", frozenset({("api", "Fetch")}))] == \
        tally.requests["Fetch"]

    lines = proxy.log_lines()
    assert lines, "kqp logged nothing"
    for line in lines:
        record = json.loads(line)    # every line is one JSON object
        assert {"ts", "level", "logger", "msg"} <= record.keys()
    assert any(json.loads(line)["msg"].startswith("metrics endpoint http://127.0.0.1:") for line in lines)

