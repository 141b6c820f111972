"""Legal values `kqp check-config` warns about: each one line naming the key, none for a plain file.

Arithmetic in the comments: the span is window_count x window_size_seconds (11 x 1 s by default);
request throttles are capped at one window, so a connection sends at least 1 / window_size_seconds
requests a second while its key owes; a new client's first burst is (window_count - 1) windows.
"""

from __future__ import annotations

from typing import Any

import pytest

from kqp.config.loader import parse_config
from kqp.config.surprises import surprises

UPSTREAM = {"upstream": {"bootstrap_servers": ["127.0.0.1:9092"]}}


def lines(document: dict[str, Any]) -> list[str]:
    config = parse_config({**UPSTREAM, **document}, "kqp.yaml")
    return [s.line(config.source) for s in surprises(config)]


def entities(*entries: dict[str, Any], **quotas: Any) -> dict[str, Any]:
    return {"quotas": {**quotas, "entities": list(entries)}}


def test_a_plain_file_and_the_defaults_warn_of_nothing() -> None:
    assert lines({}) == []
    assert lines(entities({"client_id": "etl", "producer_byte_rate": 1048576, "request_rate": 50},
                          {"user": "<default>", "consumer_byte_rate": 2097152},
                          window_size_seconds=0.2, window_count=6)) == []


def test_a_zero_quota_blocks_its_entity() -> None:
    # The span at the defaults: 11 x 1 s.
    assert lines(entities({"client_id": "etl", "producer_byte_rate": 1000},
                          {"user": "bob", "client_id_prefix": "job-", "consumer_byte_rate": 0})) == [
        "config warning in kqp.yaml: quotas.entities[1].consumer_byte_rate: 0 blocks "
        "/users/bob/client-id-prefixes/job-: any use throttles it for the whole span (11 s); Kafka refuses 0"]


@pytest.mark.parametrize(("rate", "said"), [(0, "0 does not block /clients/api"),
                                            (4, "4/s cannot hold for /clients/api")])
def test_a_request_rate_under_one_request_a_window_cannot_hold(rate: float, said: str) -> None:
    # 0.2 s windows: each connection still sends 1 / 0.2 = 5 requests a second, above 4 (and 0).
    assert lines(entities({"client_id": "api", "request_rate": rate}, window_size_seconds=0.2)) == [
        f"config warning in kqp.yaml: quotas.entities[0].request_rate: {said}: request throttles are capped "
        "at one window (0.2 s), so each of its connections still sends a request a window (5/s)"]
    assert lines(entities({"client_id": "api", "request_rate": 5}, window_size_seconds=0.2)) == []


def test_windows_that_let_minutes_of_quota_through_at_once() -> None:
    # (11 - 1) x 10 s = 100 s of quota before the first throttle; (11 - 1) x 6 s = 60 s is not warned of.
    assert lines({"quotas": {"window_size_seconds": 10}}) == [
        "config warning in kqp.yaml: quotas: 11 windows of 10 s let a new or idle client send 100 s of its "
        "quota at once before its first throttle"]
    assert lines({"quotas": {"window_size_seconds": 6}}) == []


def test_a_fleet_exchange_slower_than_a_tenth_of_the_span() -> None:
    # Span 6 x 0.1 s = 0.6 s; 100 ms is 17 % of it (the bound: up to about I / S over the quota).
    fleet = {"scope": "cluster", "cluster": {"redis_url": "redis://127.0.0.1:6379/0"}}
    assert lines({"quotas": {"window_size_seconds": 0.1, "window_count": 6, **fleet}}) == [
        "config warning in kqp.yaml: quotas.cluster.sync_interval_ms: 100 ms is over a tenth of the quota span "
        "(0.6 s): the fleet may run up to about 17% over its quotas"]
    assert lines({"quotas": {"window_size_seconds": 0.2, "window_count": 6, **fleet}}) == []   # 100 ms of 1.2 s
    assert lines({"quotas": {"window_size_seconds": 0.1, "window_count": 6}}) == []   # instance scope


def test_observed_quotas_and_pools_throttle_nobody() -> None:
    member = {"client_id_prefix": "job-"}
    pool = {"name": "ingest", "producer_byte_rate": 300000, "members": [member], "mode": "observe"}
    assert lines({"quotas": {"entities": [{"client_id": "etl", "producer_byte_rate": 1000, "mode": "observe"}, member],
                             "pools": [pool]}}) == [
        "config warning in kqp.yaml: quotas.entities[0].mode: observe: the quotas of /clients/etl are counted, "
        "not enforced",
        "config warning in kqp.yaml: quotas.pools[0].mode: observe: pool ingest divides its budget and counts "
        "what it would throttle, and throttles nobody"]
    assert lines(entities({"client_id": "etl", "producer_byte_rate": 1000, "mode": "enforce"}, mode="observe")) == [
        "config warning in kqp.yaml: quotas.mode: observe: quotas are measured and what they would throttle is "
        "counted; nobody is throttled but by the entries and pools that say mode: enforce (1)"]


def test_empty_fetches_an_open_metrics_endpoint_and_one_request_at_a_time() -> None:
    assert lines({"fetch_throttle": "empty", "metrics": {"listen": "[::]:9404"},
                  "limits": {"max_in_flight_per_connection": 1}}) == [
        "config warning in kqp.yaml: fetch_throttle: empty: an over-quota Fetch is answered without the records "
        "kqp already read from the upstream, which are read again after the throttle",
        "config warning in kqp.yaml: metrics.listen: [::]:9404: anyone who can connect sees every entity's quotas, "
        "usage and connections; bind 127.0.0.1 or admit only Prometheus",
        "config warning in kqp.yaml: limits.max_in_flight_per_connection: 1: a connection's next request is read "
        "only once the last is answered, so a client that pipelines (a producer's max.in.flight) waits a round "
        "trip per request"]
    assert lines({"metrics": {"listen": "127.0.0.1:9404"}, "limits": {"max_in_flight_per_connection": 2}}) == []
