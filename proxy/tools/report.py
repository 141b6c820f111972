"""`kqp report`: what each entity used over a period, for a team lead (table) or a finance sheet (CSV).

Per principal (user, client id): produced and fetched bytes (Produce request and Fetch response
frames, as `kqp_bytes_total` counts them), requests, throttle seconds told, and the seconds quotas in
mode observe would have muted the entity: each Prometheus's `increase()` of kqp's counters over the
period, summed over every kqp it scrapes. Rows sum honestly (one principal each); the table and JSON
add each prefix group's subtotal, labelled as such, from `kqp_quota_group_member`. `--by topic`
splits the bytes per topic (`kqp_topic_bytes_total`, kqp's `metrics.topic_bytes`); what no topic
carries (frame headers, and requests and throttles, which are a client's, not a topic's) stays on
the principal's row with an empty topic, so every column still adds up to the principal's figures.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from .prometheus_api import Prometheus, PrometheusError, parse_duration
from .usage_history import Entities, Period, per_principal, principal_of

__all__ = ["CSV_COLUMNS", "Row", "add_parser", "collect", "render", "run"]

EXIT_UNREADABLE, EXIT_USAGE = 1, 2
CSV_COLUMNS = ("user", "client_id", "topic", "produced_bytes", "fetched_bytes", "requests", "throttled_seconds",
               "observed_muted_seconds")
# Column -> the counter whose increase it is.
COUNTERS = {"produced_bytes": 'kqp_bytes_total{direction="produce"}',
            "fetched_bytes": 'kqp_bytes_total{direction="fetch"}',
            "requests": "kqp_requests_total",
            "throttled_seconds": "kqp_throttle_seconds_total",
            "observed_muted_seconds": "kqp_observed_muted_seconds_total"}
TOPIC_COUNTER = "kqp_topic_bytes_total"


@dataclass
class Row:
    user: str
    client_id: str
    topic: str | None = None       # None: not split by topic; "": what no topic carries
    produced_bytes: float = 0.0
    fetched_bytes: float = 0.0
    requests: float = 0.0
    throttled_seconds: float = 0.0
    observed_muted_seconds: float = 0.0

    def add(self, other: Row) -> None:
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Report:
    period: Period
    rows: list[Row]
    groups: list[tuple[str, list[Row]]]   # (a prefix group's name, its subtotal rows and members)
    by_topic: bool

    def total(self) -> Row:
        total = Row("", "")
        for row in self.rows:
            total.add(row)
        return total


def collect(period: Period, by_topic: bool = False) -> Report:
    """The period's rows (module docstring); PrometheusError if kqp exports no per-topic bytes."""
    rows: dict[tuple[str, str], Row] = {}
    for column, counter in COUNTERS.items():
        for series in period.vector(per_principal("increase", counter, period.range)):
            p = principal_of(series["metric"])
            row = rows.setdefault((p.user, p.client_id), Row(p.user, p.client_id))
            setattr(row, column, float(series["value"][1]))
    out = [r for r in rows.values() if any(getattr(r, c) > 0 for c in COUNTERS)]
    if by_topic:
        out = _split(period, out)
    out.sort(key=lambda r: (r.user, r.client_id, r.topic or ""))
    return Report(period, out, _groups(period, out), by_topic)


def _split(period: Period, rows: list[Row]) -> list[Row]:
    found = period.vector(per_principal("increase", TOPIC_COUNTER, period.range, ("direction", "topic")))
    if not found and not period.prometheus.series(TOPIC_COUNTER, period.start, period.end):
        raise PrometheusError(f"no {TOPIC_COUNTER} on {period.prometheus.url}: kqp counts bytes per topic only with "
                              "metrics.topic_bytes: true in its config; set it and restart kqp, or leave out --by "
                              "topic")
    topics: dict[tuple[str, str, str], Row] = {}
    for series in found:
        labels = series["metric"]
        key = (labels.get("user", ""), labels.get("client_id", ""), labels.get("topic", ""))
        row = topics.setdefault(key, Row(*key))
        column = "produced_bytes" if labels.get("direction") == "produce" else "fetched_bytes"
        setattr(row, column, getattr(row, column) + float(series["value"][1]))
    out: list[Row] = []
    for row in rows:
        mine = [r for (u, c, _), r in topics.items() if (u, c) == (row.user, row.client_id)]
        rest = Row(row.user, row.client_id, "", max(0.0, row.produced_bytes - sum(r.produced_bytes for r in mine)),
                   max(0.0, row.fetched_bytes - sum(r.fetched_bytes for r in mine)), row.requests,
                   row.throttled_seconds, row.observed_muted_seconds)
        out += [*mine, rest]
    return out


def _groups(period: Period, rows: list[Row]) -> list[tuple[str, list[Row]]]:
    """Each prefix group kqp reported members of in the period: its subtotal first, then its members."""
    entities = Entities.ask(period)
    named: dict[str, list[Row]] = {}
    for row in rows:
        for quota in ("producer_byte_rate", "consumer_byte_rate", "request_rate"):
            group = entities.groups.get((quota, row.user, row.client_id))
            if group is not None:
                name = f"{group.client_id_prefix}*" + (f" (user {group.user})" if group.user else "")
                named.setdefault(name, []).append(row)
                break
    out = []
    for name, members in sorted(named.items()):
        subtotal = Row("", name)
        for row in members:
            subtotal.add(row)
        out.append((name, [subtotal, *members]))
    return out


def _bytes(value: float) -> str:
    for factor, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if value >= factor:
            return f"{value / factor:.2f} {unit}"
    return f"{value:.0f} B"


def _figures(row: Row) -> list[str]:
    return [_bytes(row.produced_bytes), _bytes(row.fetched_bytes), f"{row.requests:.0f}",
            f"{row.throttled_seconds:.1f}", f"{row.observed_muted_seconds:.1f}"]


def _who(row: Row, by_topic: bool, indent: str = "") -> list[str]:
    return [indent + (row.user or "-"), row.client_id or "-"] + ([row.topic or "(none)"] if by_topic else [])


def _table(report: Report) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(report.period.end))
    header = ["USER", "CLIENT_ID", *(["TOPIC"] if report.by_topic else []), "PRODUCED", "FETCHED", "REQUESTS",
              "THROTTLED S", "WOULD MUTE S"]
    blank = [""] if report.by_topic else []
    rows = [header, *([*_who(r, report.by_topic), *_figures(r)] for r in report.rows),
            ["TOTAL", "", *blank, *_figures(report.total())]]
    grouped = [["GROUP", "(prefix)", *blank, "", "", "", "", ""]] if report.groups else []
    for name, (subtotal, *members) in report.groups:
        grouped.append([name, "(subtotal)", *blank, *_figures(subtotal)])
        grouped += [[*_who(m, report.by_topic, "  "), *_figures(m)] for m in members]
    widths = [max(len(r[i]) for r in rows + grouped) for i in range(len(header))]
    first = 2 + len(blank)   # the figures' columns, right-aligned

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i >= first else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out = [f"kqp report: {report.period.prometheus.url}, the last {report.period.since_text} up to {stamp}", "",
           *map(line, rows)]
    if grouped:
        out += ["", "Prefix groups: each one's subtotal, then its members (counted once above already)",
                *map(line, grouped[1:])]
    return "\n".join(out) + "\n"


def _csv(report: Report) -> str:
    columns = [c for c in CSV_COLUMNS if report.by_topic or c != "topic"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in report.rows:
        values = asdict(row)
        writer.writerow([_plain(c, values[c]) for c in columns])
    return buffer.getvalue()


def _plain(column: str, value: Any) -> Any:
    if column.endswith("_bytes") or column == "requests":
        return round(value)
    if column.endswith("_seconds"):
        return f"{value:.3f}"
    return value


def _json(report: Report) -> str:
    def plain(row: Row) -> dict[str, Any]:
        values = {f.name: _plain(f.name, getattr(row, f.name)) for f in fields(row)
                  if report.by_topic or f.name != "topic"}
        return {k: (float(v) if k.endswith("_seconds") else v) for k, v in values.items()}

    return json.dumps({
        "prometheus": report.period.prometheus.url, "since": report.period.since_text,
        "start": report.period.start, "end": report.period.end,
        "rows": [plain(r) for r in report.rows],
        "groups": [{"group": name, **{k: v for k, v in plain(rows[0]).items() if k not in ("user", "client_id",
                                                                                               "topic")},
                    "members": [{"user": m.user, "client_id": m.client_id} for m in rows[1:]]}
                   for name, rows in report.groups],
        "total": {k: v for k, v in plain(report.total()).items() if k not in ("user", "client_id", "topic")},
    }, indent=1) + "\n"


def render(report: Report, fmt: str) -> str:
    return {"table": _table, "csv": _csv, "json": _json}[fmt](report)


def add_parser(sub: argparse._SubParsersAction) -> None:   # type: ignore[type-arg]
    p = sub.add_parser("report", help="what each entity used over a period, read from Prometheus (chargeback)")
    p.add_argument("--prometheus", required=True, help="the Prometheus server that scrapes kqp (http://host:9090)")
    p.add_argument("--since", required=True, help="the period: the last DURATION, as Prometheus writes it (1h, 30d)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="default table")
    p.add_argument("--by", choices=("topic",), help="also per topic (needs kqp's metrics.topic_bytes)")


def run(args: argparse.Namespace) -> int:
    try:
        since = parse_duration(args.since)
    except ValueError as exc:
        print(f"--since: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = collect(Period.ask(Prometheus(args.prometheus), since, args.since), args.by == "topic")
    except PrometheusError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_UNREADABLE
    if not report.rows:
        print(f"no client traffic through kqp in the last {args.since} (kqp was scraped): nothing to report; "
              "choose another --since", file=sys.stderr)
        return EXIT_UNREADABLE
    sys.stdout.write(render(report, args.format))
    return 0
