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
from kafka.protocol.metadata import MetadataResponse
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
from kqp.proxy.connection.handlers.registry import served_apis, standard_handlers
from kqp.proxy.connection.hooks import ProxyObserver
from kqp.proxy.connection.oauthbearer import TokenValidator
from kqp.proxy.connection.sasl import SaslPolicy
from kqp.proxy.connection.wiring import CoreSettings, CoreWiring, ListenerLookup
from kqp.proxy.policies.authorization.acl_admin import AclAdmin
from kqp.proxy.policies.authorization.checks import AclState, Denial, RequestAuthorization
from kqp.proxy.policies.authorization.rules import RULES
from kqp.proxy.policies.mutation_gate import MutationGate
from kqp.proxy.policies.quota_admin import QuotaAdmin
from kqp.proxy.policies.topic_metadata import TopicMetadata
from kqp.quotas.acls.authorizer import Authorizer
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import Principal

__all__ = ["Recorder", "connected", "connected_core", "connecting", "fetch_request", "fetch_response",
           "kqp_listener", "make_core", "metadata_response", "play", "produce_frame", "produce_response",
           "throttle_of", "to_client", "to_upstream", "topic_cache"]

_SIZE = struct.Struct(">i")
SERVER_NONCE = "kqp-server-nonce"
CONNECT_TIMEOUT_MS = 10_000   # upstream.connect_timeout_ms's default


@dataclass
class Recorder(ProxyObserver):
    """An observer that writes down the hooks a test cares about."""

    wants_records: bool = False
    closed: list[str] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)
    mutes: list[tuple[str, str, str]] = field(default_factory=list)   # ("start"|"end", client_id, quota)
    throttles: list[tuple[str, str, float]] = field(default_factory=list)   # (client_id, quota, seconds)
    observed: list[tuple[str, str, float]] = field(default_factory=list)    # observed throttles, the same way
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

    def observed_throttled(self, principal: Principal, quota_type: str, seconds: float) -> None:
        self.observed.append((principal.client_id, quota_type, seconds))

    def mute_started(self, principal: Principal, quota_type: str, at: float | None = None) -> None:
        self.mutes.append(("start", principal.client_id, quota_type))

    def mute_ended(self, principal: Principal, quota_type: str, due: float | None = None) -> None:
        self.mutes.append(("end", principal.client_id, quota_type))


def kqp_listener(node_id: int, host: str, port: int) -> tuple[str, int]:
    """The listener lookup of a kqp that listens for every broker: port 19100 + node id."""
    return "127.0.0.1", 19100 + node_id


def make_core(quotas: dict[str, Any] | None = None, observer: ProxyObserver | None = None, *,
              admin: Callable[[QuotaManager], QuotaAdmin] | None = None,
              api_ranges: Callable[[], Mapping[int, tuple[int, int]]] = kqp_ranges,
              listener_for: ListenerLookup = kqp_listener, pacing: bool = False,
              denials: list[Denial] | None = None, tokens: TokenValidator | None = None,
              **config: Any) -> Connection:
    """A `Connection` on real parts, not yet connected, with kqp's handlers (`standard_handlers`) on
    them. `admin` builds the quota admin policy from the quota manager (kqp then manages quotas);
    `api_ranges` is what the upstream speaks; `listener_for` which brokers kqp listens for. A `sasl`
    section gets a fixed SCRAM server nonce (`SERVER_NONCE`), so a SCRAM exchange can be stated byte
    for byte; `upstream.sasl` in `config` makes the core log in upstream (not in passthrough).
    `pacing` is off unless asked, and quotas measure with Kafka's sampled rate unless `quotas` names
    an algorithm: a playbook states the broker's behaviour unless it is about kqp's own. With
    `authorization` enabled (by `config` or by sasl mode terminate) every request is authorized with
    the section's ACLs, kqp answers the ACL API, and `denials` collects what was refused; `tokens`
    checks OAUTHBEARER logins."""
    quotas = dict(quotas or {})
    if not any(pool.get("adaptive") for pool in quotas.get("pools", ())):   # those refuse `sampled`
        quotas.setdefault("algorithm", "sampled")
    cfg = parse_config({"upstream": {"bootstrap_servers": "127.0.0.1:9092"}, "quotas": quotas, **config})
    manager = QuotaManager(cfg.quotas, 0.0)
    charging = Charging(manager, observer or Recorder())
    sasl = SaslPolicy.from_config(cfg.sasl, nonce=lambda: SERVER_NONCE, tokens=tokens)
    topics, quota_admin = TopicMetadata(), admin(manager) if admin is not None else None
    authorization = acl_admin = None
    if cfg.authorization.enabled:
        a = cfg.authorization
        acls = AclState(Authorizer(a.acls, a.super_users, a.allow_everyone_if_no_acl_found))
        acl_admin = AclAdmin(acls, frozenset(cfg.admin.principals), writable=a.state_file is not None)
        authorization = RequestAuthorization(acls, RULES, topics, (denials if denials is not None else []).append,
                                             served_apis(quota_admin, acl_admin))
    parts = CoreWiring(
        charging=charging,
        handlers=standard_handlers(charging, MutationGate(manager, topics), sasl, api_ranges, quota_admin,
                                   authorization, acl_admin),
        listener_for=listener_for, perf=lambda: 0.0, cpu=lambda: 0.0,
        settings=CoreSettings(cfg.max_frame_bytes, cfg.fetch_throttle, cfg.limits.max_in_flight_per_connection,
                              cfg.connections_max_idle_ms, cfg.upstream.connect_timeout_ms, pacing),
        sasl=sasl, upstream_sasl=None if cfg.sasl.mode == "passthrough" else cfg.upstream.sasl,
    )
    return Connection(parts, "bootstrap", None, "test-client")


def topic_cache(core: Connection) -> TopicMetadata:
    """The topic cache behind a core's mutation gate (what a lookup would fill)."""
    handler = core.wiring.handlers[ApiKey.CreateTopics]
    return getattr(handler, "inner", handler).gate.topics   # behind `Authorized` when authorization is on


def connecting(now: float, user: str | None = None, timeout_ms: int = CONNECT_TIMEOUT_MS,
               host: str = "") -> tuple[Event, list[Action]]:
    """The playbook step of a client's arrival: the upstream is asked for, within the connect timeout."""
    return (ev.ClientConnected(now, user, host), [ev.Mute(ev.MuteReason.CONNECTING), ev.ConnectUpstream(None),
                                            ev.SetTimer(now + timeout_ms / 1000)])


def connected(now: float, *then: Action) -> tuple[Event, list[Action]]:
    """The playbook step of the upstream coming up (no login): the deadline cleared, the client read,
    and `then` (what the client had sent meanwhile)."""
    return (ev.UpstreamConnected(now), [ev.SetTimer(None), ev.Unmute(ev.MuteReason.CONNECTING), *then])


def connected_core(quotas: dict[str, Any] | None = None, now: float = 100.0, observer: ProxyObserver | None = None,
                   pacing: bool = False, **config: Any) -> Connection:
    """A `Connection` whose client and upstream are both connected at `now`."""
    core = make_core(quotas, observer, pacing=pacing, **config)
    play(core, [connecting(now), connected(now)])
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


def metadata_response(correlation_id: int, *brokers: BrokerAddress, version: int = 9) -> bytes:
    """A Metadata response (v9+: flexible header) naming `brokers` and no topic."""
    body = MetadataResponse(version=version, throttle_time_ms=0, brokers=[
        MetadataResponse.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=None)
        for b in brokers], cluster_id=None, controller_id=1, topics=[]).encode(version=version)
    return _framed(correlation_id, bytes(body), flexible_header=version >= 9)


def throttle_of(frame: bytes, api_key: int, version: int) -> int:
    """The throttle_time_ms of a whole response frame."""
    cls = ProduceResponse if api_key == ApiKey.Produce else FetchResponse
    flexible = (api_key == ApiKey.Produce and version >= 9) or (api_key == ApiKey.Fetch and version >= 12)
    body = frame[8 + (1 if flexible else 0):]
    return cls.decode(body, version=version).throttle_time_ms
