"""The state file's history: the last `HISTORY_LIMIT` audit events, kept across restarts.

Beside the state file, as JSON Lines: `<admin.state_file>.history.jsonl`, one event a line, oldest
first (`proxy/observability/quota_audit.py` says what an event holds). A sibling file rather than a
`history:` key in the YAML state file, for two reasons:

* Cost. The state file is YAML, parsed by PyYAML's pure-Python loader on every change another process
  makes (on the event loop, `QuotaStore.refresh`). A thousand events in it measured 1.2 s to parse
  and 1.0 s to dump on a development machine; as JSON Lines they parse in 3 ms. The YAML file stays
  a few lines per entity, as small as before.
* Compatibility. The state file's format is unchanged, so the previous kqp version still reads it
  (a rollback needs nothing), and a state file from before the history existed loads as it did: its
  history simply starts empty.

Written by the store's thread, under the state file's lock (`<state file>.lock`), so processes
sharing the state file share one history: read, append, keep the last `HISTORY_LIMIT`, write
atomically (a temporary file renamed over it). An admin change is appended by the process that
committed it, right after the state file (a crash between the two renames loses that one event,
never the change). A config reload is appended by every process that reloads: under `--workers N`
(or instances on one volume) all N do, so an event is skipped when the entity's latest recorded
event is the same change from a reload (`_already_recorded`). A change read from the state file (at
start, or written by another process or by hand) is logged and counted but not appended: kqp did
not make it, and writing the file in answer to reading it would race the one who did.

`HISTORY_LIMIT` is a constant: 1,000 events is months of hand-made changes and about 200 kB, rewritten
on each change, while a reload that touches every entity of a large config still fits. Older events
remain in the logs (`kqp.audit`).
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
