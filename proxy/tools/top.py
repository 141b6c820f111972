"""`kqp top`: a live terminal view of one kqp, read from its /metrics endpoint.

One row per entity (user, client id): each quota's measured rate against its limit, the share of
time its connections spent throttled, its muted connections; furthest over any quota first. A
client-id prefix group has a row of its own (`etl-*`) followed by its members, indented, each with
its own usage, so the members add up to the group. Pools (top_pools.py) and client software
(top_clients.py) follow. Rates against limits are kqp's own quota measurements; the rest are
counters differentiated between two reads: THROTTLED, seconds muted by a throttle per second
(`kqp_muted_seconds_total`; 1.00: a connection always muted); MODE and WOULD THROTTLE (while a quota
is observed), the share of time observed quotas would have muted the entity. `--once` reads twice.

Drawing is plain ANSI rather than curses: it redraws without flicker in any terminal and in tmux,
and with `--once` or a pipe the same frame is plain text. Parsing and rendering are pure functions
of the scraped text, tested without a terminal.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from kqp.proxy.tools import top_clients
from kqp.proxy.tools.top_pools import PoolView, add_sample, pool_lines
from kqp.quotas.model import QuotaType

DEFAULT_URL = "http://127.0.0.1:9404/metrics"
# Quota type -> column title and unit. Order: the order columns appear in.
COLUMNS: dict[str, tuple[str, str]] = {   # QuotaType keys: equal to the metric's label text
    QuotaType.PRODUCER_BYTE_RATE: ("PRODUCE", "B/s"),
    QuotaType.CONSUMER_BYTE_RATE: ("FETCH", "B/s"),
    QuotaType.REQUEST_PERCENTAGE: ("REQUEST", "%"),
    QuotaType.REQUEST_RATE: ("REQUESTS", "/s"),
    QuotaType.CONTROLLER_MUTATION_RATE: ("MUTATIONS", "/s"),
    QuotaType.PRODUCER_RECORD_RATE: ("PROD RECORDS", "/s"),
    QuotaType.PRODUCER_BATCH_RATE: ("PROD BATCHES", "/s"),
    QuotaType.CONSUMER_RECORD_RATE: ("FETCH RECORDS", "/s"),
    QuotaType.CONSUMER_BATCH_RATE: ("FETCH BATCHES", "/s"),
}
# A principal's own usage, per quota type, from its counters: (sample, direction or None, factor).
# Batches and mutations have no per-principal counter: a member's cell for them is "-".
OWN_USAGE: dict[str, tuple[str, str | None, float]] = {
    QuotaType.PRODUCER_BYTE_RATE: ("kqp_bytes_total", "produce", 1.0),
    QuotaType.CONSUMER_BYTE_RATE: ("kqp_bytes_total", "fetch", 1.0),
    QuotaType.PRODUCER_RECORD_RATE: ("kqp_records_total", "produce", 1.0),
    QuotaType.CONSUMER_RECORD_RATE: ("kqp_records_total", "fetch", 1.0),
    QuotaType.REQUEST_RATE: ("kqp_requests_total", None, 1.0),
    QuotaType.REQUEST_PERCENTAGE: ("kqp_request_handler_seconds_total", None, 100.0),   # % of a thread
}
CLEAR_LINE, CLEAR_BELOW, HOME = "\x1b[K", "\x1b[J", "\x1b[H"
HIDE_CURSOR, SHOW_CURSOR, BOLD, RESET = "\x1b[?25l", "\x1b[?25h", "\x1b[1m", "\x1b[0m"
# Counters are differentiated over this long, about a quota span (Kafka's default 11 x 1 s): a
# member's own usage then compares with its group's sampled rate, and one long mute reads as the
# share of time it took rather than as all or nothing.
RATE_SECONDS = 10.0
LEGEND = (f"THROTTLED: seconds muted by a throttle per second, over its connections (1.00 = one always muted); "
          f"last {RATE_SECONDS:.0f} s")
OBSERVE_LEGEND = "WOULD THROTTLE: share of time quotas in mode observe would have muted the entity (none muted)"

Key = tuple[str, str, bool]   # (user, client id or prefix, group)


@dataclass
class Entity:
    user: str
    client_id: str                    # for a prefix group, its prefix
    group: bool = False               # a client-id prefix group, never merged with a client id
    quotas: dict[str, tuple[float, float]] = field(default_factory=dict)  # quota -> (rate, limit)
    muted_seconds: dict[str, float] = field(default_factory=dict)  # counter: quota -> connection-seconds muted
    counters: dict[str, float] = field(default_factory=dict)       # counter: quota -> own usage so far
    groups: dict[str, Key] = field(default_factory=dict)           # quota -> the group it is charged to
    throttled: dict[str, float] | None = None   # quota -> muted seconds per second since the baseline read
    own: dict[str, float] | None = None         # quota -> own usage per second since the baseline read
    muted: int = 0
    observed: set[str] = field(default_factory=set)   # quotas in mode observe
    observed_seconds: dict[str, float] = field(default_factory=dict)   # counter: quota -> would-be-muted seconds
    would: dict[str, float] | None = None       # quota -> would-be-muted seconds per second (0-1)

    @property
    def name(self) -> str:
        """The CLIENT_ID cell: a group's prefix followed by `*`."""
        return f"{self.client_id}*" if self.group else self.client_id or "-"

    @property
    def worst(self) -> float:
        """The highest rate/limit over the entity's own quotas (inf for a used zero quota)."""
        return max((_ratio(rate, limit) for q, (rate, limit) in self.quotas.items() if q not in self.groups),
                   default=0.0)

    def mode(self, quotas: set[str] | None = None) -> str:
        """observe, enforce or mixed, over `quotas` (default: the quotas that are its own)."""
        mine = {q for q in self.quotas if q not in self.groups} if quotas is None else quotas
        watched = mine & self.observed
        return "-" if not mine else "observe" if watched == mine else "mixed" if watched else "enforce"

    def would_rate(self, quotas: set[str] | None = None) -> float | None:
        """Observed throttle seconds per second over `quotas` (default: its own)."""
        if self.would is None:
            return None
        if quotas is None:
            quotas = {q for q in self.would if q not in self.groups}
        return sum(v for q, v in self.would.items() if q in quotas)

    def throttled_rate(self, quotas: set[str] | None = None) -> float | None:
        """Muted seconds per second over `quotas` (default: the quotas that are its own)."""
        if self.throttled is None:
            return None
        if quotas is None:
            quotas = {q for q in self.throttled if q not in self.groups}
        return sum(v for q, v in self.throttled.items() if q in quotas)


@dataclass
class Scrape:
    """What one /metrics read says, reduced to what top shows."""

    taken_at: float
    entities: dict[Key, Entity] = field(default_factory=dict)
    connections: float = 0.0
    muted: float = 0.0
    delay_queue: float = 0.0
    ready: float | None = None
    pools: dict[tuple[str, str], PoolView] = field(default_factory=dict)   # (pool, quota type)
    clients: dict[tuple[str, str], top_clients.SoftwareView] = field(default_factory=dict)   # (software, version)

    def members(self, group: Entity) -> list[Entity]:
        """The principals charged to `group`, busiest first."""
        key = (group.user, group.client_id, True)
        found = [e for e in self.entities.values() if key in e.groups.values()]
        first = next(iter(group.quotas), None)
        return sorted(found, key=lambda e: (-(e.own or {}).get(first or "", 0.0), e.user, e.client_id))

    def rows(self) -> list[Entity]:
        """Entities shown at the top level: groups, and principals with traffic outside any group."""
        return [e for e in self.entities.values()
                if e.group or not e.groups or any(q not in e.groups for q in e.quotas)]


def _ratio(rate: float, limit: float) -> float:
    if limit > 0:
        return rate / limit
    return math.inf if rate > 0 else 0.0


def parse(text: str, taken_at: float) -> Scrape:
    """The /metrics exposition text as a `Scrape`."""
    out = Scrape(taken_at)

    def entity(user: str, client_id: str, group: bool = False) -> Entity:
        key = (user, client_id, group)
        found = out.entities.get(key)
        if found is None:
            found = out.entities[key] = Entity(*key)
        return found

    def principal(labels: dict[str, str]) -> Entity:
        if "client_id_prefix" in labels:
            return entity(labels.get("user", ""), labels["client_id_prefix"], True)
        return entity(labels.get("user", ""), labels.get("client_id", ""))

    own = {(sample, direction): (quota, factor) for quota, (sample, direction, factor) in OWN_USAGE.items()}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name, labels, value = s.name, s.labels, s.value
            if add_sample(out.pools, name, labels, value) or top_clients.add_sample(out.clients, name, labels, value):
                continue
            if name in ("kqp_quota_usage", "kqp_quota_limit", "kqp_quota_group_usage", "kqp_quota_group_limit"):
                e = principal(labels)
                rate, limit = e.quotas.get(labels["quota"], (0.0, 0.0))
                e.quotas[labels["quota"]] = (value, limit) if name.endswith("_usage") else (rate, value)
            elif name == "kqp_quota_group_member":
                member = entity(labels["member_user"], labels["member_client_id"])
                member.groups[labels["quota"]] = (labels["user"], labels["client_id_prefix"], True)
            elif name == "kqp_muted_seconds_total":
                e = principal(labels)
                e.muted_seconds[labels["quota"]] = e.muted_seconds.get(labels["quota"], 0.0) + value
            elif name == "kqp_entity_muted_connections":
                principal(labels).muted += int(value)
            elif name == "kqp_quota_observed":
                principal(labels).observed.add(labels["quota"])
            elif name == "kqp_observed_muted_seconds_total":
                e = principal(labels)
                e.observed_seconds[labels["quota"]] = e.observed_seconds.get(labels["quota"], 0.0) + value
            elif name in ("kqp_bytes_total", "kqp_records_total", "kqp_requests_total",
                          "kqp_request_handler_seconds_total"):
                e = principal(labels)   # every entity with traffic gets a row, quota or not
                found = own.get((name, labels.get("direction")))
                if found is not None:
                    quota, factor = found
                    e.counters[quota] = e.counters.get(quota, 0.0) + value * factor
            elif name == "kqp_connections":
                out.connections += value
            elif name == "kqp_muted_connections":
                out.muted = value
            elif name == "kqp_delay_queue_size":
                out.delay_queue += value
            elif name == "kqp_ready":
                out.ready = value
    return out


def _per_second(now: dict[str, float], before: dict[str, float] | None, elapsed: float) -> dict[str, float]:
    # A decrease is a counter reset (kqp restarted, or the entity expired and came back).
    base = before or {}
    return {k: ((v - base.get(k, 0.0)) if v >= base.get(k, 0.0) else v) / elapsed for k, v in now.items()}


def with_rates(current: Scrape, previous: Scrape | None) -> Scrape:
    """Fill each entity's THROTTLED and own usage from its counters' change since `previous`."""
    if previous is None:
        return current
    elapsed = current.taken_at - previous.taken_at
    if elapsed <= 0:
        return current
    for key, e in current.entities.items():
        before = previous.entities.get(key)
        e.throttled = _per_second(e.muted_seconds, before.muted_seconds if before else None, elapsed)
        e.own = _per_second(e.counters, before.counters if before else None, elapsed)
        e.would = _per_second(e.observed_seconds, before.observed_seconds if before else None, elapsed)
    return current


def baseline(history: deque[Scrape], now: float) -> Scrape | None:
    """The read the rates start from: the latest one at least RATE_SECONDS old, or the oldest kept.
    Older reads are dropped, so the history holds about RATE_SECONDS / interval reads."""
    while len(history) > 1 and now - history[1].taken_at >= RATE_SECONDS:
        history.popleft()
    return history[0] if history else None


def ordered(scrape: Scrape) -> list[tuple[Entity, Entity | None]]:
    """(row, its group if it is shown as a member): furthest over quota first, then most throttled,
    then by name; a group's members follow it."""
    out: list[tuple[Entity, Entity | None]] = []
    def rank(e: Entity) -> tuple[float, float, str, str]:
        return -e.worst, -(_group_throttled(scrape, e) or 0.0), e.user, e.name

    for e in sorted(scrape.rows(), key=rank):
        out.append((e, None))
        if e.group:
            out.extend((m, e) for m in scrape.members(e))
    return out


def _group_mode(scrape: Scrape, e: Entity) -> str:
    """A row's MODE: a group's from its members' quotas of the group."""
    if not e.group:
        return e.mode()
    modes = {m.mode(set(e.quotas) & set(m.groups)) for m in scrape.members(e)} - {"-"}
    return "-" if not modes else modes.pop() if len(modes) == 1 else "mixed"


def _group_would(scrape: Scrape, e: Entity) -> float | None:
    if not e.group:
        return e.would_rate()
    rates = [r for m in scrape.members(e) if (r := m.would_rate(set(e.quotas))) is not None]
    return sum(rates) if rates else None


def _group_throttled(scrape: Scrape, e: Entity) -> float | None:
    """THROTTLED of a top-level row: a group's is its members' over the group's quotas."""
    if not e.group:
        return e.throttled_rate()
    rates = [r for m in scrape.members(e) if (r := m.throttled_rate(set(e.quotas))) is not None]
    return sum(rates) if rates else None


def human(value: float, unit: str) -> str:
    """A short number: 1.5Mi for bytes (binary prefixes), 12.3k otherwise."""
    if math.isinf(value):
        return "inf"
    base, prefixes = (1024.0, ("", "Ki", "Mi", "Gi", "Ti")) if unit == "B/s" else (1000.0, ("", "k", "M", "G", "T"))
    for prefix in prefixes:
        if abs(value) < base or prefix == prefixes[-1]:
            text = f"{value:.0f}" if prefix == "" and float(value).is_integer() else f"{value:.1f}"
            return f"{text}{prefix}"
        value /= base
    raise AssertionError("unreachable")


def render(scrape: Scrape, url: str, width: int = 120, height: int = 40, error: str | None = None) -> list[str]:
    """The screen's lines, each at most `width` characters."""
    clock = time.strftime("%H:%M:%S")
    ready = {None: "?", 1.0: "ready"}.get(scrape.ready, "NOT READY")
    lines = [f"kqp top  {url}  {clock}  {ready}",
             f"connections {scrape.connections:.0f}  muted {scrape.muted:.0f}  delay queue {scrape.delay_queue:.0f}"
             f"  entities {len(scrape.entities)}"]
    if error:
        lines.append(f"! {error}")
    quota_types = [q for q in COLUMNS if any(q in e.quotas for e in scrape.entities.values())]
    cells = [f"{COLUMNS[q][0]} {COLUMNS[q][1]}" for q in quota_types]
    observing = any(e.observed or e.observed_seconds for e in scrape.entities.values())
    header = ["USER", "CLIENT_ID", "OVER", *cells, "THROTTLED", "MUTED", *(("MODE", "WOULD THROTTLE") if observing
                                                                           else ())]
    rows = [header]
    for e, group in ordered(scrape):
        if group is not None:
            rows.append(_member_row(e, group, quota_types, observing))
            continue
        row = [e.user, e.name, f"{e.worst * 100:.0f}%" if any(q not in e.groups for q in e.quotas) else "-"]
        for q in quota_types:
            if q in e.quotas and q not in e.groups:
                rate, limit = e.quotas[q]
                row.append(f"{human(rate, COLUMNS[q][1])}/{human(limit, COLUMNS[q][1])}")
            else:
                row.append("-")
        throttled = _group_throttled(scrape, e)
        row.append("-" if throttled is None else f"{throttled:.2f}s/s")
        row.append(str(sum(m.muted for m in scrape.members(e)) if e.group else e.muted))
        if observing:
            would = _group_would(scrape, e)
            row += [_group_mode(scrape, e), "-" if would is None else f"{would:.2f}s/s"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    pools = pool_lines(scrape.pools, human, {q: unit for q, (_, unit) in COLUMNS.items()}) + \
        top_clients.client_lines(scrape.clients)
    lines.append("")
    room = max(height - len(lines) - len(pools), 2)
    legend = room > len(rows)   # the legend goes below the table when it fits
    if len(rows) > room:    # keep the last line for saying how many did not fit
        hidden = len(rows) - room + 1
        rows = [*rows[: room - 1], [f"... {hidden} more"]]
    for r in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)).rstrip())
    if legend:
        lines.append(LEGEND)
        if observing:
            lines.append(OBSERVE_LEGEND)
    return [line[:width] for line in [*lines, *pools]]


def _member_row(e: Entity, group: Entity, quota_types: list[str], observing: bool = False) -> list[str]:
    """A member under its group: its own usage of the group's quotas, its own throttled share."""
    row = [e.user, f"  {e.name}", "-"]
    key = (group.user, group.client_id, True)
    for q in quota_types:
        own = (e.own or {}).get(q) if e.groups.get(q) == key else None
        row.append("-" if own is None else human(own, COLUMNS[q][1]))
    throttled = e.throttled_rate(set(group.quotas))
    row.append("-" if throttled is None else f"{throttled:.2f}s/s")
    row.append(str(e.muted))
    if observing:
        would = e.would_rate(set(group.quotas))
        row += [e.mode(set(group.quotas) & set(e.groups)), "-" if would is None else f"{would:.2f}s/s"]
    return row


def fetch(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8")


@contextlib.contextmanager
def _keys() -> Iterator[bool]:
    """cbreak mode on a terminal stdin, so 'q' quits without Enter; yields whether keys can be read."""
    if not sys.stdin.isatty():
        yield False
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _wait_for_quit(interval: float, keys: bool) -> bool:
    if not keys:
        time.sleep(interval)
        return False
    ready, _, _ = select.select([sys.stdin], [], [], interval)
    return bool(ready) and os.read(sys.stdin.fileno(), 32).strip().lower().startswith(b"q")


def run_top(url: str = DEFAULT_URL, interval: float = 1.0, once: bool = False, count: int | None = None) -> int:
    """Redraw every `interval` seconds until 'q', Ctrl-C or `count` frames; 0 on a clean exit."""
    tty_out = sys.stdout.isatty() and not once
    history: deque[Scrape] = deque()
    frames = 0
    if tty_out:
        sys.stdout.write(HIDE_CURSOR)
    try:
        with _keys() as keys:
            while True:
                error = None
                try:
                    if once:   # rates need two reads: the first one interval before the frame
                        history.append(parse(fetch(url), time.monotonic()))
                        time.sleep(interval)
                    now = time.monotonic()
                    current = with_rates(parse(fetch(url), now), baseline(history, now))
                    history.append(current)
                except (OSError, urllib.error.URLError, ValueError) as exc:
                    error = f"cannot read {url}: {exc}"
                    current = history[-1] if history else Scrape(time.monotonic())
                size = shutil.get_terminal_size((120, 40))
                lines = render(current, url, size.columns, size.lines - 1 if tty_out else 10_000, error)
                if tty_out:
                    sys.stdout.write(HOME + "".join(f"{line}{CLEAR_LINE}\n" for line in lines) + CLEAR_BELOW)
                else:
                    sys.stdout.write("\n".join(lines) + "\n\n")
                sys.stdout.flush()
                frames += 1
                if once:
                    return 0 if error is None else 1
                if count is not None and frames >= count:
                    return 0
                if _wait_for_quit(interval, keys):
                    return 0
    except KeyboardInterrupt:
        return 0
    finally:
        if tty_out:
            sys.stdout.write(SHOW_CURSOR)
            sys.stdout.flush()
