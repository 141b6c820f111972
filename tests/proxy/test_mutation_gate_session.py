"""A session holding a mutation request while kqp looks a topic's partition count up.

DeleteTopics and CreatePartitions cost the partitions a topic has, which kqp may have to ask the
upstream for; that lookup is the one asynchronous step in a session. While it runs the session
must forward nothing more from that connection, then plan the held request again and carry on in
order. The session here is real (helpers.quota_fakes: fake transports, a hand-cranked clock); the
lookup is replaced by a coroutine the test releases, on the test's own event loop.

Quota: controller_mutation_rate 5/s over 2 windows of 1 s, so the bucket holds 10 tokens.
"""

from __future__ import annotations

import asyncio

from helpers.quota_fakes import SessionHarness, session_harness
from kafka.protocol.admin.topics import CreatePartitionsRequest

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request
from kqp.proxy.connection.mutation_gate import gate_for

QUOTAS = {"window_size_seconds": 1, "window_count": 2,
          "entities": [{"client_id": "admin", "controller_mutation_rate": 5}]}


def grow(correlation_id: int, topic: str, count: int) -> bytes:
    entry = CreatePartitionsRequest.CreatePartitionsTopic(name=topic, count=count, assignments=None)
    return encode_request(ApiKey.CreatePartitions, 3, correlation_id, "admin", topics=[entry], timeout_ms=1000,
                          validate_only=False)


def metadata(correlation_id: int) -> bytes:
    return encode_request(ApiKey.Metadata, 9, correlation_id, "admin", topics=None, allow_auto_topic_creation=False)


def held_session() -> tuple[SessionHarness, asyncio.Event, list[str]]:
    h = session_harness(QUOTAS)
    h.loop.create_task = asyncio.get_running_loop().create_task  # type: ignore[attr-defined]
    release = asyncio.Event()
    calls: list[str] = []
    gate = gate_for(h.ctx)

    async def lookup(host: str, port: int, *_: object) -> None:
        calls.append(f"{host}:{port}")
        await release.wait()
        gate.topics.learn("g", 2)            # what the upstream's Metadata would have said

    gate.topics.lookup = lookup  # type: ignore[method-assign]
    return h, release, calls


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_requests_behind_a_lookup_wait_and_keep_their_order() -> None:
    h, release, calls = held_session()
    h.session.data_received(grow(1, "g", 6) + metadata(2))
    await settle()
    assert calls == ["127.0.0.1:9092"]
    assert h.upstream.written == [], "nothing may overtake the held request"
    assert not h.session.drained
    release.set()
    await settle()
    assert h.upstream.correlation_ids(request=True) == [1, 2]
    # The held request was planned with the looked-up count: 2 -> 6 costs 4, 10 - 4 = 6 tokens.
    [state] = h.ctx.quotas.snapshot(h.loop.time())
    assert state.tokens == 6
    # A second request for the now known topic needs no lookup.
    h.session.data_received(grow(3, "g", 8))
    await settle()
    assert calls == ["127.0.0.1:9092"] and h.upstream.correlation_ids(request=True) == [1, 2, 3]


async def test_closing_cancels_the_lookup() -> None:
    h, _release, calls = held_session()
    h.session.data_received(grow(1, "g", 6))
    await settle()
    assert calls and h.session._held is not None
    task = h.session._held
    h.session.close("client_closed", None)
    await settle()
    assert task.cancelled()
    assert h.upstream.written == []
