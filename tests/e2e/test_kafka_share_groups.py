"""Share groups (KIP-932) through kqp, as a Kafka 4.4 broker treats them, with Kafka's own Java clients.

A share group's members read a topic together, each record acquired by one member and acknowledged
one by one. Through client tap -> kqp -> upstream tap -> Apache Kafka:

* two `KafkaShareConsumer` members of one group, sharing one partition as a queue's consumers do,
  under one client id's `consumer_byte_rate`, at
  Kafka's default windows (11 x 1 s), accept every record exactly once, and the ShareFetch bytes the
  upstream sent hold the quota within 5 % after the first span (Kafka charges a share fetch to the
  fetch quota, and so does kqp); every throttled response's connection stays muted for its throttle;
  `kqp top` marks the client `[share]` and `kqp explain` names the quota, its throttles and the share
  group's APIs;
* RELEASE brings a record back (delivery count 2), REJECT never, ACCEPT once, acknowledged by
  ShareAcknowledge requests, and those and the group's heartbeats count towards a request quota,
  whose throttle kqp writes into their responses;
* Kafka's own tools, `kafka-console-share-consumer` (two of them) and `ShareConsumerPerformance`
  (two threads), read every record once, and `kafka-share-groups` describes the group (its
  offsets read, altered and deleted) through kqp.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers.java_clients import java_command, run_tool
from helpers.kqp_process import run_kqp_cli
from helpers.names import unique_group, unique_topic
from helpers.observability import metrics_url
from helpers.quota_analysis import cumulative_slope, fetch_response_events, mute_report, unanswered_closes
from helpers.quota_path import open_quota_path
from helpers.share_groups import load, reports, start_members, wait_for_keys
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

QUOTA = 100_000          # consumer_byte_rate, bytes/s
SPAN = 11.0              # Kafka's default quota windows, 11 x 1 s, which kqp's defaults are
RECORDS = 4_500          # of 1000 B: a first burst of 1 MB (ten windows of quota), then ~35 s at the quota
RATE_TOLERANCE = 0.05
READ_TIMEOUT = 150.0
SHARE_APIS = (ApiKey.ShareFetch, ApiKey.ShareAcknowledge, ApiKey.ShareGroupHeartbeat)


def share_topic(kafka: Upstream, prefix: str, count: int, partitions: int = 2) -> tuple[str, list[str]]:
    topic = unique_topic(prefix)
    ensure_topic(kafka, topic, partitions, upstream_kind=kafka.kind)
    return topic, load(kafka, topic, count)


def assert_exactly_once(accepted: Counter[str], expected: list[str]) -> None:
    twice = sorted(k for k, n in accepted.items() if n > 1)
    assert not twice, f"accepted more than once: {twice[:10]} ({len(twice)} keys)"
    missing = sorted(set(expected) - set(accepted))
    assert not missing, f"{len(missing)} of {len(expected)} never accepted, e.g. {missing[:5]}"


def test_two_members_read_every_record_once_under_the_consumer_quota(kqp: Any, kafka: Upstream,
                                                                     tmp_path: Path) -> None:
    client_id = "share-q"
    with contextlib.ExitStack() as stack:
        path = open_quota_path(stack, kqp, kafka, {"entities": [{"client_id": client_id, "consumer_byte_rate": QUOTA}]},
                               metrics={"listen": "127.0.0.1:0"})
        base = metrics_url(path.kqp)
        # One partition read by both members, as a queue is: with a partition each, the member whose
        # partition empties first leaves the quota's debt to one connection mid-run, a step the rate
        # over the window reads as a dip.
        topic, expected = share_topic(kafka, "share-q", RECORDS, partitions=1)
        # Acknowledged with each member's next ShareFetch, as a consumer reading flat out does.
        with start_members(path.bootstrap, topic, client_id, unique_group("share-q"), 2, tmp_path,
                           READ_TIMEOUT, commit="fetch") as members:
            time.sleep(SPAN + 5)   # past the first span: a share consumer held at its quota
            top = run_kqp_cli("top", "--once", "--url", f"{base}/metrics")
            explained = run_kqp_cli("explain", "--client-id", client_id, "--url", f"{base}/explain")
            wait_for_keys(members, len(expected), READ_TIMEOUT)
            told = reports(members)
        accepted = Counter(key for m in members for key in m.keys())
        events = fetch_response_events(path.upstream_tap, client_id, ApiKey.ShareFetch)
        mutes = mute_report(path.client_tap, path.upstream_tap, client_id)
        closes = unanswered_closes(path.client_tap, ignore=frozenset({ApiKey.ShareFetch}))

    assert all(not r["errors"] and not r["acknowledgement_errors"] for r in told), told
    assert all(r["consumed"] > 0 and r["max_delivery_count"] == 1 for r in told), \
        f"both members read, each record delivered once: {told}"
    assert_exactly_once(accepted, expected)

    # Judged while the backlog held the members at the quota: each response then brings a window's
    # worth (kqp caps a share fetch at its tokens and a window); the last ones, smaller as the topic
    # runs out, are the drain, not the quota's rate.
    data = [e for e in events if e[1] >= QUOTA / 2]
    start, end = data[0][0] + SPAN, data[-1][0]
    assert end - start >= 20, f"the records were read within {end - data[0][0]:.1f} s: the quota held nothing"
    rate = cumulative_slope(events, start, end)
    print(f"\nShareFetch bytes from the upstream after the first span: {rate / 1000:.1f} KB/s over "
          f"{end - start:.0f} s, {rate / QUOTA:.3f} x the quota; throttles told: {len(mutes.throttle_ms)}")
    assert abs(rate - QUOTA) <= RATE_TOLERANCE * QUOTA, \
        f"the upstream sent {rate / 1000:.1f} KB/s of ShareFetch responses, quota {QUOTA / 1000:.1f} KB/s"
    assert mutes.throttled_responses > 0 and mutes.checked == mutes.throttled_responses, mutes
    assert not mutes.breaches, "requests reached the upstream while muted:\n" + \
        "\n".join(map(str, mutes.breaches[:10]))
    assert not closes, closes

    assert top.returncode == 0, top.stderr
    row = next((line for line in top.stdout.splitlines() if client_id in line), "")
    assert f"{client_id} [share]" in row and "Ki" in row, f"kqp top shows no share consumer row:\n{top.stdout}"
    assert explained.returncode == 0, explained.stderr
    for words in ("consumer_byte_rate", "a member of a share group", "ShareFetch", "THROTTLES"):
        assert words in explained.stdout, f"kqp explain does not say {words!r}:\n{explained.stdout}"


def test_release_reject_and_acknowledge_count_towards_request_quotas(kqp: Any, kafka: Upstream,
                                                                      tmp_path: Path) -> None:
    """Every record is released on its first delivery, rejected on its second when its key is a
    multiple of 10 and accepted otherwise: 900 of 1000 accepted once, each delivered twice. The
    member's ShareAcknowledge, ShareFetch and ShareGroupHeartbeat requests are charged to its
    request_rate of 1/s, so some of their responses carry kqp's throttle."""
    client_id = "share-ack"
    count = 1000
    with contextlib.ExitStack() as stack:
        path = open_quota_path(stack, kqp, kafka, {"entities": [{"client_id": client_id, "request_rate": 1}]})
        topic, expected = share_topic(kafka, "share-ack", count, partitions=1)
        wanted = [k for k in expected if int(k[2:]) % 10]
        with start_members(path.bootstrap, topic, client_id, unique_group("share-ack"), 1, tmp_path, READ_TIMEOUT,
                           release_first=True, reject_every=10) as members:
            wait_for_keys(members, len(wanted), READ_TIMEOUT)
            (told,) = reports(members)
        accepted = Counter(members[0].keys())
        throttled = Counter(r.api_key for r in path.client_tap.responses()
                            if r.api_key in SHARE_APIS and (r.throttle_ms or 0))
        acknowledged = [r for r in path.client_tap.responses(api_key=ApiKey.ShareAcknowledge)]

    assert not told["errors"] and not told["acknowledgement_errors"], told
    assert_exactly_once(accepted, wanted)
    assert told["released"] >= count and told["rejected"] == count // 10 and told["max_delivery_count"] == 2, told
    assert acknowledged, "no ShareAcknowledge went through kqp"
    print(f"\nthrottled share group responses: {dict(throttled)}")
    assert throttled[ApiKey.ShareAcknowledge] or throttled[ApiKey.ShareGroupHeartbeat], \
        f"no ShareAcknowledge or ShareGroupHeartbeat response carried a request quota's throttle: {throttled}"


def _console(bootstrap: str, topic: str, group: str) -> subprocess.Popen[str]:
    """kafka-console-share-consumer printing each record's key, until 20 s pass without one."""
    return subprocess.Popen(java_command("org.apache.kafka.tools.consumer.ConsoleShareConsumer", "--bootstrap-server",
                                         bootstrap, "--topic", topic, "--group", group, "--timeout-ms", "20000",
                                         "--property", "print.key=true", "--property", "print.value=false"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def share_groups_tool(bootstrap: str, *args: str) -> str:
    """kafka-share-groups, through kqp: its output (its exit status checked)."""
    done = run_tool("org.apache.kafka.tools.consumer.group.ShareGroupCommand", "--bootstrap-server", bootstrap, *args)
    assert done.returncode == 0, f"kafka-share-groups {' '.join(args)}:\n{done.stdout}{done.stderr[-2000:]}"
    return done.stdout


def test_kafkas_share_tools_read_every_record_once_through_kqp(kqp: Any, kafka: Upstream) -> None:
    """Two console share consumers, then ShareConsumerPerformance with two threads, in groups of their
    own; kafka-share-groups then finds every partition's lag 0 (ShareGroupDescribe and
    DescribeShareGroupOffsets), resets the offsets (AlterShareGroupOffsets) and deletes them
    (DeleteShareGroupOffsets), all through kqp."""
    proxy = kqp(kafka)
    count = 2000
    topic, expected = share_topic(kafka, "share-tools", count)
    group = unique_group("share-console")
    perf_group = f"{group}-perf"
    for name in (group, perf_group):   # a share group starts at the latest offset unless told otherwise
        done = run_tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", proxy.bootstrap,
                        "--entity-type", "groups", "--entity-name", name, "--alter", "--add-config",
                        "share.auto.offset.reset=earliest")
        assert done.returncode == 0, done.stderr[-2000:]
    consoles = [_console(proxy.bootstrap, topic, group) for _ in range(2)]
    outputs = []
    for console in consoles:
        try:
            outputs.append(console.communicate(timeout=150)[0])
        finally:
            console.kill()
    read = [[line.strip() for line in out.splitlines() if line.startswith("k-")] for out in outputs]
    keys = Counter(key for member in read for key in member)
    assert_exactly_once(keys, expected)
    assert all(read), f"one console member read nothing: {[len(r) for r in read]}"

    perf = run_tool("org.apache.kafka.tools.ShareConsumerPerformance", "--bootstrap-server", proxy.bootstrap,
                    "--topic", topic, "--group", perf_group, "--num-records", str(count), "--threads", "2",
                    "--timeout", "30000", "--show-consumer-stats", timeout=150)
    assert perf.returncode == 0, perf.stderr[-3000:]
    lines = [line for line in perf.stdout.splitlines() if line.strip()]
    members = [int(line.split(",")[-2]) for line in lines if line.startswith("Share consumer")]
    total = int(lines[-1].split(",")[-2])
    assert total == count and len(members) == 2 and all(members), f"ShareConsumerPerformance:\n{perf.stdout}"

    for name in (group, perf_group):
        offsets = share_groups_tool(proxy.bootstrap, "--describe", "--group", name, "--offsets")
        lags = [row.split()[-1] for row in offsets.splitlines() if row.startswith(name)]
        assert lags and set(lags) == {"0"}, f"{name}: not every record acknowledged:\n{offsets}"
    share_groups_tool(proxy.bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                      "--execute")
    deleted = share_groups_tool(proxy.bootstrap, "--delete-offsets", "--group", group, "--topic", topic)
    assert "Error" not in deleted, deleted
