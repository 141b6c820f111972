"""The fidelity matrix: client families under quotas, one cell per quota, each judged on the wire.

A `Cell` is one quota (a type, a limit, a scope: a client id, a prefix group, a capacity pool) and
the clients (`Member`s) that run under it, each of a family of tests/clients/ (`java-share`: Kafka's
share consumer, a share group's member, KIP-932) or a raw flood (helpers.raw_flood). `run_matrix`
runs every cell at once through one kqp behind wire taps (helpers.quota_path), one client id or
prefix per cell so that no two share a sensor. A cell with `via="kafka"` runs straight to Apache
Kafka instead, under Kafka's own quota (AlterClientQuotas), through the upstream tap: the referee
beside the same cell through kqp.

Each cell's `Verdict`, from what the wire saw: the long-span ratio (least-squares slope of the
cumulative units after the first span and the first burst, at the quota's ceiling, over the quota,
leaving out the dips of a client stalled on a busy host that then catches up: `ceiling_slope`;
Produce bytes, records or batches when the upstream acknowledged them, Fetch bytes, records or
batches when the client received them, requests when they reached the upstream, partitions when
their topic was created), the first burst (how far the cumulative units ran ahead of the quota's
line, in seconds of quota), the largest throttle told, the throttle told in all beside the time kqp
kept the cell's connections muted (`kqp_muted_seconds_total`: KIP-219 has them agree), and the
clients' own errors and timeouts. Used by tests/e2e/test_fidelity_matrix.py (short windows) and
`kqp bench --fidelity` (Kafka's default windows).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from kqp.protocol.apis import ApiKey

from . import client_programs, go_clients, java_clients, node_clients, old_kafka_python
from .client_programs import ClientProgram
from .names import unique_topic
from .observability import metrics_url, scrape
from .quota_analysis import ceiling_slope, cumulative_slope, forfeited
from .quota_path import QuotaPath, open_quota_path
from .raw_client import RawConnection, Tally
from .raw_flood import RawFlood
from .topics import ensure_topic
from .wire_tap import WireRequest, WireResponse, WireTap

PYTHON_CLIENT = client_programs.SOURCES / "python" / "client.py"
PYTHON_FAMILIES = ("confluent-kafka", "kcat", "kafka-python", "aiokafka")
RAW = {"raw-v3": 3, "raw-v7": 7}   # frames sent whatever the throttle: a v3 client cannot back off, a v7 one will not
KAFKA_TYPES = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"})
RECORD_BYTES = 1000
DRAIN_SECONDS = 90.0
CONSUMER_START = 8.0   # a consumer's run also covers starting and joining its group


@dataclass(frozen=True)
class Member:
    """One client of a cell: its family, client id, contract options and `--conf` settings."""

    family: str
    client_id: str
    options: Mapping[str, Any] = field(default_factory=dict)
    conf: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Cell:
    """One quota and the clients under it. `scope`: "entity" (its one member's client id), "prefix"
    (a client_id_prefix group of `name`-), "pool" (a capacity pool of `name`- members, each its own
    member). `via`: "kqp", or "kafka" for Kafka's own quota on the member's client id."""

    name: str
    quota_type: str
    quota: float
    members: tuple[Member, ...]
    scope: str = "entity"
    via: str = "kqp"
    partitions: int = 1

    @property
    def mode(self) -> str:
        if self.quota_type.startswith("consumer"):
            return "consume"
        return "mutate" if self.quota_type == "controller_mutation_rate" else "produce"

    @property
    def unit(self) -> str:
        return self.quota_type.split("_")[1] if self.quota_type.startswith(("producer", "consumer")) else "requests"

    @property
    def client_ids(self) -> frozenset[str]:
        return frozenset(m.client_id for m in self.members)


@dataclass
class Verdict:
    cell: Cell
    ratio: float | None          # the long-span rate at the quota's ceiling over the quota
    slope: float | None          # the plain least-squares rate over the quota, dips and all (shown beside)
    # What the cell got from its first units to the end of its offer, Kafka's first allowance aside,
    # over the quota: a first burst of large crossing requests is paid back over the run, as the
    # debt they left shrinks with the requests that follow, which no slope after the burst can see.
    average: float | None
    connections: int             # the connections its Produce requests reached the upstream on
    burst: float                 # the most the units ran ahead of the quota's line, in seconds of quota
    judged: float                # seconds judged (after the first span and the first throttle)
    # Seconds of quota the cell left unused while judged beyond what it may carry (Kafka's first
    # allowance): lost to it by the quota's own arithmetic, its clients' pace or the upstream's.
    forfeited: float
    throttle_max_ms: int
    told_s: float                # throttle_time_ms the clients were told, in all
    imposed_s: float | None      # the time kqp muted their connections (None: straight to Kafka)
    last_s: float                # each connection's last throttle told, summed: what a client's close may cut short
    throttled: int               # responses that told a throttle
    errors: list[str]
    timeouts: int
    shares: dict[str, float]     # each member's part of the cell's units (a group's, a pool's split)
    reports: dict[str, dict[str, Any]]

    @property
    def families(self) -> str:
        return "+".join(sorted({m.family for m in self.cell.members}))


# -- the clients --------------------------------------------------------------------------------

@functools.cache
def _kafka_python2() -> str:
    """kafka-python 2.x's interpreter, built once per machine into the client programs' cache."""
    def build(folder: Path) -> None:
        old_kafka_python.build(folder / "venv")

    folder = client_programs.built("kafka-python2", old_kafka_python.REQUIREMENT.replace("<", "-lt-"), build)
    return str(folder / "venv" / "bin" / "python")


def program(family: str) -> ClientProgram:
    """The contract program of `family` (tests/clients/README.md), built where it must be."""
    if family in PYTHON_FAMILIES:
        return ClientProgram(family, (sys.executable, str(PYTHON_CLIENT), family))
    if family == "kafka-python-2":
        try:
            python = _kafka_python2()
        except old_kafka_python.IndexUnreachable as exc:
            client_programs.unavailable(str(exc))
        return ClientProgram(family, (python, "-I", str(PYTHON_CLIENT), "kafka-python"))
    if family == "java":
        return ClientProgram(family, tuple(java_clients.java_command(java_clients.MAIN)))
    if family == "java-share":
        return java_clients.share_program()
    if family == "kafkajs":
        return node_clients.program()
    return go_clients.program(family)


class _Raw:
    """A raw flood in a thread, answering `result()` as a client program's run does."""

    def __init__(self, flood: RawFlood, seconds: float) -> None:
        self.flood = flood
        self.thread = threading.Thread(target=flood.run, args=(seconds,), daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self) -> dict[str, Any]:
        self.thread.join(DRAIN_SECONDS * 2)
        r = self.flood.report
        return {"client": f"raw-v{r.version}", "sent": r.sent, "acked": r.answered, "timeouts": r.timeouts,
                "errors": r.errors[:5], "throttle_ms_max": r.throttle_max_ms, "offer_start": r.started,
                "offer_end": r.offered_until}


def preload(upstream: str, topic: str, nbytes: float) -> None:
    """`nbytes` of 1000-byte records in 16 KB batches (the Java client's), straight to the upstream."""
    producer = Producer({"bootstrap.servers": upstream, "linger.ms": 5, "batch.size": 16384, "log_level": 3})
    value = b"x" * RECORD_BYTES
    for i in range(int(nbytes / RECORD_BYTES) + 1):
        while True:
            try:
                producer.produce(topic, value, f"k-{i}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0, f"preloading {topic} did not finish"


# -- the matrix ---------------------------------------------------------------------------------

PRODUCERS = ("confluent-kafka", "kcat", "kafka-python", "kafka-python-2", "aiokafka", "java", "sarama", "sarama-old",
             "franz-go", "kafkajs", "raw-v3", "raw-v7")
CONSUMERS = ("confluent-kafka", "kafka-python", "aiokafka", "java", "sarama", "franz-go", "kafkajs", "java-share")
BATCHED = {"batch_bytes": 16384}   # librdkafka's batches as the Java client's default (its own is 1 MB)
DEFAULTS_1MB = {"batch_bytes": 0, "outstanding_bytes": 3_000_000}   # librdkafka's own 1 MB batches, 3 in flight
# kafka-python 2 as old deployments run it, pinned to Kafka 0.11's versions (Produce v3: it cannot back
# off). Left to pick newer ones, 2.3.3 stalls after a short throttle whose end no event wakes its
# sender for (conn.connection_delay is infinite for a connected node): seconds without a request.
PRODUCER_OPTIONS: dict[str, dict[str, Any]] = {"confluent-kafka": BATCHED, "kcat": BATCHED,
                                               "kafka-python-2": {"conf": {"api_version": "0.11"}}}
TINY = {"linger_ms": 0, "record_bytes": 100, "acks": "1"}   # a request a record: request quotas' clients
SMALL_FETCHES = {"java": {"max.partition.fetch.bytes": 65536}, "kafka-python": {"max_partition_fetch_bytes": 65536}}
# Families the mock cluster cannot serve, through kqp or not (Kafka 4's Java client, Sarama 1.22 and
# kafkajs ask for APIs or versions it lacks; Sarama 1.61 cannot decode its answers); nor CreateTopics.
# Nor share groups (KIP-932), which Kafka 4.1+ alone serves.
NOT_ON_MOCK = frozenset({"java", "sarama", "sarama-old", "kafkajs", "java-share"})
REFEREE_PRODUCERS = ("confluent-kafka", "kafka-python", "aiokafka", "java", "sarama", "franz-go", "kafkajs")
REFEREE_CONSUMERS = ("confluent-kafka", "java", "franz-go", "java-share")
FETCHES = (ApiKey.Fetch, ApiKey.ShareFetch)   # a share consumer's fetches are charged as a consumer's


def _one(name: str, quota_type: str, quota: float, family: str, via: str = "kqp", **options: Any) -> Cell:
    conf = options.pop("conf", {})
    client_id = name if via == "kqp" else f"{name}-kafka"
    return Cell(name if via == "kqp" else client_id, quota_type, quota, (Member(family, client_id, options, conf),),
                via=via)


def standard_cells(windows: Mapping[str, float], kind: str = "kafka", referee: bool = False,
                   quota: float = 100_000) -> list[Cell]:
    """The matrix: every producer family under producer bytes, every consumer family under consumer
    bytes, librdkafka's default 1 MB batches alone and two in a prefix group, two Sarama producers in
    a pool, one client under each other quota type. 1 MB batches get the quota whose first allowance
    is 1 MB ((window_count - 1) windows of it). `kind` "mock": the cells the mock cluster can serve.
    `referee`: also the cells of the quota types Kafka has, straight to Kafka under its own quota."""
    allowance = (windows["window_count"] - 1) * windows["window_size_seconds"]
    one_mb = max(quota, 1_000_000 / allowance)
    out = [_one(f"p-{f}", "producer_byte_rate", quota, f, **PRODUCER_OPTIONS.get(f, {})) for f in PRODUCERS]
    out += [_one(f"c-{f}", "consumer_byte_rate", quota, f) for f in CONSUMERS]
    out += [
        _one("p-1mb", "producer_byte_rate", one_mb, "confluent-kafka", **DEFAULTS_1MB),
        # Two of them share a quota of two: each member's half is p-1mb's quota. Half as much would
        # have each 1 MB request owe twice as long, and the third of three in flight wait past
        # librdkafka's 60 s socket timeout (as behind a broker): retried on new connections, whose first
        # requests go as read, they swamp a 60 s run.
        Cell("g-1mb", "producer_byte_rate", 2 * one_mb, tuple(Member("confluent-kafka", f"g-1mb-{m}", DEFAULTS_1MB)
                                                              for m in "ab"), scope="prefix"),
        Cell("pool-sarama", "producer_byte_rate", 2 * quota, tuple(Member("sarama", f"pool-sarama-{m}")
                                                                   for m in "ab"), scope="pool"),
        _one("records-p", "producer_record_rate", quota / 1000, "confluent-kafka", **BATCHED),
        _one("batches-p", "producer_batch_rate", quota / 25_000, "franz-go"),
        _one("records-c", "consumer_record_rate", quota / 1000, "java", conf=SMALL_FETCHES["java"]),
        _one("batches-c", "consumer_batch_rate", quota / 25_000, "kafka-python", conf=SMALL_FETCHES["kafka-python"]),
        # KIP-124 caps a request quota's throttle at one window, so while a key owes, each of its
        # connections sends one request a window: a quota below connections / window cannot hold (the
        # mock's three brokers at 0.2 s windows: 15/s against 10/s). At 20/s the cap never binds, and a
        # loaded machine's round trips still let a client exceed it well.
        _one("requests", "request_rate", 20, "confluent-kafka", **TINY),
        # kqp times handlers by CPU while request_percentage is charged: a tiny request costs it tens of
        # microseconds: three one-at-a-time clients behind a loaded Kafka offered 0.2 % at times, and at
        # 0.1 % a producer pipelining a request per record waits out its request timeout in the socket.
        Cell("handler", "request_percentage", 0.25, tuple(Member("confluent-kafka", f"handler-{m}", TINY)
                                                           for m in "abc"), scope="prefix"),
    ]
    if kind != "mock":   # two partitions a topic, one CreateTopics at a time: a topic a tenth of a second or so
        out.append(_one("mutations", "controller_mutation_rate", 4, "confluent-kafka", partitions=2))
    if referee:
        out += [_one(f"p-{f}", "producer_byte_rate", quota, f, "kafka", **PRODUCER_OPTIONS.get(f, {}))
                for f in REFEREE_PRODUCERS]
        out += [_one(f"c-{f}", "consumer_byte_rate", quota, f, "kafka") for f in REFEREE_CONSUMERS]
        out += [_one("p-1mb", "producer_byte_rate", one_mb, "confluent-kafka", "kafka", **DEFAULTS_1MB),
                _one("handler", "request_percentage", 1, "confluent-kafka", "kafka", **TINY),
                _one("mutations", "controller_mutation_rate", 4, "confluent-kafka", "kafka", partitions=2)]
    if kind == "mock":
        out = [c for c in out if not {m.family for m in c.members} & NOT_ON_MOCK]
    return out


# -- the kqp config -----------------------------------------------------------------------------

def quotas_section(cells: Sequence[Cell], windows: Mapping[str, float], **more: Any) -> dict[str, Any]:
    """kqp's `quotas:` for the cells that run through kqp."""
    entities: list[dict[str, Any]] = []
    pools: list[dict[str, Any]] = []
    for cell in cells:
        if cell.via != "kqp":
            continue
        if cell.scope == "entity":
            entities.append({"client_id": cell.members[0].client_id, cell.quota_type: cell.quota})
        elif cell.scope == "prefix":
            entities.append({"client_id_prefix": f"{cell.name}-", cell.quota_type: cell.quota})
        elif cell.scope == "pool":
            pools.append({"name": cell.name, cell.quota_type: cell.quota,
                          "members": [{"client_id_prefix": f"{cell.name}-"}]})
        else:
            raise ValueError(f"unknown scope {cell.scope!r}")
    return {**windows, "entities": entities, **({"pools": pools} if pools else {}), **more}


def kafka_quotas(bootstrap: str, cells: Sequence[Cell]) -> None:
    """Kafka's own quota for every `via="kafka"` cell's client id (AlterClientQuotas, Admin API)."""
    for cell in cells:
        if cell.via != "kafka":
            continue
        assert cell.quota_type in KAFKA_TYPES and cell.scope == "entity", f"Kafka has no {cell.quota_type} {cell.scope}"
        done = java_clients.admin_alter(bootstrap, {"client-id": cell.members[0].client_id},
                                        {cell.quota_type: cell.quota})
        assert done["ok"], f"{cell.name}: {done}"


# -- running ------------------------------------------------------------------------------------

@dataclass
class Run:
    """A matrix under way: where clients went, and what they reported."""

    path: QuotaPath
    seconds: float
    span: float
    window: float
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    handler: list[tuple[float, dict[str, float]]] = field(default_factory=list)   # kqp's handler seconds
    muted: dict[str, float] = field(default_factory=dict)   # kqp_muted_seconds_total per client id, at the end
    kafka_request_time: dict[str, list[tuple[float, float]]] = field(default_factory=dict)   # Kafka's, per client id


def run_matrix(stack: contextlib.ExitStack, start_kqp: Callable[..., Any], upstream: Any, cells: Sequence[Cell], *,
               windows: Mapping[str, float], seconds: float, kqp_quotas: Mapping[str, Any] | None = None,
               jmx_url: str | None = None, **config: Any) -> Run:
    """Every cell at once for `seconds`: topics made and preloaded, kqp started with the cells'
    quotas, Kafka's quotas set for the referee cells; returns once every client has reported.
    `jmx_url`: the Kafka node's JMX, where a referee request_percentage cell's usage is read."""
    span = windows["window_size_seconds"] * windows["window_count"]
    quotas = quotas_section(cells, windows, **(kqp_quotas or {}))
    path = open_quota_path(stack, start_kqp, upstream, quotas, metrics={"listen": "127.0.0.1:0"}, **config)
    path.client_tap.count_fetches = any(c.mode == "consume" and c.unit != "byte" for c in cells)
    direct = path.upstream_tap.relay(upstream.split(",")[0])
    kafka_quotas(direct, cells)
    topics = {}
    for cell in cells:
        if cell.mode != "mutate":
            topics[cell.name] = unique_topic(cell.name.replace("_", "-"))
            ensure_topic(upstream, topics[cell.name], cell.partitions, upstream_kind=upstream.kind)
            if cell.mode == "consume":
                preload(upstream, topics[cell.name], _preload_bytes(cell, seconds + 2 * span))
    run = Run(path, seconds, span, windows["window_size_seconds"])
    running: list[tuple[Member, Any]] = []
    for cell in cells:
        bootstrap = path.bootstrap if cell.via == "kqp" else direct
        for member in cell.members:
            running.append((member, stack.enter_context(_start(cell, member, bootstrap, topics.get(cell.name), seconds))
                            if member.family not in RAW else _raw(path, cell, member, topics[cell.name], seconds)))
    if any(c.quota_type == "request_percentage" and c.via == "kqp" for c in cells):
        _watch_handler_time(run, running)
    for cell in cells:
        if cell.quota_type == "request_percentage" and cell.via == "kafka":
            assert jmx_url is not None, "Kafka's request time is read over JMX: start Kafka with jmx=True"
            _watch_kafka_request_time(stack, run, cell.members[0].client_id, jmx_url)
    for member, handle in running:
        try:
            run.reports[member.client_id] = handle.result()
        except RuntimeError as exc:
            run.reports[member.client_id] = {"errors": [str(exc)[-2000:]], "failed_to_run": True}
    for (name, labels), value in scrape(metrics_url(path.kqp)).items():
        if name == "kqp_muted_seconds_total":
            client_id = dict(labels).get("client_id", "")
            run.muted[client_id] = run.muted.get(client_id, 0.0) + value
    return run


def _start(cell: Cell, member: Member, bootstrap: str, topic: str | None, seconds: float) -> Any:
    prog = program(member.family)
    if cell.mode == "produce":
        return prog.start_produce(bootstrap, topic, member.client_id, seconds, conf=member.conf, **member.options)
    if cell.mode == "consume":   # its time starts before its group is joined (a JVM's, before it has started)
        return prog.start("consume", bootstrap, topic, member.client_id, unique_topic(f"g-{cell.name}"), 10**9,
                          seconds + CONSUMER_START, conf=member.conf, timeout=seconds + CONSUMER_START + DRAIN_SECONDS)
    return prog.start("mutate", bootstrap, unique_topic(cell.name.replace("_", "-")), member.client_id, seconds,
                      conf=member.conf, timeout=seconds + DRAIN_SECONDS, **member.options)


def _raw(path: QuotaPath, cell: Cell, member: Member, topic: str, seconds: float) -> _Raw:
    with RawConnection(path.bootstrap, f"{member.client_id}-lookup", Tally()) as lookup:
        leader = lookup.leader_address(topic)
    return _Raw(RawFlood(leader, topic, member.client_id, RAW[member.family], **member.options), seconds)


def largest_response(run: Run, cell: Cell) -> float:
    """The most units one event of the cell carried (one Fetch response: a consumer's burst may pass
    its line by one, which kqp can cap only for a byte quota; one topic's partitions: a CreateTopics
    of any size is admitted whole)."""
    return max((units for _, units, _ in events(run, cell)), default=0.0)


def _preload_bytes(cell: Cell, seconds: float) -> float:
    per_record = {"byte": RECORD_BYTES, "record": 1, "batch": 1 / 16}[cell.unit]
    return 1.3 * cell.quota * seconds * RECORD_BYTES / per_record


def _watch_handler_time(run: Run, running: list[tuple[Member, Any]]) -> None:
    """Scrape kqp's handler seconds per client id every half second while the clients run."""
    url = metrics_url(run.path.kqp)

    def watch() -> None:
        while not all(handle.done() for _, handle in running):
            try:
                found = scrape(url)
            except OSError:
                found = {}
            run.handler.append((time.monotonic(), {dict(labels).get("client_id", ""): value
                                                   for (name, labels), value in found.items()
                                                   if name == "kqp_request_handler_seconds_total"}))
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


def _watch_kafka_request_time(stack: contextlib.ExitStack, run: Run, client_id: str, jmx_url: str) -> None:
    """Kafka's own measure of a client id's request_percentage (the Request sensor's `request-time`,
    percent of a thread, over Kafka's windows), read every half second with Kafka's JmxTool (Kafka's
    JmxReporter leaves the empty user tag out of the bean's name)."""
    argv = java_clients.java_command("org.apache.kafka.tools.JmxTool", "--jmx-url", jmx_url, "--object-name",
                                     f"kafka.server:type=Request,client-id={client_id}", "--attributes",
                                     "request-time", "--reporting-interval", "500", "--wait")
    proc = stack.enter_context(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                                stdin=subprocess.DEVNULL, text=True))
    stack.callback(proc.kill)
    samples = run.kafka_request_time.setdefault(client_id, [])

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            fields = line.strip().split(",")
            with contextlib.suppress(ValueError, IndexError):
                samples.append((time.monotonic(), float(fields[-1])))

    threading.Thread(target=read, daemon=True).start()


# -- judging ------------------------------------------------------------------------------------

def _answered(tap: WireTap, client_ids: frozenset[str], api_key: int | None) -> list[tuple[WireRequest, WireResponse]]:
    requests = {(r.connection, r.correlation_id): r for r in tap.requests(api_key=api_key) if r.client_id in client_ids}
    pairs = []
    for response in tap.responses(api_key=api_key):
        request = requests.get((response.connection, response.correlation_id))
        if request is not None:
            pairs.append((request, response))
    return pairs


def events(run: Run, cell: Cell) -> list[tuple[float, float, str]]:
    """(time, units, client id) of what `cell` moved, as the wire saw it."""
    ids, path = cell.client_ids, run.path
    near = path.client_tap if cell.via == "kqp" else path.upstream_tap   # the tap next to the client
    if cell.mode == "produce" and cell.unit != "requests":
        unit = {"byte": lambda q: q.size, "record": lambda q: q.records, "batch": lambda q: q.batches}[cell.unit]
        if cell.via == "kqp":   # when kqp forwarded it (a request it holds first is forwarded later)
            return sorted((q.at, unit(q), q.client_id) for q in path.upstream_tap.requests(api_key=ApiKey.Produce)
                          if q.client_id in ids)
        # Kafka reads a muted connection's requests from its socket when it unmutes: when it answered.
        return sorted((r.at, unit(q), q.client_id) for q, r in _answered(path.upstream_tap, ids, ApiKey.Produce))
    if cell.mode == "consume":
        unit = {"byte": lambda r: r.size, "record": lambda r: r.records, "batch": lambda r: r.batches}[cell.unit]
        return sorted((r.at, unit(r), q.client_id) for api in FETCHES for q, r in _answered(near, ids, api))
    if cell.quota_type == "request_rate":
        return sorted((q.at, 1, q.client_id) for q in path.upstream_tap.requests() if q.client_id in ids)
    if cell.quota_type == "request_percentage":
        return _handler_events(run, cell) if cell.via == "kqp" else _kafka_request_events(run, cell)
    return sorted((at, partitions, m.client_id) for m in cell.members
                  for at, partitions in run.reports.get(m.client_id, {}).get("created", []))


def _handler_events(run: Run, cell: Cell) -> list[tuple[float, float, str]]:
    """kqp's handler time for the cell's client ids (its request_percentage unit, percent-seconds),
    as the growth between two scrapes."""
    out: list[tuple[float, float, str]] = []
    last = 0.0
    for at, values in run.handler:
        total = 100 * sum(v for cid, v in values.items() if cid in cell.client_ids)
        if total > last:
            out.append((at, total - last, cell.members[0].client_id))
            last = total
    return out


def _kafka_request_events(run: Run, cell: Cell) -> list[tuple[float, float, str]]:
    """Kafka's sampled request-time rate, as the percent-seconds each half second between samples held."""
    client_id = cell.members[0].client_id
    samples = [s for s in run.kafka_request_time.get(client_id, []) if s[1] > 0]
    return [(t, rate * (t - before), client_id) for (before, _), (t, rate) in itertools.pairwise(samples)]


def judge(run: Run, cell: Cell) -> Verdict:
    found = events(run, cell)
    reports = {m.client_id: run.reports.get(m.client_id, {}) for m in cell.members}
    errors = [f"{cid}: {e}" for cid, r in reports.items() for e in r.get("errors") or []]
    timeouts = sum(int(r.get("timeouts") or 0) for r in reports.values())
    ends = [r[key] for r in reports.values() for key in ("offer_end", "consume_end") if r.get(key)]
    near = run.path.client_tap if cell.via == "kqp" else run.path.upstream_tap
    answered = _answered(near, cell.client_ids, None)
    told = [(r.at, r.throttle_ms or 0) for _, r in answered]
    last: dict[int, int] = {}   # per connection, its last throttle told
    for _, r in sorted(answered, key=lambda pair: pair[1].at):
        if r.throttle_ms:
            last[r.connection] = r.throttle_ms
    ratio, slope, average, judged, burst, lost = None, None, None, 0.0, 0.0, 0.0
    if found:
        t0 = found[0][0]
        total, repaid = 0.0, t0
        allowance = run.span - run.window   # Kafka's first allowance, (window_count - 1) windows
        for t, units, _ in found:
            total += units
            ahead = total / cell.quota - (t - t0)
            if ahead > burst:
                burst = ahead
                if t <= t0 + run.span:   # the first burst: what it took beyond the allowance is paid back by then
                    repaid = t + max(0.0, ahead - allowance)
        # Judged from one span after the first units, after the first throttle (a client slow to get
        # going, a JVM starting, a group joining, spends its first allowance late, not in the first
        # span), and once the first burst's crossing requests are paid back: with 1 MB requests the
        # request that crosses the allowance on each connection can be many seconds of quota.
        start = max(t0 + run.span, min((at for at, ms in told if ms), default=t0), repaid)
        end = min(ends) if ends and min(ends) > start else found[-1][0]
        judged = end - start
        if end > t0:
            got = sum(units for t, units, _ in found if t <= end) / cell.quota
            average = (got - allowance) / (end - t0)
        units_at = [(t, u) for t, u, _ in found]
        lost = forfeited(units_at, cell.quota, allowance, start, end)
        with contextlib.suppress(ValueError):
            slope = cumulative_slope(units_at, start, end) / cell.quota
            # A dip deeper than the largest event and one window of quota (kqp's steady ceiling is flat
            # within one) is a stall; Kafka's sampled rate saws by most of a span as bursts age out.
            depth = cell.quota * (run.window if cell.via == "kqp" else run.span) + max(u for _, u in units_at)
            ratio = ceiling_slope(units_at, start, end, quota=cell.quota, reach=run.span, depth=depth) / cell.quota
    throttles = [ms for _, ms in told]
    units: dict[str, float] = {}
    for _, amount, cid in found:
        units[cid] = units.get(cid, 0.0) + amount
    whole = sum(units.values()) or 1.0
    imposed = sum(run.muted.get(cid, 0.0) for cid in cell.client_ids) if cell.via == "kqp" else None
    tap = run.path.upstream_tap
    connections = len({q.connection for q in tap.requests(api_key=ApiKey.Produce) if q.client_id in cell.client_ids})
    return Verdict(cell, ratio, slope, average, connections, burst, judged, lost, max(throttles, default=0),
                   sum(throttles) / 1000, imposed, sum(last.values()) / 1000, sum(1 for ms in throttles if ms),
                   errors, timeouts, {cid: amount / whole for cid, amount in units.items()}, reports)


def judge_all(run: Run, cells: Sequence[Cell]) -> list[Verdict]:
    return [judge(run, cell) for cell in cells]


def table(verdicts: Sequence[Verdict]) -> str:
    """One line per cell: what it is, its ratio (and the plain slope), first burst, largest throttle, errors."""
    lines = [f"{'cell':28} {'via':5} {'clients':22} {'quota type':22} {'scope':6} {'ratio':>6} {'slope':>6} "
             f"{'burst s':>7} {'judged s':>8} {'lost s':>6} {'max throttle ms':>15} {'told s':>7} {'muted s':>7} "
             f"{'errors':>6}"]
    for v in verdicts:
        ratio, slope = ("-" if x is None else f"{x:.3f}" for x in (v.ratio, v.slope))
        muted = "-" if v.imposed_s is None else f"{v.imposed_s:.1f}"
        lines.append(f"{v.cell.name:28} {v.cell.via:5} {v.families[:22]:22} {v.cell.quota_type:22} "
                     f"{v.cell.scope:6} {ratio:>6} {slope:>6} {v.burst:7.1f} {v.judged:8.1f} {v.forfeited:6.1f} "
                     f"{v.throttle_max_ms:15d} "
                     f"{v.told_s:7.1f} {muted:>7} {len(v.errors) + v.timeouts:6d}")
    return "\n".join(lines)


@contextlib.contextmanager
def matrix(start_kqp: Callable[..., Any], upstream: Any, cells: Sequence[Cell], **kw: Any) -> Iterator[list[Verdict]]:
    """Run and judge `cells` (`run_matrix`); kqp, taps and clients stop when the block ends."""
    with contextlib.ExitStack() as stack:
        run = run_matrix(stack, start_kqp, upstream, cells, **kw)
        yield judge_all(run, cells)


def agrees(verdict: Verdict, window: float) -> bool:
    """KIP-219's promise for a cell through kqp: the time its connections were muted is the throttle
    its clients were told, to within one window and a millisecond a throttle (Kafka's unit), less what
    closing connections cut short of their last throttles (a client that stops does not wait its last
    one out)."""
    imposed = verdict.imposed_s
    slack = window + verdict.throttled / 1000
    return imposed is None or verdict.told_s - verdict.last_s - slack <= imposed <= verdict.told_s + slack
