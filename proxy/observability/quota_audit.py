"""The audit trail of quota changes: one structured event per entity changed, and a count.

Every change of the quotas in force is one event per entity (`kqp.quotas.changes.entity_changes`:
all its values before and after), logged on the `kqp.audit` logger with its fields as `extra=` (so
`--log-format json` gives `who`, `source`, `entity`, `before`, `after` as keys) and counted in
`kqp_quota_changes_total{source}`. Sources: ``admin_api`` (an AlterClientQuotas that changed
something; `who` its principal), ``reload`` (the config file; `who` null) and ``state_file`` (put
in force at start, or changed on disk by another process; `who` null).

An event is a plain dict, the same one the state file's history keeps (`state/history.py`), with a
wall-clock `ts` (UTC, milliseconds): the history outlives the process, so a monotonic time would
mean nothing in it. The clock is injected; the counts are read by the endpoint's registry. `Audit`
is the trail's mechanics, shared with the ACLs' (`acl_audit.py`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from kqp.quotas.changes import entity_changes
from kqp.quotas.model import QuotaSettings

__all__ = ["ADMIN_API", "RELOAD", "SOURCES", "STATE_FILE", "Audit", "AuditEvent", "QuotaAudit", "utc_stamp"]

log = logging.getLogger("kqp.audit")

ADMIN_API, RELOAD, STATE_FILE = "admin_api", "reload", "state_file"
SOURCES = (ADMIN_API, RELOAD, STATE_FILE)
AuditEvent = dict[str, Any]   # ts, who, source, entity, before, after: JSON-ready


def utc_stamp(wall: float) -> str:
    """`2026-11-25T19:12:17.123Z`: the JSON log's `ts` format."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall)) + f".{int(wall * 1000) % 1000:03d}Z"


def _values(values: dict[str, Any]) -> str:
    return json.dumps(values, separators=(",", ":")) if values else "none"


class Audit:
    """An audit trail of `kind` changes: events made by `events` (of the subclass), logged and counted."""

    kind = "quota"
    metric = ("kqp_quota_changes", "Quota changes put in force, one per entity changed, by where they came from "
              "(admin_api, reload, state_file)")

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self.counts = dict.fromkeys(SOURCES, 0)

    def _event(self, ts: str, who: str | None, source: str, entity: str, before: dict[str, Any],
               after: dict[str, Any]) -> AuditEvent:
        assert source in SOURCES, source
        return {"ts": ts, "who": who, "source": source, "entity": entity, "before": before, "after": after}

    def events(self, old: Any, new: Any, who: str | None, source: str) -> list[AuditEvent]:
        raise NotImplementedError

    def record(self, old: Any, new: Any, who: str | None, source: str) -> list[AuditEvent]:
        """The events of a change from `old` to `new`, logged and counted."""
        events = self.events(old, new, who, source)
        self.report(events)
        return events

    def report(self, events: list[AuditEvent]) -> None:
        """Log and count events (on the event loop's thread: the counts are plain numbers)."""
        for event in events:
            self.counts[event["source"]] += 1
            fields = {key: value for key, value in event.items() if key != "ts"}   # the log line has its own
            log.info("%s audit: %s by %s: %s %s -> %s", self.kind, event["source"], event["who"] or "-",
                     event["entity"], _values(event["before"]), _values(event["after"]), extra=fields)

    def collect(self) -> Iterator[Metric]:
        """prometheus_client's collector protocol: `{metric}_total{source}`, every source present from
        the start (a rate over a series that appears late misses its first change)."""
        family = CounterMetricFamily(*self.metric, labels=("source",))
        for source, n in self.counts.items():
            family.add_metric((source,), n)
        yield family


class QuotaAudit(Audit):
    def events(self, old: QuotaSettings, new: QuotaSettings, who: str | None, source: str) -> list[AuditEvent]:
        """One event per entity whose quotas in force differ between `old` and `new` (none: no change)."""
        ts = utc_stamp(self._wall())
        return [self._event(ts, who, source, change.entity.path, dict(change.before), dict(change.after))
                for change in entity_changes(old, new)]
