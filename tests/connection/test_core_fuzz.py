"""Property-based fuzzing of the sans-io connection core (hypothesis), and a bounded soak.

Any sequence of events must leave a connection consistent: `handle` returns actions and never
raises; a `Close` is always the last action and nothing follows it; no close is an `internal_error`
(the top-level guard turns a bug into that reason, so seeing it means a bug); a connection that is
muted is read no more (the driver below only delivers client bytes while the client side is read, as
a transport does, fed or read in place), and what the core buffers stays bounded by one frame plus
one read, and the requests awaiting responses by the in-flight cap; a connection is closed exactly
when it has said `Close` (its phase moves only as its table allows). The runtime's answers come at
random too (a lookup done, listeners bound or not, a commit done or failed), solicited or not: a
Metadata answer may name a broker kqp has no listener for (the response is held), an
AlterClientQuotas waits for its commit. Throttle mutes are told to the observer in pairs: while a
throttle mutes the connection exactly one `mute_started` is open (so its cause is never missing),
none while it does not, and once the connection is closed every `mute_started` has had its
`mute_ended`. Every bad frame ends its own connection only: the soak feeds 100k random frames
(`KQP_SOAK_FRAMES` raises it, proxy/README.md "Tests"), each to a connection of its own, next to one
healthy connection that keeps working; their mutes balance too."""

from __future__ import annotations

import os
import random
import struct

from helpers.playbook import (
    Recorder,
    connected_core,
    kqp_listener,
    metadata_response,
    produce_frame,
    produce_response,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import AlterClientQuotasRequest as Alter

from kqp.protocol.addresses import BrokerAddress
from kqp.protocol.apis import ApiKey
from kqp.protocol.frames import FrameReader
from kqp.protocol.messages import encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.connection.events import Close, Side
from kqp.proxy.policies.quota_admin import QuotaAdmin

MAX_FRAME = 64 * 1024
READ = 4096   # the most one ClientData carries here
IN_FLIGHT = 2  # limits.max_in_flight_per_connection in the property test: reached often
QUOTAS = {"window_size_seconds": 0.2, "window_count": 3,
          "entities": [{"client_id": "c", "producer_byte_rate": 2000, "request_rate": 5},
                       {"client_id": "admin", "controller_mutation_rate": 1}]}


def valid_requests() -> list[bytes]:
    from kafka.protocol.admin.topics import CreateTopicsRequest
    topic = CreateTopicsRequest.CreatableTopic(name="t", num_partitions=2, replication_factor=1, assignments=[],
                                               configs=[])
    alter = Alter.EntryData(entity=[Alter.EntryData.EntityData(entity_type="user", entity_name="a")],
                            ops=[Alter.EntryData.OpData(key="request_rate", value=5.0, remove=False)])
    return [
        produce_frame("t", 9, 1, "c", records=2),
        produce_frame("t", 3, 2, "c", records=1, acks=0),
        encode_request(ApiKey.Metadata, 9, 3, "c", topics=None, allow_auto_topic_creation=False),
        encode_request(ApiKey.ApiVersions, 3, 4, "c", client_software_name="x", client_software_version="1"),
        encode_request(ApiKey.CreateTopics, 7, 5, "admin", topics=[topic], timeout_ms=100, validate_only=False),
        encode_request(ApiKey.AlterClientQuotas, 1, 6, "c", entries=[alter], validate_only=False),
    ]


class Listening:
    """kqp's listeners: broker 1 from the start, others once a `ListenersReady` without error binds them."""

    def __init__(self) -> None:
        self.nodes = {1}

    def __call__(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        return kqp_listener(node_id, host, port) if node_id in self.nodes else None


VALID = valid_requests()
# correlation id -> the upstream's answers to that request of VALID (a Metadata answer may name a new broker)
ANSWERS = {1: [produce_response(9, 1)],
           3: [metadata_response(3, BrokerAddress(1, "b", 9092)), metadata_response(3, BrokerAddress(2, "b", 9092))]}
RESPONSES = [produce_response(9, 1), produce_response(9, 7), b"\x00\x00\x00\x08\x00\x00\x00\x01abcd",
             metadata_response(3, BrokerAddress(1, "b", 9092)), metadata_response(3, BrokerAddress(2, "b", 9092))]


def mangled(frame: bytes, rng: random.Random) -> bytes:
    """A frame made wrong in one of the ways a hostile or broken peer does it."""
    kind = rng.randrange(6)
    if kind == 0:       # a lying length
        return struct.pack(">i", rng.choice([-1, 0, 3, MAX_FRAME + 1, len(frame)])) + frame[4:]
    if kind == 1:       # truncated (the rest never comes)
        return frame[:rng.randrange(1, len(frame))]
    if kind == 2:       # unknown api key / version
        body = bytearray(frame)
        struct.pack_into(">hh", body, 4, rng.choice([999, -3, 18]), rng.choice([-1, 99, 32767]))
        return bytes(body)
    if kind == 3:       # random bytes behind a valid size
        return struct.pack(">i", len(frame) - 4) + rng.randbytes(len(frame) - 4)
    if kind == 4:       # a huge client id length
        body = bytearray(frame)
        struct.pack_into(">h", body, 12, 32767)
        return bytes(body)
    return rng.randbytes(rng.randrange(1, 64))


def arrived(reader: FrameReader, data: bytes, rng: random.Random) -> bytes | int:
    """What a data event carries: `data` itself, or (a read in place, as the edge's) how much of it
    went where the core's reader said."""
    if rng.random() < 0.5:
        return data
    buf = reader.get_buffer()
    n = min(len(buf), len(data))
    buf[:n] = data[:n]
    return n


def open_mutes(recorder: Recorder) -> int:
    """`mute_started` calls not yet balanced by a `mute_ended`."""
    return sum(1 if kind == "start" else -1 for kind, _, _ in recorder.mutes)


def check(core: Connection, actions: list, closed_before: bool) -> None:
    assert isinstance(actions, list)
    if closed_before:
        assert actions == [], "a closed connection must ignore every event"
    closes = [i for i, a in enumerate(actions) if isinstance(a, Close)]
    if closes:
        assert closes == [len(actions) - 1], f"Close must be the one last action: {actions}"
        assert actions[-1].reason != "internal_error", "the core hit a bug (its guard closed with internal_error)"
        assert core.closed
    assert core.closed == (closed_before or bool(closes)), "a connection is closed exactly when it said Close"
    assert core.requests.buffered <= MAX_FRAME + 4 + READ
    limit = core.wiring.settings.max_in_flight
    assert limit is None or len(core.in_flight) <= limit
    if core.throttled:
        assert core.muted(Side.CLIENT) and core.throttling.muted_until > 0


event_kinds = st.sampled_from(["client", "client", "client", "upstream", "timer", "wbuf", "eof", "lookup",
                               "lost", "shutdown", "idle", "listeners", "committed"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(event_kinds, st.integers(0, 2**32 - 1)), max_size=40))
def test_any_sequence_of_events_leaves_the_connection_consistent(steps: list[tuple[str, int]]) -> None:
    recorder, listening = Recorder(), Listening()
    core = connected_core(QUOTAS, observer=recorder, max_frame_bytes=MAX_FRAME, connections_max_idle_ms=2000,
                          limits={"max_in_flight_per_connection": IN_FLIGHT}, listener_for=listening,
                          admin=lambda manager: QuotaAdmin(frozenset({"User:ANONYMOUS"}), lambda: manager.settings))
    now = 100.0
    for kind, seed in steps:
        rng = random.Random(seed)
        now += rng.random() * 0.3
        if kind == "client":
            if core.muted(Side.CLIENT):
                continue     # a transport delivers nothing once reading is paused
            frame = rng.choice(VALID)
            data = frame if rng.random() < 0.7 else mangled(frame, rng)
            cut = rng.randrange(1, len(data) + 1) if rng.random() < 0.3 else len(data)
            event: ev.Event = ev.ClientData(now, arrived(core.requests, data[:min(cut, READ)], rng))
        elif kind == "upstream":
            if core.muted(Side.UPSTREAM):
                continue     # as for the client: a paused transport delivers nothing
            due = core.in_flight[0].correlation_id if core.in_flight else None
            if due in ANSWERS and rng.random() < 0.6:   # the answer the oldest request awaits
                data = rng.choice(ANSWERS[due])
            else:
                data = rng.choice(RESPONSES) if rng.random() < 0.8 else rng.randbytes(rng.randrange(1, 40))
            event = ev.UpstreamData(now, arrived(core.responses, data, rng))
        elif kind == "listeners":
            bound = rng.random() < 0.7
            if bound:
                listening.nodes.add(2)
            event = ev.ListenersReady(now, None if bound else "cannot bind")
        elif kind == "committed":
            event = ev.Committed(now, None if rng.random() < 0.7 else "disk full")
        elif kind == "timer":
            event = ev.TimerFired(max(now, core.throttling.muted_until) if rng.random() < 0.7 else now)
        elif kind == "wbuf":
            event = ev.WriteBuffer(now, rng.choice(list(Side)), rng.random() < 0.5)
        elif kind == "eof":
            event = ev.ClientEof(now)
        elif kind == "lookup":
            event = ev.TopicsLookedUp(now)
        elif kind == "idle":
            event = ev.IdleCheck(now)
        elif kind == "lost":
            event = ev.UpstreamLost(now, "gone") if rng.random() < 0.5 else ev.ClientLost(now)
        else:
            event = ev.ShutdownBegun(now)
        closed_before = core.closed
        check(core, core.handle(event), closed_before)
        core.keep_held()   # as the edge, after every event
        throttled = core.throttled and not core.closed
        assert open_mutes(recorder) == (1 if throttled else 0), \
            f"a throttle mute without its cause, or an unbalanced one: {recorder.mutes}"
    core.handle(ev.ClientLost(now))
    assert open_mutes(recorder) == 0, f"every mute_started is ended by the close: {recorder.mutes}"


SOAK_FRAMES = int(os.environ.get("KQP_SOAK_FRAMES", "100000"))


def test_a_soak_of_100k_random_frames_ends_only_the_connections_that_sent_them() -> None:
    rng = random.Random(int(os.environ.get("KQP_SOAK_SEED", "20261122")))
    recorder = Recorder()
    healthy = connected_core(QUOTAS, observer=recorder, max_frame_bytes=MAX_FRAME)
    good = produce_frame("t", 9, 1, "healthy", records=1)   # a client no quota names
    reasons: dict[str, int] = {}
    for i in range(SOAK_FRAMES):
        core = Connection(healthy.wiring, "bootstrap", None)   # what a process's connections share
        core.handle(ev.ClientConnected(100.0))
        core.handle(ev.UpstreamConnected(100.0))
        frame = mangled(rng.choice(VALID), rng)
        actions = core.handle(ev.ClientData(100.0, frame))
        check(core, actions, False)
        if not core.closed:   # a frame that is not over yet: the client gives up on it
            actions = core.handle(ev.ClientEof(100.0))
            check(core, actions, False)
        if core.closed:
            reasons[actions[-1].reason] = reasons.get(actions[-1].reason, 0) + 1
        else:   # one awaiting a response it will never get: the client goes
            core.handle(ev.ClientLost(100.0))
        if i % 10_000 == 0:   # the healthy connection next to them is unaffected
            assert healthy.handle(ev.ClientData(100.0, good)) == [ev.Send(Side.UPSTREAM, (good,))]
            assert healthy.handle(ev.UpstreamData(100.0, produce_response(9, 1))) == [
                ev.Send(Side.CLIENT, (produce_response(9, 1),))]
    assert "internal_error" not in reasons, reasons
    healthy.handle(ev.ClientLost(100.0))
    assert open_mutes(recorder) == 0, "every connection's mutes are ended by its close"
    assert reasons.get("protocol_error", 0) > SOAK_FRAMES // 2, reasons
