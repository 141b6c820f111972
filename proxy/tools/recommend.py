"""`kqp recommend`: quotas grounded in each entity's real traffic, as YAML to paste under `quotas.entities`.

For each entity seen in the period (usage_history.py says which entity a principal's figures go to),
its rate as the quota would measure it (PromQL `rate()` over the quota span, at least 4 scrapes),
every scrape step while it was active, summed over its principals and every kqp Prometheus scrapes
(a fleet's figure: in instance scope, replicas each hold the quota alone). The chosen quantile of
those rates times the headroom, rounded up to two significant digits, is the proposal, with the
observed figures in a comment. `request_rate` is proposed only where it is material
(`MATERIAL_REQUESTS`). With `--config` the current quota of each is compared and each change marked,
an entity's other keys are kept so the entry replaces its own, and configured entities no traffic
reached are listed.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from kqp.config.errors import ConfigError
from kqp.config.loader import load_config
from kqp.quotas.entities import resolutions
from kqp.quotas.model import EntitySpec, Principal, QuotaKey, QuotaSettings

from .prometheus_api import Prometheus, PrometheusError, format_duration, parse_duration
from .usage_history import Entities, Period, entity_entry, per_principal, principal_of

__all__ = ["Observed", "Proposal", "add_parser", "nice", "propose", "render", "run"]

EXIT_UNREADABLE, EXIT_USAGE = 1, 2
# Quota type, the counter whose rate it is, its unit in comments.
RATES = (("producer_byte_rate", 'kqp_bytes_total{direction="produce"}', "B/s"),
         ("consumer_byte_rate", 'kqp_bytes_total{direction="fetch"}', "B/s"),
         ("request_rate", "kqp_requests_total", "req/s"))
# Requests per second at the quantile below which request_rate is not proposed: fewer are no load on a
# broker worth a quota of their own (the byte rates bound them already).
MATERIAL_REQUESTS = 100.0
MAX_POINTS = 10_000        # Prometheus answers at most 11,000 points per series
KAFKA_SPAN = 11.0          # Kafka's quota.window.num x quota.window.size.seconds, without --config


@dataclass(frozen=True)
class Observed:
    at_quantile: float
    peak: float
    mean: float
    points: int


@dataclass
class Proposal:
    key: QuotaKey
    quota_type: str
    observed: Observed
    value: float
    members: list[Principal] = field(default_factory=list)


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def nice(value: float) -> float:
    """`value` rounded up to two significant digits (61234 -> 62000, 1.234 -> 1.3)."""
    if value <= 0:
        return 0.0
    step = 10 ** (math.floor(math.log10(value)) - 1)
    return round(math.ceil(round(value / step, 9)) * step, 9)


def _series(found: list[dict[str, Any]], entities: Entities,
            quota_type: str) -> dict[QuotaKey, tuple[dict[float, float], list[Principal]]]:
    """Each entity's rate at each step, its principals (one series each) summed, and who they are."""
    out: dict[QuotaKey, tuple[dict[float, float], list[Principal]]] = {}
    for series in found:
        principal = principal_of(series["metric"])
        points, members = out.setdefault(entities.key(principal, quota_type), ({}, []))
        members.append(principal)
        for t, v in series["values"]:
            points[float(t)] = points.get(float(t), 0.0) + float(v)
    return out


def propose(period: Period, entities: Entities, q: float, headroom: float, span: float) -> list[Proposal]:
    """Every proposal for the period, ordered by entity then quota type."""
    window = format_duration(max(span, 4 * period.scrape_seconds))
    step = max(period.scrape_seconds, period.since / MAX_POINTS)
    out: list[Proposal] = []
    for quota_type, counter, _ in RATES:
        found = period.matrix(per_principal("rate", counter, window), step)
        for key, (points, members) in _series(found, entities, quota_type).items():
            values = [v for v in points.values() if v > 0]   # while it was active: a job that runs an hour a
            if not values:                                   # day needs its quota for that hour
                continue
            observed = Observed(quantile(values, q), max(values), sum(values) / len(values), len(values))
            if quota_type == "request_rate" and observed.at_quantile < MATERIAL_REQUESTS:
                continue
            value = nice(observed.at_quantile * headroom)
            if quota_type != "request_rate":
                value = float(math.ceil(value))
            out.append(Proposal(key, quota_type, observed, value, members))
    return sorted(out, key=lambda p: (p.key.user, p.key.client_id_prefix or "", p.key.client_id,
                                      [r[0] for r in RATES].index(p.quota_type)))


def _figure(value: float, unit: str) -> str:
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.1f} {prefix}{unit}"
    return f"{value:.1f} {unit}"


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _spec(key: QuotaKey) -> EntitySpec:
    names = entity_entry(key)
    return EntitySpec(names.get("user"), names.get("client_id"), names.get("client_id_prefix"))


def _current(settings: QuotaSettings, proposal: Proposal) -> tuple[float, EntitySpec] | None:
    """The quota in force for the proposal's entity now, and the entity it comes from."""
    for p in proposal.members:
        found = resolutions(settings, p).get(proposal.quota_type)
        if found is not None and found.key == proposal.key:
            return found.limit, found.entity
    return None


def _change(value: float, current: tuple[float, EntitySpec] | None, spec: EntitySpec) -> str:
    if current is None:
        return "new"
    was, source = current
    where = "" if source == spec else f" from {source.path}"
    if was == value:
        return f"unchanged{where}"
    delta = f" ({(value - was) / was * 100:+.0f}%)" if was else ""
    return f"was {_number(was)}{where}{delta}"


def render(proposals: list[Proposal], period: Period, q: float, headroom: float, span: float,
           settings: QuotaSettings | None = None) -> str:
    """The YAML text: a header, one entry per entity, each value commented; parses as a list."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(period.end))
    window = max(span, 4 * period.scrape_seconds)
    lines = [f"# kqp recommend: {period.prometheus.url}, the last {period.since_text} up to {stamp}",
             f"# each rate as the quota measures it (over {window:g} s), at quantile {q:g} x headroom {headroom:g},",
             "# summed over each entity's principals; paste under quotas.entities:"]
    units = {t: u for t, _, u in RATES}
    by_key: dict[QuotaKey, list[Proposal]] = {}
    for p in proposals:
        by_key.setdefault(p.key, []).append(p)
    for key, mine in by_key.items():
        spec = _spec(key)
        entry: dict[str, Any] = dict(entity_entry(key))
        if settings is not None and spec in settings.entities:   # the entry replaces its own: keep its other keys
            for extra in (settings.algorithms, settings.modes):
                if spec in extra:
                    entry["algorithm" if extra is settings.algorithms else "mode"] = extra[spec]
            entry.update({str(t): _number(v) for t, v in settings.entities[spec].items()})
        notes: dict[str, str] = {}
        for p in mine:
            entry[p.quota_type] = _number(p.value)
            o, unit = p.observed, units[p.quota_type]
            note = (f"observed {q * 100:g}th percentile {_figure(o.at_quantile, unit)}, max {_figure(o.peak, unit)}, "
                    f"mean {_figure(o.mean, unit)}")
            if settings is not None:
                note += f"; {_change(p.value, _current(settings, p), spec)}"
            notes[p.quota_type] = note
        text = yaml.safe_dump([entry], sort_keys=False, default_flow_style=False).rstrip("\n").splitlines()
        for line in text:
            name = line.strip("- ").split(":", 1)[0]
            lines.append(f"{line}   # {notes[name]}" if name in notes else line)
    if not by_key:
        lines.append("[]   # no entity moved anything in the period")
    if settings is not None:
        seen = {_spec(k) for k in by_key}
        idle = sorted(s.path for s, values in settings.entities.items()
                      if s not in seen and any(t in values for t in units) and "<default>" not in s.path)
        if idle:
            lines.append(f"# configured, no traffic in the period (left as they are): {', '.join(idle)}")
    return "\n".join(lines) + "\n"


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError
    return value


def _at_least_one(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 1:
        raise ValueError
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:   # type: ignore[type-arg]
    p = sub.add_parser("recommend", help="quotas from each entity's traffic, read from Prometheus, as YAML")
    p.add_argument("--prometheus", required=True, help="the Prometheus server that scrapes kqp (http://host:9090)")
    p.add_argument("--since", required=True, help="how far back to look, as Prometheus writes it (2m, 1h, 7d)")
    p.add_argument("--quantile", type=_fraction, default=0.95, help="of each entity's rate (0 < q <= 1; default 0.95)")
    p.add_argument("--headroom", type=_at_least_one, default=1.2, help="times the quantile (>= 1; default 1.2)")
    p.add_argument("--config", help="kqp's config file: compare with its quotas, measure with its windows")


def run(args: argparse.Namespace) -> int:
    try:
        since = parse_duration(args.since)
    except ValueError as exc:
        print(f"--since: {exc}", file=sys.stderr)
        return EXIT_USAGE
    settings, span = None, KAFKA_SPAN
    if args.config:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            print(str(exc), file=sys.stderr)
            return EXIT_USAGE
        settings = config.quotas
        span = settings.window_count * settings.window_size_seconds
    try:
        period = Period.ask(Prometheus(args.prometheus), since, args.since)
        proposals = propose(period, Entities.ask(period, settings), args.quantile, args.headroom, span)
    except PrometheusError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_UNREADABLE
    if not proposals:
        print(f"no client traffic through kqp in the last {args.since} (kqp was scraped): nothing to recommend; "
              "choose another --since", file=sys.stderr)
        return EXIT_UNREADABLE
    sys.stdout.write(render(proposals, period, args.quantile, args.headroom, span, settings))
    return 0

