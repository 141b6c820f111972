"""Playbooks of the connection core's forwarding: pipelining, split frames, kqp's own answers in
FIFO order, flow control both ways, EOF, upstream loss and the two rules for odd upstream answers.

No sockets, no loop, no clock: each step is an event and the exact actions it must produce
(helpers.playbook). No quota is configured here, so nothing is throttled.
"""

from __future__ import annotations

import struct

from helpers.playbook import (
    Recorder,
    connected,
    connected_core,
    connecting,
    make_core,
    play,
    produce_frame,
    produce_response,
    to_client,
    to_upstream,
)

from kqp.protocol.api_versions import encode_api_versions_response
from kqp.protocol.apis import kqp_ranges
from kqp.protocol.frames import FrameReader
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.events import MuteReason, Side

NOW = 100.0


def api_versions_request(correlation_id: int) -> bytes:
    head = struct.pack(">hhih", 18, 2, correlation_id, 1) + b"c"   # header v1, empty v2 body
    return struct.pack(">i", len(head)) + head


def test_requests_wait_for_the_upstream_connection() -> None:
    core = make_core()
    request = produce_frame("t", 7, 1, "c")
    play(core, [
        connecting(NOW),
        (ev.ClientData(NOW, request), []),                      # read, but nowhere to go yet
        connected(NOW, to_upstream(request)),
    ])
    assert core.muted(Side.CLIENT) is False


def test_pipelined_requests_go_in_order_and_responses_come_back_in_order() -> None:
    core = connected_core()
    first, second = produce_frame("t", 7, 1, "c"), produce_frame("t", 7, 2, "c")
    play(core, [
        (ev.ClientData(NOW, first + second), [to_upstream(first), to_upstream(second)]),
        (ev.UpstreamData(NOW, produce_response(7, 1) + produce_response(7, 2)[:10]),
         [to_client(produce_response(7, 1))]),
        (ev.UpstreamData(NOW, produce_response(7, 2)[10:]), [to_client(produce_response(7, 2))]),
    ])
    assert core.drained


def test_a_request_split_over_reads_goes_out_as_its_slices() -> None:
    core = connected_core()
    request = produce_frame("t", 7, 1, "c", records=100)     # ~100 KB
    cuts = [request[:3], request[3:50_000], request[50_000:]]
    play(core, [(ev.ClientData(NOW, cuts[0]), []), (ev.ClientData(NOW, cuts[1]), [])])
    [send] = core.handle(ev.ClientData(NOW, cuts[2]))
    assert send == to_upstream(request)
    assert len(send.parts) == 3, "a split Produce request must be forwarded as its parts, not joined"


def test_kqps_own_answer_waits_its_turn_in_the_fifo() -> None:
    core = connected_core()
    first, third = produce_frame("t", 7, 1, "c"), produce_frame("t", 7, 3, "c")
    answer = encode_api_versions_response(2, 2, kqp_ranges())
    play(core, [
        (ev.ClientData(NOW, first + api_versions_request(2) + third), [to_upstream(first), to_upstream(third)]),
        (ev.UpstreamData(NOW, produce_response(7, 1)), [to_client(produce_response(7, 1)), to_client(answer)]),
        (ev.UpstreamData(NOW, produce_response(7, 3)), [to_client(produce_response(7, 3))]),
    ])


def test_an_answer_with_nothing_before_it_goes_at_once() -> None:
    core = connected_core()
    play(core, [(ev.ClientData(NOW, api_versions_request(5)),
                 [to_client(encode_api_versions_response(2, 5, kqp_ranges()))])])


def test_backpressure_each_way_mutes_the_other_side_for_its_own_reason() -> None:
    core = connected_core()
    request = produce_frame("t", 7, 1, "c")
    play(core, [
        (ev.WriteBuffer(NOW, Side.UPSTREAM, True), [ev.Mute(MuteReason.BACKPRESSURE)]),
        # What was already read still goes: backpressure stops reading, not forwarding.
        (ev.ClientData(NOW, request), [to_upstream(request)]),
        (ev.WriteBuffer(NOW, Side.CLIENT, True), [ev.Mute(MuteReason.CLIENT_SLOW)]),
    ])
    assert core.muted(Side.CLIENT) and core.muted(Side.UPSTREAM)
    play(core, [
        (ev.WriteBuffer(NOW, Side.UPSTREAM, False), [ev.Unmute(MuteReason.BACKPRESSURE)]),
        (ev.WriteBuffer(NOW, Side.UPSTREAM, False), []),       # idempotent
    ])
    assert not core.muted(Side.CLIENT) and core.muted(Side.UPSTREAM)
    play(core, [(ev.WriteBuffer(NOW, Side.CLIENT, False), [ev.Unmute(MuteReason.CLIENT_SLOW)])])
    assert not core.muted(Side.UPSTREAM)


def test_eof_waits_for_owed_responses_then_closes() -> None:
    core = connected_core()
    request = produce_frame("t", 7, 1, "c")
    play(core, [
        (ev.ClientData(NOW, request), [to_upstream(request)]),
        (ev.ClientEof(NOW), []),
        (ev.UpstreamData(NOW, produce_response(7, 1)), [to_client(produce_response(7, 1)), ev.Close("client_closed")]),
    ])


def test_eof_in_the_middle_of_a_frame_is_a_truncated_frame() -> None:
    core = connected_core()
    request = produce_frame("t", 7, 1, "c")
    play(core, [
        (ev.ClientData(NOW, request[:100]), []),
        (ev.ClientEof(NOW), [ev.Close("protocol_error", "truncated frame: the client closed the connection "
                                                          "mid-frame (100 bytes of it received)")]),
        (ev.UpstreamData(NOW, b"ignored"), []),                # closed: nothing more happens
    ])


def read_in_place(reader: FrameReader, data: bytes) -> int:
    """`data` read as the edge reads: into the reader's buffer, at most what it offers; how much went."""
    buf = reader.get_buffer()
    n = min(len(buf), len(data))
    buf[:n] = data[:n]
    return n


def test_reads_in_place_reach_the_core_as_counts_and_a_frame_left_unfinished_is_truncated() -> None:
    core = connected_core()
    large = produce_frame("t", 7, 1, "c", records=600)   # about 400 KB: the arena, then segments of its own
    small = produce_frame("t", 7, 2, "c")
    stream, sends, reads = large + small + large[:300_000], [], 0
    while stream:
        n = read_in_place(core.requests, stream)
        stream, reads = stream[n:], reads + 1
        sends += core.handle(ev.ClientData(NOW, n))
        core.keep_held()
    assert reads > 3 and [b"".join(send.parts) for send in sends] == [large, small]
    assert len(sends[0].parts) > 1   # the large one as the buffers it was read into, never joined
    play(core, [(ev.ClientEof(NOW), [ev.Close("protocol_error", "truncated frame: the client closed the connection "
                                                                 "mid-frame (300000 bytes of it received)")])])


def test_upstream_loss_closes_and_says_what_was_awaited() -> None:
    core = connected_core()
    request = produce_frame("t", 7, 1, "c")
    play(core, [
        (ev.ClientData(NOW, request), [to_upstream(request)]),
        (ev.UpstreamLost(NOW, "reset by peer"),
         [ev.Close("upstream_closed", "upstream connection closed: reset by peer "
                                      "(awaiting the response to Produce v7)")]),
    ])


def test_upstream_loss_mid_response_never_answers_the_produce() -> None:
    # The upstream wrote the batch and half its answer arrived: kqp sends nothing of it and closes,
    # so the client retries (idempotence makes the retry harmless), never believing a half answer.
    core = connected_core()
    request, response = produce_frame("t", 7, 1, "c"), produce_response(7, 1)
    play(core, [
        (ev.ClientData(NOW, request), [to_upstream(request)]),
        (ev.UpstreamData(NOW, response[:len(response) // 2]), []),
        (ev.UpstreamLost(NOW, None),
         [ev.Close("upstream_closed", "upstream connection closed (awaiting the response to Produce v7)")]),
    ])


def test_an_unreachable_upstream_closes_with_its_reason() -> None:
    for unknown, reason in ((False, "upstream_unreachable"), (True, "upstream_unknown")):
        core = make_core()
        core.handle(ev.ClientConnected(NOW))
        play(core, [(ev.UpstreamConnectFailed(NOW, "no", unknown_broker=unknown), [ev.Close(reason, "no")])])


def test_a_response_nobody_awaits_is_dropped_and_counted() -> None:
    recorder = Recorder()
    core = make_core(observer=recorder)
    play(core, [connecting(NOW), connected(NOW)])
    acks0, second = produce_frame("t", 9, 1, "c", acks=0), produce_frame("t", 9, 2, "c")
    play(core, [
        (ev.ClientData(NOW, acks0 + second), [to_upstream(acks0), to_upstream(second)]),
        # librdkafka's mock cluster answers acks=0: nobody awaits that answer.
        (ev.UpstreamData(NOW, produce_response(9, 1)), []),
        (ev.UpstreamData(NOW, produce_response(9, 2)), [to_client(produce_response(9, 2))]),
    ])
    assert recorder.anomalies == ["unawaited"]


def test_a_response_out_of_order_is_an_upstream_protocol_error() -> None:
    core = connected_core()
    first, second = produce_frame("t", 7, 1, "c"), produce_frame("t", 7, 2, "c")
    play(core, [
        (ev.ClientData(NOW, first + second), [to_upstream(first), to_upstream(second)]),
        (ev.UpstreamData(NOW, produce_response(7, 2)),
         [ev.Close("upstream_protocol_error", "bad frame from upstream: upstream answered 2 where 1 was due")]),
    ])


def test_a_frame_over_the_limit_closes_before_it_is_buffered() -> None:
    core = connected_core(max_frame_bytes=1024)
    big = produce_frame("t", 7, 1, "c", records=2)
    [close] = core.handle(ev.ClientData(NOW, big[:4]))
    assert close.reason == "protocol_error" and "exceeds the maximum of 1024 bytes" in (close.message or "")


def test_shutdown_reads_no_new_request_but_delivers_what_is_owed_then_closes() -> None:
    core = connected_core()
    first, second = produce_frame("t", 7, 1, "c"), produce_frame("t", 7, 2, "c")
    play(core, [
        (ev.ClientData(NOW, first), [to_upstream(first)]),
        (ev.ShutdownBegun(NOW), [ev.Mute(MuteReason.CLOSING)]),
        (ev.ClientData(NOW, second), []),
        # Nothing is owed any more: the core closes itself; the process only waits for that.
        (ev.UpstreamData(NOW, produce_response(7, 1)), [to_client(produce_response(7, 1)), ev.Close("shutdown")]),
        (ev.CloseRequested(NOW, "shutdown"), []),
    ])


def test_shutdown_with_nothing_owed_closes_at_once() -> None:
    play(connected_core(), [(ev.ShutdownBegun(NOW), [ev.Mute(MuteReason.CLOSING), ev.Close("shutdown")])])
