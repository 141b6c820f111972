"""`kqp top`: a live terminal view of one kqp, read from its /metrics endpoint.

One row per entity (user, client id): each quota's measured rate against its limit, the throttle
time it is getting, its muted connections; the entity furthest over any of its quotas comes first.
A client-id prefix group has a row of its own, its client id shown as the prefix followed by `*`
(`spark-job-42-*`), beside its members' rows. Capacity pools follow the entities, one block each
(top_pools.py).
The rates are the ones kqp measures its quotas with (`kqp_quota_usage`, `kqp_quota_limit`), so
top does no differentiation of its own except for throttle time, which is a counter: its rate is
the difference between two refreshes.

Drawing is plain ANSI (cursor home, clear to end of line, clear below) rather than curses: it
redraws without flicker in any terminal and in tmux, and with `--once`, or when stdout is not a
terminal, the same frame is printed as plain text for scripts. Parsing and rendering are pure
functions of the scraped text, tested without a terminal.
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
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

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
CLEAR_LINE, CLEAR_BELOW, HOME = "\x1b[K", "\x1b[J", "\x1b[H"
HIDE_CURSOR, SHOW_CURSOR, BOLD, RESET = "\x1b[?25l", "\x1b[?25h", "\x1b[1m", "\x1b[0m"


@dataclass
class Entity:
    user: str
    client_id: str                    # for a prefix group, its prefix
    group: bool = False               # a client-id prefix group, never merged with a client id
    quotas: dict[str, tuple[float, float]] = field(default_factory=dict)  # quota -> (rate, limit)
    throttle_seconds: float = 0.0     # counter: total throttle given so far
    throttle_rate: float | None = None  # seconds of throttle per second since the previous refresh
    muted: int = 0

    @property
    def name(self) -> str:
        """The CLIENT_ID cell: a group's prefix followed by `*`."""
        return f"{self.client_id}*" if self.group else self.client_id or "-"

    @property
    def worst(self) -> float:
        """The highest rate/limit over the entity's quotas (inf for a used zero quota)."""
        return max((_ratio(rate, limit) for rate, limit in self.quotas.values()), default=0.0)


@dataclass
class Scrape:
    """What one /metrics read says, reduced to what top shows."""

    taken_at: float
    entities: dict[tuple[str, str, bool], Entity] = field(default_factory=dict)   # (user, client id, group)
    connections: float = 0.0
    muted: float = 0.0
    delay_queue: float = 0.0
    ready: float | None = None
    pools: dict[tuple[str, str], PoolView] = field(default_factory=dict)   # (pool, quota type)


def _ratio(rate: float, limit: float) -> float:
    if limit > 0:
        return rate / limit
    return math.inf if rate > 0 else 0.0


def parse(text: str, taken_at: float) -> Scrape:
    """The /metrics exposition text as a `Scrape`."""
    out = Scrape(taken_at)

    def entity(labels: dict[str, str]) -> Entity:
        group = "client_id_prefix" in labels
        key = (labels.get("user", ""), labels["client_id_prefix"] if group else labels.get("client_id", ""), group)
        found = out.entities.get(key)
        if found is None:
            found = out.entities[key] = Entity(*key)
        return found

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name, labels, value = s.name, s.labels, s.value
            if add_sample(out.pools, name, labels, value):
                continue
            if name in ("kqp_quota_usage", "kqp_quota_limit", "kqp_quota_group_usage", "kqp_quota_group_limit"):
                e = entity(labels)
                rate, limit = e.quotas.get(s.labels["quota"], (0.0, 0.0))
                e.quotas[s.labels["quota"]] = (value, limit) if name.endswith("_usage") else (rate, value)
            elif name == "kqp_requests_total":
                entity(labels)   # every entity with traffic gets a row, quota or not
            elif name == "kqp_throttle_seconds_total":
                entity(labels).throttle_seconds += value
            elif name == "kqp_entity_muted_connections":
                entity(labels).muted += int(value)
            elif name == "kqp_connections":
                out.connections += value
            elif name == "kqp_muted_connections":
                out.muted = value
            elif name == "kqp_delay_queue_size":
                out.delay_queue += value
            elif name == "kqp_ready":
                out.ready = value
    return out


def with_throttle_rates(current: Scrape, previous: Scrape | None) -> Scrape:
    """Fill each entity's throttle rate from the counter's change since `previous`."""
    if previous is None:
        return current
    elapsed = current.taken_at - previous.taken_at
    if elapsed <= 0:
        return current
    for key, e in current.entities.items():
        before = previous.entities.get(key)
        start = before.throttle_seconds if before is not None else 0.0
        delta = e.throttle_seconds - start
        # A negative change is a counter reset (kqp restarted, or the entity expired and came back).
        e.throttle_rate = (delta if delta >= 0 else e.throttle_seconds) / elapsed
    return current


def ordered(scrape: Scrape) -> list[Entity]:
    """Furthest over quota first, then most throttled, then by name."""
    return sorted(scrape.entities.values(),
                  key=lambda e: (-e.worst, -(e.throttle_rate or 0.0), -e.throttle_seconds, e.user, e.name))


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
    header = ["USER", "CLIENT_ID", "OVER", *cells, "THROTTLE", "MUTED"]
    rows = [header]
    for e in ordered(scrape):
        row = [e.user, e.name, f"{e.worst * 100:.0f}%" if e.quotas else "-"]
        for q in quota_types:
            if q in e.quotas:
                rate, limit = e.quotas[q]
                row.append(f"{human(rate, COLUMNS[q][1])}/{human(limit, COLUMNS[q][1])}")
            else:
                row.append("-")
        row.append("-" if e.throttle_rate is None else f"{e.throttle_rate:.2f}s/s")
        row.append(str(e.muted))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    pools = pool_lines(scrape.pools, human, {q: unit for q, (_, unit) in COLUMNS.items()})
    lines.append("")
    room = max(height - len(lines) - len(pools), 2)
    if len(rows) > room:    # keep the last line for saying how many did not fit
        hidden = len(rows) - room + 1
        rows = [*rows[: room - 1], [f"... {hidden} more"]]
    for r in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)).rstrip())
    return [line[:width] for line in [*lines, *pools]]


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
    previous: Scrape | None = None
    frames = 0
    if tty_out:
        sys.stdout.write(HIDE_CURSOR)
    try:
        with _keys() as keys:
            while True:
                error = None
                try:
                    current = with_throttle_rates(parse(fetch(url), time.monotonic()), previous)
                    previous = current
                except (OSError, urllib.error.URLError, ValueError) as exc:
                    error = f"cannot read {url}: {exc}"
                    current = previous or Scrape(time.monotonic())
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
