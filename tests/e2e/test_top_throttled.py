"""`kqp top`'s THROTTLED against a known throttle: two real clients through `kqp run` (issue 20).

THROTTLED is the seconds an entity's connections spent muted by a throttle, per second. A client
that sends one request at a time knows its own mutes exactly: KIP-219 mutes its connection for the
throttle_time_ms each response tells (kqp from reading the request, the client from receiving the
answer: the same length). So each client here logs (response time, throttle), and the share of a
window its mutes covered is the truth top must show:

- `flat` produces as fast as kqp lets it: muted nearly all the time (about 1.00);
- `half` waits as long again as each throttle before its next request: muted about half the time.

The old column (throttle time given per second) showed 0.00 for a client in one long mute and more
than 1 for one with many throttled responses; neither is a share. After the clients stop, kqp's
`kqp_muted_seconds_total` is the throttle time each was told, less what a close cut short of its
last mute (the last test).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from helpers.kqp_process import KqpProcess, deep_merge, start_kqp
from helpers.names import unique_topic
from helpers.observability import sample, scrape, start_with_metrics
from helpers.raw_client import RawConnection, Tally
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

from kqp.proxy.tools.top import fetch, parse, render, with_rates

pytestmark = pytest.mark.e2e

QUOTA = 20_000          # producer_byte_rate of each client, bytes/s
PAYLOAD = [b"x" * 1000] * 10   # ~10 KB per Produce: half a second of quota each
QUOTAS: dict[str, Any] = {
    "algorithm": "sampled",   # Kafka's throttles, whose lengths vary from one request to the next
    "window_size_seconds": 0.2,
    "window_count": 6,
    "entities": [{"client_id": "flat", "producer_byte_rate": QUOTA},
                 {"client_id": "half", "producer_byte_rate": QUOTA}],
}
WINDOW = 3.0            # seconds between the two reads top's rates come from


class Client(threading.Thread):
    """One raw producer logging when each response came back and the throttle it carried."""

    def __init__(self, address: str, topic: str, client_id: str, idle_factor: float) -> None:
        super().__init__(daemon=True, name=client_id)
        self.address, self.topic, self.client_id, self.idle_factor = address, topic, client_id, idle_factor
        self.tally = Tally()
        self.mutes: list[tuple[float, float]] = []   # (response received, throttle seconds)
        self.stop = threading.Event()
        self.closed_at = 0.0   # a connection closed while muted is muted no longer
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with RawConnection(self.address, self.client_id, self.tally) as conn:
                leader = conn.leader_address(self.topic)
            with RawConnection(leader, self.client_id, self.tally) as conn:
                while not self.stop.is_set():
                    conn.produce(self.topic, PAYLOAD)
                    throttle = self.tally.throttle_ms[-1] / 1000
                    self.mutes.append((time.monotonic(), throttle))
                    # Sleeping through the mute and as long again after it halves the muted share;
                    # factor 0 sends at once (kqp holds the request until the mute ends).
                    self.stop.wait(throttle * self.idle_factor if throttle else 0.02 * self.idle_factor)
            self.closed_at = time.monotonic()
        except BaseException as exc:
            if not self.stop.is_set():
                self.error = exc

    def share(self, start: float, end: float) -> float:
        """The part of [start, end] the client's connection spent muted."""
        covered = sum(max(0.0, min(at + t, end) - max(at, start)) for at, t in self.mutes)
        return covered / (end - start)


def throttled_cell(lines: list[str], client_id: str) -> float:
    table = lines[lines.index("") + 1:]
    column = table[0].split().index("THROTTLED") - 1   # "PRODUCE B/s" is one cell in two words
    row = next(line.split() for line in table if line.split()[1:2] == [client_id])
    return float(row[column].removesuffix("s/s"))


@dataclass
class Scene:
    clients: dict[str, Client]
    start: float
    end: float
    lines: list[str]
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]   # /metrics after the clients stopped
    explained: dict[str, dict[str, Any]]   # `kqp explain --json` of each client, after they stopped


@pytest.fixture(scope="module")
def scene(tansu: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    """One run of both clients, judged by the tests below (a kqp of the module's own: the kqp
    fixture is per test)."""
    directory = tmp_path_factory.mktemp("kqp-top-throttled")
    started: list[KqpProcess] = []

    def kqp(upstream: Upstream, quotas: dict[str, Any], **config: Any) -> KqpProcess:
        started.append(start_kqp(directory, upstream, quotas, **deep_merge(upstream.kqp_settings(), config)))
        return started[-1]

    try:
        yield run_scene(*start_with_metrics(kqp, tansu, quotas=QUOTAS), tansu.kind)
    finally:
        for process in started:
            assert process.stop() == 0, process.logs()[-4000:]


def run_scene(proxy: KqpProcess, url: str, upstream_kind: str) -> Scene:
    topic = unique_topic("top-throttled")
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind=upstream_kind)
    clients = {"flat": Client(proxy.bootstrap, topic, "flat", 0.0), "half": Client(proxy.bootstrap, topic, "half", 2.0)}
    for c in clients.values():
        c.start()
    try:
        time.sleep(3.0)   # past the first burst (a span is 1.2 s) into the steady throttling
        start = time.monotonic()
        before = parse(fetch(f"{url}/metrics"), start)
        time.sleep(WINDOW)
        end = time.monotonic()
        after = with_rates(parse(fetch(f"{url}/metrics"), end), before)
        lines = render(after, url, width=200)
    finally:
        for c in clients.values():
            c.stop.set()
        for c in clients.values():
            c.join(35)
    assert not [c.error for c in clients.values() if c.error], [c.error for c in clients.values()]
    explained = {name: json.loads(fetch(f"{url}/explain?client_id={name}")) for name in clients}
    return Scene(clients, start, end, lines, scrape(url), explained)


def test_throttled_is_the_share_of_time_the_client_spent_muted(scene: Scene) -> None:
    text = "\n".join(scene.lines)
    truth = {name: c.share(scene.start, scene.end) for name, c in scene.clients.items()}
    shown = {name: throttled_cell(scene.lines, name) for name in scene.clients}
    print(f"\nTHROTTLED shown {shown}, muted share from the clients' own throttles {truth}\n{text}")
    assert truth["flat"] > 0.85 and 0.25 < truth["half"] < 0.75, f"not the scene intended: {truth}"
    for name in scene.clients:
        assert shown[name] == pytest.approx(truth[name], abs=0.08), text


def test_muted_seconds_add_up_to_the_throttles_the_clients_were_told(scene: Scene) -> None:
    """The counter behind THROTTLED: the throttle time each client was told (but for the part of a
    last mute that its connection's close cut short), within the millisecond rounding and the loop's
    timer firing late on a busy machine, which the mute does not count (`mute_ended(due=)`). kqp mutes
    a connection from the moment it reads a Produce over quota for exactly the throttle its response
    then tells, so nothing is muted that was not told: a held request, or a mute that ran from the
    response on as well as from the read, would break the bound.
    """
    told = {name: c.share(0.0, c.closed_at) * c.closed_at for name, c in scene.clients.items()}
    rounding = {name: 0.002 * len(c.mutes) + 0.01 for name, c in scene.clients.items()}
    muted = {name: sample(scene.samples, "kqp_muted_seconds_total", quota="producer_byte_rate", user="ANONYMOUS",
                          client_id=name) for name in scene.clients}
    print(f"\nmuted {muted}, told {told}")
    for name in scene.clients:
        assert muted[name] is not None and muted[name] >= told[name] - rounding[name], name
        assert muted[name] <= told[name] + rounding[name], name


def test_explain_says_the_throttle_the_connection_was_muted(scene: Scene) -> None:
    """`kqp explain`'s THROTTLES, what each client was told in all, is the time kqp muted it
    (`kqp_muted_seconds_total`), but for what a close cut short of the last mute."""
    for name, client in scene.clients.items():
        told = scene.explained[name]["throttles"]["total_seconds"]
        muted = sample(scene.samples, "kqp_muted_seconds_total", quota="producer_byte_rate", user="ANONYMOUS",
                       client_id=name)
        last = client.mutes[-1][1] if client.mutes else 0.0
        print(f"{name}: explain {told:.3f} s told, muted {muted:.3f} s, last throttle {last:.3f} s")
        assert muted is not None and muted - 0.01 <= told <= muted + last + 0.01, name
