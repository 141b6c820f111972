"""Prometheus's HTTP query API as `kqp recommend` and `kqp report` read it: urllib and JSON, nothing more.

kqp keeps no usage history of its own; Prometheus does. `Prometheus` asks its `/api/v1/query`,
`/api/v1/query_range` and `/api/v1/series`, and turns every way that can fail (nothing listening, not
a Prometheus, a query it refuses) into one `PrometheusError` whose text is one line saying what to do.
`parse_duration` reads `--since` in Prometheus's own duration syntax (`90s`, `2m`, `1h30m`, `7d`).
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["Prometheus", "PrometheusError", "format_duration", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_DURATION = re.compile(r"(?:(\d+)(ms|s|m|h|d|w|y))")


class PrometheusError(Exception):
    """Prometheus could not answer what was asked: the message is one line that says what to do."""


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration (one or more `<integer><unit>`, largest unit first); ValueError
    with a one-line reason otherwise."""
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration: write it as Prometheus does, e.g. 90s, 2m, 1h30m, 7d")
    units = [u for _, u in parts]
    order = list(_UNITS)[::-1]
    if len(set(units)) != len(units) or units != sorted(units, key=order.index):
        raise ValueError(f"{text!r} is not a duration: each unit once, largest first (1h30m, not 30m1h)")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a duration: it must be longer than 0")
    return seconds


def format_duration(seconds: float) -> str:
    """`seconds` in the form PromQL's range selectors take (whole milliseconds)."""
    return f"{max(1, math.ceil(seconds * 1000))}ms"


class Prometheus:
    """One Prometheus server's HTTP API (`url`: its base, e.g. http://prometheus:9090)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> Any:
        address = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            # Prometheus answers a refused query with 400 or 422 and a JSON error; anything else is not Prometheus.
            body = exc.read()
            if exc.code not in (400, 422, 503):
                raise PrometheusError(f"{self.url} did not answer as Prometheus's HTTP API (HTTP {exc.code} for "
                                      f"/api/v1/{path}): check --prometheus") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusError(f"cannot reach Prometheus at {self.url} ({reason}): check --prometheus, "
                                  "e.g. http://prometheus:9090") from None
        try:
            document = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{self.url} did not answer as Prometheus's HTTP API (no JSON from "
                                  f"/api/v1/{path}): check --prometheus") from None
        if not isinstance(document, dict) or document.get("status") != "success":
            error = document.get("error", "no reason given") if isinstance(document, dict) else "not an API answer"
            raise PrometheusError(f"Prometheus at {self.url} refused a query: {error}")
        return document.get("data")

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        """An instant query at `at` (Unix seconds): its vector (or matrix, for a range selector)."""
        return list(self._get("query", {"query": expr, "time": f"{at:.3f}"})["result"])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query: one series per label set, `values` as [time, "value"] pairs."""
        return list(self._get("query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                              "step": f"{step:.3f}"})["result"])

    def series(self, match: str, start: float, end: float) -> list[dict[str, str]]:
        """The label sets of the series `match` selects that have samples between `start` and `end`."""
        return list(self._get("series", {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}))
