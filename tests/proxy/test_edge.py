"""The asyncio edge of a connection, on a fake loop with fake transports (uvicorn's way).

The edge (`kqp.proxy.runtime.edge`) is the thin layer between the transports and the sans-io core:
callbacks become events, the core's actions become calls. Here it runs on real connection parts
(helpers.playbook) and a real delay driver, but its loop is `helpers.fake_edge.EdgeLoop` (a clock
and timers moved by hand, tasks stepped by hand, connections and executor jobs the test answers)
and its sockets are `FakeTransport`s that record every call. Nothing sleeps, no socket is opened.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from helpers.fake_edge import EdgeLoop, FakeFuture, FakeTransport, deliver
from helpers.playbook import (
    Recorder,
    kqp_listener,
    make_core,
    metadata_response,
    produce_frame,
    produce_response,
)
from kafka.protocol.admin import AlterClientQuotasRequest as Alter

from kqp.config.model import HostPort
from kqp.protocol.addresses import BrokerAddress
from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import decode_response, encode_request
from kqp.protocol.sasl import encode_authenticate_response, encode_handshake_response
from kqp.proxy.connection.wiring import CoreWiring
from kqp.proxy.policies.quota_admin import QuotaAdmin
from kqp.proxy.runtime.admission import Admission
from kqp.proxy.runtime.delay import DelayDriver
from kqp.proxy.runtime.edge import WRITE_HIGH_WATER, ClientEdge, EdgeWiring
from kqp.proxy.runtime.state.quota_store import QuotaStore
from kqp.quotas.admin_layer import overlay
from kqp.quotas.connection_limits import ConnectionLimits, LimitSettings

NOW = 100.0
UPSTREAM = HostPort("127.0.0.1", 9092)
SLOW = {"entities": [{"client_id": "slow", "producer_byte_rate": 1000}]}   # 1000 B/s over 11 x 1 s windows


class Harness:
    """One process's wiring on an `EdgeLoop`, and helpers to open connections through it."""

    def __init__(self, parts: CoreWiring, **wiring: Any) -> None:
        self.loop = EdgeLoop(start=NOW)
        self.delay = DelayDriver(self.loop)  # type: ignore[arg-type]
        self.open: set[ClientEdge] = set()
        self.closed = 0
        self.lookups = 0
        self.listened: list[tuple[BrokerAddress, ...]] = []
        defaults: dict[str, Any] = {"upstream_for": lambda node_id: [UPSTREAM], "look_up_topics": self._look_up,
                                    "ensure_listeners": self._ensure_listeners}
        self.wiring = EdgeWiring(loop=self.loop, core=parts, delay=self.delay,  # type: ignore[arg-type]
                                 open_connections=self.open, on_closed=self._on_closed, **{**defaults, **wiring})

    async def _look_up(self) -> None:
        self.lookups += 1

    def _ensure_listeners(self, brokers: tuple[BrokerAddress, ...]) -> str | None:
        self.listened.append(brokers)
        return None

    def _on_closed(self) -> None:
        self.closed += 1

    def accept(self) -> tuple[ClientEdge, FakeTransport]:
        """A client connects: its edge, its transport."""
        edge = ClientEdge(self.wiring, "bootstrap", None)
        client = FakeTransport(edge)
        edge.connection_made(client)  # type: ignore[arg-type]
        self.loop.run_ready()
        return edge, client

    def connected(self, **transport: Any) -> tuple[ClientEdge, FakeTransport, FakeTransport]:
        """A client whose upstream connection is up: its edge and both transports."""
        edge, client = self.accept()
        upstream = self.loop.connects.pop().succeed(**transport)
        return edge, client, upstream


def harness(quotas: dict[str, Any] | None = None, observer: Recorder | None = None, **config: Any) -> Harness:
    return Harness(make_core(quotas, observer, **config).wiring)


def test_a_client_s_bytes_wait_for_the_upstream_then_go_in_order() -> None:
    h = harness()
    edge, client = h.accept()
    [connect] = h.loop.connects
    assert (connect.host, connect.port) == ("127.0.0.1", 9092)
    assert client.reads() == ["pause_reading"]   # CONNECTING: nothing is read until the upstream is up
    assert ("set_write_buffer_limits", WRITE_HIGH_WATER) in client.calls and edge in h.open
    first, second = produce_frame("t", 9, 1, "c"), produce_frame("t", 9, 2, "c")
    deliver(edge, first)     # already in the socket's buffer when reading was paused
    deliver(edge, second)
    upstream = connect.succeed()
    assert upstream.take() == first + second
    assert client.reads() == ["pause_reading", "resume_reading"]
    assert ("set_write_buffer_limits", WRITE_HIGH_WATER) in upstream.calls
    deliver(upstream.protocol, produce_response(9, 1) + produce_response(9, 2))  # type: ignore[union-attr]
    assert client.take() == produce_response(9, 1) + produce_response(9, 2)


def test_an_upstream_that_refuses_closes_the_client() -> None:
    h = harness(observer=(recorder := Recorder()))
    edge, client = h.accept()
    h.loop.connects.pop().fail(ConnectionRefusedError(111, "Connection refused"))
    assert client.closing and recorder.closed == ["upstream_unreachable"] and edge not in h.open and h.closed == 1


def test_a_bootstrap_connection_tries_the_next_broker_when_one_refuses() -> None:
    # A client has only kqp's bootstrap address: a broker that is down must not refuse it.
    down, up = HostPort("127.0.0.1", 9093), HostPort("127.0.0.1", 9094)
    h = Harness(make_core().wiring, upstream_for=lambda node_id: [down, up])
    edge, client = h.accept()
    first = h.loop.connects.pop()
    assert (first.host, first.port) == ("127.0.0.1", 9093)
    first.fail(ConnectionRefusedError(111, "Connection refused"))
    h.loop.run_ready()
    second = h.loop.connects.pop()
    assert (second.host, second.port) == ("127.0.0.1", 9094)
    upstream = second.succeed()
    first_frame = produce_frame("t", 9, 1, "c")
    deliver(edge, first_frame)
    assert upstream.take() == first_frame and not client.closing


def test_every_broker_refusing_closes_the_client_naming_each() -> None:
    h = Harness(make_core(None, recorder := Recorder()).wiring,
                upstream_for=lambda node_id: [HostPort("127.0.0.1", 9093), HostPort("127.0.0.1", 9094)])
    _, client = h.accept()
    for _ in range(2):
        h.loop.connects.pop().fail(ConnectionRefusedError(111, "Connection refused"))
        h.loop.run_ready()
    assert client.closing and recorder.closed == ["upstream_unreachable"]


def test_the_connect_deadline_is_the_core_s_timer_and_its_close_cancels_the_connect() -> None:
    h = harness(observer=(recorder := Recorder()))
    _, client = h.accept()
    [connect_task] = h.loop.tasks
    assert [t.when for t in h.loop.pending] == [NOW + 10.0]      # upstream.connect_timeout_ms
    h.loop.advance(NOW + 10.0)
    assert recorder.closed == ["upstream_unreachable"] and client.closing
    assert connect_task.cancelled()


def test_the_deadline_is_cleared_once_the_upstream_is_up() -> None:
    h = harness(observer=(recorder := Recorder()))
    h.connected()
    assert len(h.delay) == 0
    h.loop.advance(NOW + 11.0)
    assert recorder.closed == []


def throttle_deadline(h: Harness) -> float:
    """When the one timer in the delay driver is due (its loop timer may be armed earlier: a wake-up
    for a deadline since cleared finds nothing due and re-arms)."""
    assert len(h.delay) == 1
    deadline = h.delay.queue.next_deadline()
    assert deadline is not None
    return deadline


def throttled_produce(correlation_id: int) -> bytes:
    """~30 KB at 1000 B/s (11 x 1 s windows): throttled for about 20 s."""
    return produce_frame("t", 9, correlation_id, "slow")


def test_a_throttle_pauses_the_client_until_its_timer_fires_through_the_delay_driver() -> None:
    h = harness(SLOW)
    edge, client, _ = h.connected()
    client.calls.clear()
    deliver(edge, throttled_produce(1))
    assert client.reads() == ["pause_reading"] and len(h.delay) == 1
    until = throttle_deadline(h)
    h.loop.advance(until - 0.5)   # the connect deadline's timer fires on the way: nothing is due then
    assert client.reads() == ["pause_reading"]
    h.loop.advance(until)
    assert client.reads() == ["pause_reading", "resume_reading"] and len(h.delay) == 0


def test_a_longer_throttle_replaces_the_timer() -> None:
    h = harness(SLOW)
    edge, _, _ = h.connected()
    deliver(edge, throttled_produce(1))
    first = throttle_deadline(h)
    h.loop.advance(first)                       # the first throttle passes: read on
    deliver(edge, throttled_produce(2))    # over quota again, further: a later deadline
    second = throttle_deadline(h)
    assert second > first and len(h.delay) == 1 and [t.when for t in h.loop.pending] == [second]


def test_backpressure_and_a_throttle_each_hold_the_client_and_neither_resumes_the_other() -> None:
    h = harness(SLOW)
    edge, client, upstream = h.connected()
    client.calls.clear()
    upstream.protocol.pause_writing()   # type: ignore[union-attr]   # the upstream reads slower than we write
    assert client.reads() == ["pause_reading"]
    deliver(edge, throttled_produce(1))   # was in the buffer: over quota, THROTTLED too
    upstream.protocol.resume_writing()  # type: ignore[union-attr]
    assert client.reads() == ["pause_reading"], "backpressure lifted, but the throttle still holds the client"
    h.loop.advance(throttle_deadline(h))
    assert client.reads() == ["pause_reading", "resume_reading"]
    assert upstream.reads() == [], "nothing of the client side ever paused the upstream"


def test_a_slow_client_pauses_the_upstream_only_and_the_pause_raised_inside_a_write_is_queued() -> None:
    # The client's transport calls pause_writing from inside the write of the response, while the edge
    # is carrying out the core's actions: the event is queued, handled after, and pauses the upstream.
    h = harness()
    edge, client, upstream = h.connected()
    journal: list[tuple[str, str]] = []
    client.high_water, client.journal, client.name, upstream.journal, upstream.name = 10, journal, "client", \
        journal, "upstream"
    deliver(edge, produce_frame("t", 9, 1, "c") + produce_frame("t", 9, 2, "c"))
    journal.clear()
    deliver(upstream.protocol, produce_response(9, 1) + produce_response(9, 2))  # type: ignore[union-attr]
    # Both responses came in one read, so they go in one call; it crossed the mark, and the pause it
    # raised waits until the event's actions are done.
    assert client.take() == produce_response(9, 1) + produce_response(9, 2)
    assert journal == [("client", "writelines"), ("upstream", "pause_reading")]
    edge.resume_writing()
    assert upstream.reads() == ["pause_reading", "resume_reading"]


def test_listeners_are_asked_for_and_the_answer_is_handled_at_once() -> None:
    known: dict[int, tuple[str, int]] = {}
    parts = make_core(listener_for=lambda n, host, port: kqp_listener(n, host, port) if known.get(n) == (host, port)
                      else None).wiring
    h = Harness(parts, ensure_listeners=lambda brokers: known.update({b.node_id: (b.host, b.port) for b in brokers}))
    edge, client, upstream = h.connected()
    deliver(edge, encode_request(ApiKey.Metadata, 9, 1, "c", topics=None, allow_auto_topic_creation=False))
    deliver(upstream.protocol, metadata_response(1, BrokerAddress(2, "b2", 9092)))  # type: ignore[union-attr]
    response = decode_response(ApiKey.Metadata, 9, memoryview(client.take()))
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(2, "127.0.0.1", 19102)]
    assert upstream.reads() == [], "held and released within one event: the upstream's reading never moved"


def test_a_listener_kqp_cannot_bind_closes_that_connection() -> None:
    h = Harness(make_core(listener_for=lambda n, host, port: None, observer=(recorder := Recorder())).wiring,
                ensure_listeners=lambda brokers: "broker 2 on 0.0.0.0:9194: Address already in use")
    edge, client, upstream = h.connected()
    deliver(edge, encode_request(ApiKey.Metadata, 9, 1, "c", topics=None, allow_auto_topic_creation=False))
    deliver(upstream.protocol, metadata_response(1, BrokerAddress(2, "b2", 9092)))  # type: ignore[union-attr]
    assert recorder.closed == ["listener_unavailable"] and client.take() == b"" and client.closing


def test_kqp_s_login_runs_over_the_upstream_transport_before_the_client_is_read() -> None:
    upstream_sasl = {"mechanism": "PLAIN", "username": "kqp", "password": "kqp-secret"}
    h = harness(upstream={"bootstrap_servers": "127.0.0.1:9092", "sasl": upstream_sasl})
    edge, client = h.accept()
    request = produce_frame("t", 9, 1, "c")
    deliver(edge, request)
    upstream = h.loop.connects.pop().succeed()
    assert upstream.take() == encode_request(ApiKey.SaslHandshake, 1, 1, "kqp", mechanism="PLAIN")
    deliver(upstream.protocol, encode_handshake_response(1, 1, 0, ("PLAIN",)))  # type: ignore[union-attr]
    assert upstream.take() == encode_request(ApiKey.SaslAuthenticate, 1, 2, "kqp", auth_bytes=b"\x00kqp\x00kqp-secret")
    assert not client.reading
    deliver(upstream.protocol, encode_authenticate_response(1, 2))  # type: ignore[union-attr]
    assert upstream.take() == request and client.reading


def test_a_bug_in_an_action_closes_only_that_connection() -> None:
    def broken(brokers: tuple[BrokerAddress, ...]) -> str | None:
        raise RuntimeError("boom")

    h = Harness(make_core(listener_for=lambda n, host, port: None, observer=(recorder := Recorder())).wiring,
                ensure_listeners=broken)
    edge, client, upstream = h.connected()
    other, other_client, other_upstream = h.connected()
    deliver(edge, encode_request(ApiKey.Metadata, 9, 1, "c", topics=None, allow_auto_topic_creation=False))
    deliver(upstream.protocol, metadata_response(1, BrokerAddress(2, "b2", 9092)))  # type: ignore[union-attr]
    assert recorder.closed == ["internal_error"] and client.closing and upstream.closing
    deliver(other, produce_frame("t", 9, 1, "c"))
    deliver(other_upstream.protocol, produce_response(9, 1))  # type: ignore[union-attr]
    assert other_client.take() == produce_response(9, 1) and other in h.open


def delete_unknown_topic() -> bytes:
    """A DeleteTopics under a mutation quota naming a topic kqp does not know: it waits for a lookup."""
    return encode_request(ApiKey.DeleteTopics, 4, 1, "admin", topic_names=["unknown"], timeout_ms=100)


def test_a_bug_in_an_effect_s_task_closes_only_that_connection() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    quotas = {"entities": [{"client_id": "admin", "controller_mutation_rate": 1}]}
    h = Harness(make_core(quotas, (recorder := Recorder())).wiring, look_up_topics=broken)
    edge, client, _ = h.connected()
    deliver(edge, delete_unknown_topic())
    h.loop.run_ready()
    assert recorder.closed == ["internal_error"] and client.closing


def test_a_close_while_connecting_cancels_the_connect_and_its_deadline() -> None:
    h = harness()
    edge, client = h.accept()
    [connect] = h.loop.tasks
    assert len(h.delay) == 1
    edge.connection_lost(None)
    assert connect.cancelled() and len(h.delay) == 0 and client.closing and edge not in h.open and h.closed == 1


def test_a_close_cancels_an_effect_under_way_and_closes_both_transports() -> None:
    waiting: list[FakeFuture] = []

    async def slow_lookup() -> None:   # never answers: its task still runs at the close
        waiting.append(FakeFuture(h.loop))
        await waiting[-1]

    quotas = {"entities": [{"client_id": "admin", "controller_mutation_rate": 1}]}
    h = Harness(make_core(quotas).wiring, look_up_topics=slow_lookup)
    edge, client, upstream = h.connected()
    deliver(edge, delete_unknown_topic())
    h.loop.run_ready()
    [lookup] = [task for task in h.loop.tasks if not task.done()]
    assert waiting, "the lookup is under way"
    edge.connection_lost(None)
    assert lookup.cancelled() and client.closing and upstream.closing and edge not in h.open and h.closed == 1


def alter_request(correlation_id: int, rate: float) -> bytes:
    entity = [Alter.EntryData.EntityData(entity_type="user", entity_name="alice")]
    ops = [Alter.EntryData.OpData(key="request_rate", value=rate, remove=False)]
    return encode_request(ApiKey.AlterClientQuotas, 1, correlation_id, "c", validate_only=False,
                          entries=[Alter.EntryData(entity=entity, ops=ops)])


def admin_harness(tmp_path: Path) -> tuple[Harness, QuotaStore]:
    core = make_core(admin=lambda manager: QuotaAdmin(frozenset({"User:ANONYMOUS"}), lambda: manager.settings))
    manager = core.wiring.charging.quotas
    store = QuotaStore(str(tmp_path / "state.yaml"), manager.settings, lambda s: manager.update_settings(s, NOW))
    h = Harness(core.wiring)
    commit: Callable[..., Awaitable[None]] = partial(store.commit, loop=h.loop)
    h.wiring = dataclasses.replace(h.wiring, commit_quotas=commit)
    return h, store


def test_the_commit_runs_off_the_loop_and_its_answer_goes_once_it_is_in_force(tmp_path: Path) -> None:
    h, store = admin_harness(tmp_path)
    edge, client, _ = h.connected()
    deliver(edge, alter_request(1, 5.0))
    h.loop.run_ready()
    assert len(h.loop.jobs) == 1 and client.take() == b""       # handed to the executor, not written here
    assert not (tmp_path / "state.yaml").exists()
    assert not client.reading                                     # COMMIT: nothing more is read meanwhile
    threads = h.loop.run_jobs()
    assert threads == ["fake-executor"]
    assert "alice" in (tmp_path / "state.yaml").read_text()
    response = decode_response(ApiKey.AlterClientQuotas, 1, memoryview(client.take()))
    assert [(e.error_code, e.error_message) for e in response.entries] == [(0, None)]
    assert client.reading and store.layer and overlay(store.base, store.layer) == store.effective


def test_a_commit_that_fails_answers_not_changed(tmp_path: Path) -> None:
    h, _ = admin_harness(tmp_path)
    (tmp_path / "state.yaml").write_text("entities: 7\n")   # broken by hand: the commit refuses
    edge, client, _ = h.connected()
    deliver(edge, alter_request(1, 5.0))
    h.loop.run_ready()
    h.loop.run_jobs()
    response = decode_response(ApiKey.AlterClientQuotas, 1, memoryview(client.take()))
    [entry] = response.entries
    assert entry.error_code == -1 and entry.error_message.startswith("not changed: ")


@pytest.mark.parametrize("lost", ["client", "upstream"])
def test_either_socket_lost_closes_both(lost: str) -> None:
    h = harness(observer=(recorder := Recorder()))
    edge, client, upstream = h.connected()
    (edge if lost == "client" else upstream.protocol).connection_lost(None)  # type: ignore[union-attr]
    assert client.closing and upstream.closing
    assert recorder.closed == ["client_closed" if lost == "client" else "upstream_closed"]


def test_behind_a_balancer_the_real_client_is_admitted_and_named() -> None:
    # Every connection comes from the balancer's 10.0.0.1; the PROXY header (read by the listener)
    # named the client: max_connections_per_ip 1 counts 10.9.0.2 and 10.9.0.3 apart.
    h = harness()
    refusals: list[tuple[str, str, str]] = []
    admission = Admission(h.loop, ConnectionLimits(LimitSettings(max_connections_per_ip=1)),  # type: ignore[arg-type]
                          lambda listener, peer, refusal: refusals.append((listener, peer, refusal.reason)))
    h.wiring = dataclasses.replace(h.wiring, admission=admission)

    def accept(client_ip: str) -> tuple[ClientEdge, FakeTransport]:
        edge = ClientEdge(h.wiring, "bootstrap", None, real_peer=(client_ip, 5000))
        transport = FakeTransport(edge, peer=("10.0.0.1", 41000))
        edge.connection_made(transport)  # type: ignore[arg-type]
        h.loop.run_ready()
        return edge, transport

    first, _ = accept("10.9.0.2")
    second, _ = accept("10.9.0.3")
    assert first in h.open and second in h.open and not refusals
    assert first.core.peer == "10.9.0.2:5000 via 10.0.0.1:41000"
    over, transport = accept("10.9.0.2")
    assert over not in h.open and transport.closing
    assert refusals == [("bootstrap", "10.9.0.2:5000", "max_connections_per_ip")]


# -- reads into kqp's buffers, writes per event ---------------------------------------------------
def test_a_frame_split_over_many_reads_reaches_the_core_whole_and_goes_in_one_call() -> None:
    h = harness(observer=(recorder := Recorder()))
    edge, _client, upstream = h.connected()
    large = produce_frame("t", 9, 1, "c", records=1500)   # about 1 MB, read 64 KiB at a time
    assert deliver(edge, large) > 10
    assert upstream.take() == large
    assert [name for name, _ in upstream.calls if name.startswith("write")] == ["writelines"]
    assert recorder.requests == [ApiKey.Produce]   # one request, counted once: the core saw it whole


def test_frames_read_together_go_on_in_one_call() -> None:
    h = harness()
    edge, _client, upstream = h.connected()
    frames = [produce_frame("t", 9, n, "c", records=2) for n in (1, 2, 3)]
    assert deliver(edge, b"".join(frames), read=1 << 20) == 1
    assert upstream.take() == b"".join(frames)
    assert [(name, arg) for name, arg in upstream.calls if name.startswith("write")] == [("writelines", 3)]


def test_a_frame_the_client_cut_short_is_handed_to_the_core_which_closes() -> None:
    h = harness(observer=(recorder := Recorder()))
    edge, _client, upstream = h.connected()
    whole = produce_frame("t", 9, 1, "c")
    deliver(edge, whole[: len(whole) // 2])   # held in the frame's own buffer, not yet the core's
    edge.eof_received()
    assert recorder.closed == ["protocol_error"] and upstream.take() == b""


def test_a_write_that_will_be_queued_names_copies_of_small_parts_only() -> None:
    h = harness()
    edge, _client, upstream = h.connected()
    deliver(edge, produce_frame("t", 9, 1, "c", records=2))
    upstream.queued = 1   # the upstream is behind: what is written now waits in the transport
    deliver(edge, produce_frame("t", 9, 2, "c", records=2) + produce_frame("t", 9, 3, "c", records=200), read=1 << 20)
    # The small frame is a view of the shared read arena until then: queued, it goes as a copy; the
    # large one is its own buffer (it did not fit the read it started in) and goes as it is.
    assert upstream.kinds == ["memoryview", "bytes", "memoryview"]


def test_a_closed_connection_is_freed_by_reference_counts_not_left_to_the_cyclic_collector() -> None:
    # A short-lived client's connection must leave no reference cycle behind: under connection churn the
    # cyclic collector freeing each closed one cost more than a tenth of kqp's CPU per connection.
    h = harness(SLOW)   # quotas, so the principal's sensors are made too
    edge, client, upstream = h.connected()
    deliver(edge, encode_request(ApiKey.ApiVersions, 3, 1, "slow", client_software_name="c",
                                 client_software_version="1"))
    deliver(edge, produce_frame("t", 9, 2, "slow"))
    deliver(upstream.protocol, produce_response(9, 2))
    assert len(client.take()) > 0
    edge.eof_received()
    edge.connection_lost(None)
    upstream.protocol.connection_lost(None)   # type: ignore[union-attr]
    assert edge.core.closed and edge not in h.open
    # What a transport lets go of once it has reported the loss (uvloop's do), and the fake loop's tasks.
    client.protocol = upstream.protocol = None
    h.loop.tasks.clear()
    # The core is counted rather than weakly referred to: compiled by mypyc, it takes no weak references.
    gone, core = weakref.ref(edge), edge.core
    gc.disable()
    try:
        del edge
        assert gone() is None and sys.getrefcount(core) == 2   # `core` here and getrefcount's argument
    finally:
        gc.enable()
