"""`kqp top`'s client software view: which client libraries honour throttles.

One line per client software and version (KIP-511's names from ApiVersions v3+, or `unknown` and
the API and version it was throttled on): its open connections by whether they honour throttles
(`kqp_client_connections`: yes, no, or unknown while not yet throttled), and the throttles given
to it that it did not back off from (`kqp_client_throttle_ignored_total`, by why: `version`, a request
version without client-side throttling or acks=0; `observed`, it sent while throttled). Kept apart
from top.py's entity table: it is about the software, not the quota entity. Pure functions of the
parsed samples, like the rest of top.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FAMILIES = ("kqp_client_connections", "kqp_client_throttle_ignored_total")
HONOURS = ("no", "yes", "unknown")


@dataclass
class SoftwareView:
    software: str
    version: str
    connections: dict[str, float] = field(default_factory=dict)   # honours_throttles -> connections
    ignored: dict[str, float] = field(default_factory=dict)       # reason -> throttles ignored so far


def add_sample(clients: dict[tuple[str, str], SoftwareView], name: str, labels: dict[str, str],
               value: float) -> bool:
    """Take one sample if it is a client software series; whether it was."""
    if name not in FAMILIES:
        return False
    key = (labels.get("software", ""), labels.get("version", ""))
    view = clients.get(key)
    if view is None:
        view = clients[key] = SoftwareView(*key)
    if name == "kqp_client_connections":
        view.connections[labels.get("honours_throttles", "unknown")] = value
    else:
        view.ignored[labels.get("reason", "")] = value
    return True


def client_lines(clients: dict[tuple[str, str], SoftwareView]) -> list[str]:
    """The section's lines: software that ignores throttles first, then by connections."""
    if not clients:
        return []
    rows = [["CLIENT SOFTWARE", "VERSION", "CONNECTIONS", "HONOURS THROTTLES", "THROTTLES IGNORED"]]
    for v in sorted(clients.values(), key=lambda v: (-sum(v.ignored.values()), -sum(v.connections.values()),
                                                     v.software, v.version)):
        honours = ", ".join(f"{h} {v.connections[h]:.0f}" for h in HONOURS if v.connections.get(h))
        ignored = ", ".join(f"{n:.0f} ({reason})" for reason, n in sorted(v.ignored.items()) if n)
        rows.append([v.software, v.version, f"{sum(v.connections.values()):.0f}", honours or "-", ignored or "-"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["", *("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)]
