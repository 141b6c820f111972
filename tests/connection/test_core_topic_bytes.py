"""Bytes per topic for the metrics (`metrics.topic_bytes`): every Produce and Fetch response is read
for its topics, without a topic pool and without holding anything for a lookup.

The counts are the records bytes per topic (`kqp.protocol.topic_bytes`), the same figure a topic
pool charges; they are checked against the record batch's own length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helpers.playbook import (
    Recorder,
    connected_core,
    fetch_request,
    fetch_response,
    play,
    produce_response,
    to_client,
    to_upstream,
)
from helpers.quota_frames import produce_frame, record_batch

from kqp.proxy.connection import events as ev
from kqp.quotas.model import Principal

NOW = 100.0


@dataclass
class TopicRecorder(Recorder):
    wants_topics: bool = True
    topics: list[tuple[str, str, tuple[tuple[str, int], ...]]] = field(default_factory=list)

    def topic_bytes(self, principal: Principal, direction: str, sizes: tuple[tuple[str, int], ...]) -> None:
        self.topics.append((principal.client_id, direction, sizes))


def test_each_produce_and_fetch_response_counts_its_bytes_per_topic() -> None:
    recorder = TopicRecorder()
    core = connected_core(None, observer=recorder)
    produce, fetch = produce_frame("orders", 9, 1, "c", records=5), fetch_request(11, 2, "c")
    answer = fetch_response(11, 2, 7)
    play(core, [(ev.ClientData(NOW, produce), [to_upstream(produce)]),
                (ev.ClientData(NOW, fetch), [to_upstream(fetch)])])
    assert recorder.topics == [("c", "produce", (("orders", len(record_batch("c1", 5))),))]
    play(core, [(ev.UpstreamData(NOW, produce_response(9, 1)), [to_client(produce_response(9, 1))]),
                (ev.UpstreamData(NOW, answer), [to_client(answer)])])
    assert recorder.topics[1] == ("c", "fetch", (("t", len(record_batch("f", 7))),))


def test_without_topic_bytes_no_topic_is_read() -> None:
    recorder = TopicRecorder(wants_topics=False)
    core = connected_core(None, observer=recorder)
    produce = produce_frame("orders", 9, 1, "c")
    play(core, [(ev.ClientData(NOW, produce), [to_upstream(produce)])])
    assert recorder.topics == []

