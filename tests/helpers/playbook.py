"""Playbooks for the sans-io connection core: events in, the exact actions expected out, no sockets.

mitmproxy's way (`test/mitmproxy/proxy/tutils.py`): a test states a whole exchange as ordered
(event, expected actions) steps, and `play` replays it against a real `Connection` built on real
parts (quota manager, mutation gate, charging) with a fake handler-time clock that never moves, so
handler time is 0 and every number in a test comes from the test's own arithmetic.

Frames are built with kafka-python's message classes (never a hand-written schema).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceResponse

from helpers.quota_frames import produce_frame, record_batch
from kqp.config.loader import parse_config
from kqp.protocol.addresses import BrokerAddress
from kqp.protocol.apis import ApiKey, kqp_ranges
from kqp.protocol.messages import encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.charging import Charging
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import Action, Event, Side
from kqp.proxy.connection.handlers.registry import standard_handlers
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.connection.parts import CoreParts, CoreSettings
from kqp.proxy.connection.sasl import SaslPolicy
from kqp.proxy.policies.mutation_gate import MutationGate
from kqp.proxy.policies.quota_admin import QuotaAdmin
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import Principal

__all__ = ["Recorder", "connected_core", "fetch_request", "fetch_response", "make_core", "play",
           "produce_frame", "produce_response", "throttle_of", "to_client", "to_upstream", "topic_cache"]

_SIZE = struct.Struct(">i")
SERVER_NONCE = "kqp-server-nonce"


@dataclass
class Recorder(ProxyObserver):
    """An observer that writes down the hooks a test cares about."""

    wants_records: bool = False
    closed: list[str] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)
    mutes: list[tuple[str, str, str]] = field(default_factory=list)   # ("start"|"end", client_id, quota)
    throttles: list[tuple[str, str, float]] = field(default_factory=list)   # (client_id, quota, seconds)
    fetched_records: list[int] = field(default_factory=list)              # per Fetch response
    requests: list[int] = field(default_factory=list)                 # api keys, as counted
    dropped: list[int] = field(default_factory=list)                  # requests dropped, per give-up
    ignored: list[tuple[str, str, str]] = field(default_factory=list)  # (software, version, reason)

    def request(self, principal: Principal, api_key: int, nbytes: int) -> None:
        self.requests.append(api_key)

    def connection_closed(self, listener: str, reason: str) -> None:
        self.closed.append(reason)

    def requests_dropped(self, count: int) -> None:
        self.dropped.append(count)

    def throttle_ignored(self, software: str, version: str, reason: str) -> None:
        self.ignored.append((software, version, reason))

    def upstream_anomaly(self, kind: str) -> None:
        self.anomalies.append(kind)

    def fetched(self, principal: Principal, nbytes: int, records: int) -> None:
        self.fetched_records.append(records)

    def throttled(self, principal: Principal, quota_type: str, seconds: float) -> None:
        self.throttles.append((principal.client_id, quota_type, seconds))

    def mute_started(self, principal: Principal, quota_type: str) -> None:
        self.mutes.append(("start", principal.client_id, quota_type))

    def mute_ended(self, principal: Principal, quota_type: str) -> None:
        self.mutes.append(("end", principal.client_id, quota_type))


def make_core(quotas: dict[str, Any] | None = None, observer: ProxyObserver | None = None, *,
              admin: Callable[[QuotaManager], QuotaAdmin] | None = None,
              api_ranges: Callable[[], Mapping[int, tuple[int, int]]] = kqp_ranges, pacing: bool = False,
              **config: Any) -> Connection:
    """A `Connection` on real parts, not yet connected, with kqp's handlers (`standard_handlers`) on
    them. `admin` builds the quota admin policy from the quota manager (kqp then manages quotas);
    `api_ranges` is what the upstream speaks. A `sasl` section gets a fixed SCRAM server nonce
    (`SERVER_NONCE`), so a SCRAM exchange can be stated byte for byte. `pacing` is off unless asked
    (issue 20): a playbook states the broker's behaviour unless it is about kqp's pacing."""
    cfg = parse_config({"upstream": {"bootstrap_servers": "127.0.0.1:9092"}, "quotas": quotas or {}, **config})
    manager = QuotaManager(cfg.quotas, 0.0)
    learned: list[BrokerAddress] = []
    charging = Charging(manager, observer or Recorder())
    sasl = SaslPolicy.from_config(cfg.sasl, nonce=lambda: SERVER_NONCE)
    parts = CoreParts(
        charging=charging,
        handlers=standard_handlers(charging, MutationGate(manager, TopicMetadata()), sasl, api_ranges,
                                   admin(manager) if admin is not None else None),
        learn_brokers=learned.extend, map_address=lambda node_id, host, port: ("127.0.0.1", 19100 + node_id),
        perf=lambda: 0.0, settings=CoreSettings(cfg.max_frame_bytes, cfg.fetch_throttle,
                                                  cfg.limits.max_in_flight_per_connection, cfg.connections_max_idle_ms,
                                                  pacing),
        sasl=sasl,
    )
    return Connection(parts, "bootstrap", None, "test-client")


def topic_cache(core: Connection) -> TopicMetadata:
    """The topic cache behind a core's mutation gate (what a lookup would fill)."""
    return core.parts.handlers[ApiKey.CreateTopics].gate.topics


def connected_core(quotas: dict[str, Any] | None = None, now: float = 100.0, observer: ProxyObserver | None = None,
                   pacing: bool = False, **config: Any) -> Connection:
    """A `Connection` whose client and upstream are both connected at `now`."""
    core = make_core(quotas, observer, pacing=pacing, **config)
    play(core, [
        (ev.ClientConnected(now), [ev.Mute(ev.MuteReason.CONNECTING), ev.ConnectUpstream(None)]),
        (ev.UpstreamConnected(now), [ev.Unmute(ev.MuteReason.CONNECTING)]),
    ])
    return core


def play(core: Connection, steps: Sequence[tuple[Event, Sequence[Action]]]) -> None:
    """Replay `steps`; each event must produce exactly its expected actions, in order."""
    for index, (event, expected) in enumerate(steps):
        got = core.handle(event)
        assert got == list(expected), f"step {index} ({event!r}):\n  got      {got}\n  expected {list(expected)}"


def to_upstream(*frames: bytes | memoryview) -> ev.Send:
    return ev.Send(Side.UPSTREAM, tuple(frames))


def to_client(*frames: bytes | memoryview) -> ev.Send:
    return ev.Send(Side.CLIENT, tuple(frames))


def _framed(correlation_id: int, body: bytes, flexible_header: bool = False) -> bytes:
    head = _SIZE.pack(correlation_id) + (b"\x00" if flexible_header else b"")
    return _SIZE.pack(len(head) + len(body)) + head + body


def produce_response(version: int, correlation_id: int, throttle_ms: int = 0) -> bytes:
    part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
        index=0, error_code=0, base_offset=0, log_append_time_ms=-1, log_start_offset=0)
    body = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[part])],
                           throttle_time_ms=throttle_ms).encode(version=version)
    return _framed(correlation_id, bytes(body), flexible_header=version >= 9)


def fetch_request(version: int, correlation_id: int, client_id: str, max_bytes: int = 50 << 20) -> bytes:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    topic = FetchRequest.FetchTopic(topic="t", partitions=[part])
    return encode_request(ApiKey.Fetch, version, correlation_id, client_id, replica_id=-1, max_wait_ms=100,
                          min_bytes=1, max_bytes=max_bytes, isolation_level=0, topics=[topic])


def fetch_response(version: int, correlation_id: int, records: int, session_id: int = 0) -> bytes:
    data = record_batch("f", records) if records else b""
    part = FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=0, error_code=0, high_watermark=records, last_stable_offset=records, log_start_offset=0,
        aborted_transactions=[], preferred_read_replica=-1, records=data)
    body = FetchResponse(throttle_time_ms=0, error_code=0, session_id=session_id,
                         responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[part])]
                         ).encode(version=version)
    return _framed(correlation_id, bytes(body), flexible_header=version >= 12)


def throttle_of(frame: bytes, api_key: int, version: int) -> int:
    """The throttle_time_ms of a whole response frame."""
    cls = ProduceResponse if api_key == ApiKey.Produce else FetchResponse
    flexible = (api_key == ApiKey.Produce and version >= 9) or (api_key == ApiKey.Fetch and version >= 12)
    body = frame[8 + (1 if flexible else 0):]
    return cls.decode(body, version=version).throttle_time_ms
