"""The state file's history: the last `HISTORY_LIMIT` audit events, kept across restarts.

Beside the state file, as JSON Lines (`<admin.state_file>.history.jsonl`, oldest first), not as a
key of the YAML state file: the state file is parsed on the loop at every change another process
makes, and a thousand events took PyYAML 1.2 s against 3 ms as JSON; and the state file's format
stays what the previous version reads.

Written by the store's thread under the state file's lock, so processes sharing the state file
share one history: read, append, keep the last `HISTORY_LIMIT`, write atomically. An admin change
is appended by the process that committed it, right after the state file. A config reload is
appended by every process that reloads, so an event that repeats the entity's latest recorded
change is skipped (`_already_recorded`). A change read from the state file is logged but not
appended: kqp did not make it. 1,000 events are about 200 kB; older ones stay in the logs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable

from kqp.proxy.observability.quota_audit import RELOAD, AuditEvent

__all__ = ["HISTORY_LIMIT", "append_history", "history_path", "read_history"]

log = logging.getLogger("kqp.admin")

HISTORY_LIMIT = 1000


def history_path(state_file: str) -> str:
    return f"{state_file}.history.jsonl"


def read_history(state_file: str) -> tuple[list[AuditEvent], int]:
    """The history, oldest first, and how many lines could not be read (skipped: a torn or hand-made
    line must not hide the rest); no file yet is an empty history."""
    try:
        with open(history_path(state_file), encoding="utf-8") as lines:
            text = lines.read()
    except FileNotFoundError:
        return [], 0
    events: list[AuditEvent] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict):
            events.append(event)
        else:
            bad += 1
    return events, bad


def _already_recorded(history: list[AuditEvent], event: AuditEvent) -> bool:
    """A reload's event that another process sharing the file has already appended: the entity's
    latest event is the same change, from a reload."""
    for earlier in reversed(history):
        if earlier.get("entity") == event["entity"]:
            return all(earlier.get(key) == event[key] for key in ("source", "before", "after"))
    return False


def append_history(state_file: str, events: Iterable[AuditEvent], write: Callable[[str, str], None]) -> int:
    """Append `events` (the caller holds the state file's lock), keeping the last `HISTORY_LIMIT`, and
    write the file with `write(path, text)` (the store's atomic write); returns how many were appended."""
    history, bad = read_history(state_file)
    if bad:
        log.warning("quota history %s: %d unreadable line(s) dropped", history_path(state_file), bad)
    added = 0
    for event in events:
        if event["source"] == RELOAD and _already_recorded(history, event):
            continue
        history.append(event)
        added += 1
    if added or bad:
        kept = history[-HISTORY_LIMIT:]
        write(history_path(state_file), "".join(json.dumps(event, separators=(",", ":")) + "\n" for event in kept))
    return added
