"""`kqp top` in a real terminal: tmux, driven with send-keys and read with capture-pane (issue 5).

During a throttled workload the throttled entity must be the first row, with its produce rate
against its limit and THROTTLED near 1.00 (it produces flat out, so its one connection is muted but
for the moments a request passes); `q` quits with exit code 0. tmux runs on a private
socket (`-L`), so the test never touches anyone's tmux server, and that server is killed at the end.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from helpers.observability import FREE, THROTTLED, ThrottledWorkload, start_with_metrics

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]

WIDTH, HEIGHT = 160, 40


@contextmanager
def tmux_session(command: str) -> Iterator[tuple[str, str]]:
    """A detached tmux session running `command` on a private server: (socket name, target)."""
    sock = f"kqp-top-{uuid.uuid4().hex[:8]}"
    base = ["tmux", "-L", sock, "-f", "/dev/null"]
    # The wrapper keeps the pane after top exits, so the test can read the exit code.
    wrapped = f"{command}; echo KQP-TOP-EXIT=$?; sleep 60"
    subprocess.run([*base, "new-session", "-d", "-s", "top", "-x", str(WIDTH), "-y", str(HEIGHT), wrapped],
                   check=True, timeout=10)
    try:
        yield sock, "top"
    finally:
        subprocess.run([*base, "kill-server"], timeout=10, check=False, capture_output=True)


def capture(sock: str, target: str) -> list[str]:
    out = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p", "-t", target], capture_output=True,
                         text=True, timeout=10, check=True).stdout
    return out.splitlines()


def table(lines: list[str]) -> list[list[str]]:
    """The rows under top's header line, split into cells."""
    for i, line in enumerate(lines):
        if line.startswith("USER "):
            return [row.split() for row in lines[i:] if row.strip()]
    return []


def test_top_shows_the_throttled_entity_first(tansu, kqp) -> None:
    proxy, url = start_with_metrics(kqp, tansu)
    command = f"{sys.executable} -m kqp.proxy.tools.cli top --url {url}/metrics --interval 0.5"
    with ThrottledWorkload(proxy.bootstrap, tansu.kind) as load, tmux_session(command) as (sock, target):
        load.wait_throttled()
        deadline = time.monotonic() + 30
        rows: list[list[str]] = []
        screen: list[str] = []
        while time.monotonic() < deadline:
            screen = capture(sock, target)
            rows = table(screen)
            # Wait for a frame with both entities and a throttle rate (the second refresh on).
            if (len(rows) > 2 and rows[1][:2] == ["ANONYMOUS", THROTTLED] and rows[1][-2] != "-"
                    and float(rows[1][-2].removesuffix("s/s")) > 0):
                break
            time.sleep(0.3)
        text = "\n".join(screen)
        assert rows and rows[0][:3] == ["USER", "CLIENT_ID", "OVER"], text
        first = rows[1]
        assert first[:2] == ["ANONYMOUS", THROTTLED], text
        # PRODUCE B/s column: measured rate / limit, the limit being 20000 B/s = 19.5 KiB/s.
        produce = first[header_index(rows[0], "PRODUCE")]
        rate, limit = produce.split("/")
        assert limit == "19.5Ki", text
        assert rate.endswith("Ki") and float(rate.removesuffix("Ki")) > 5, text
        # THROTTLED: seconds its connections spent muted per second; flat out, its one connection is
        # muted nearly all the time (tests/e2e/test_top_throttled.py checks the share exactly).
        assert 0.7 <= float(first[header_index(rows[0], "THROTTLED")].removesuffix("s/s")) <= 1.05, text
        assert any(r[:2] == ["ANONYMOUS", FREE] for r in rows[2:]), text
        assert "kqp top" in screen[0] and "ready" in screen[0]

        subprocess.run(["tmux", "-L", sock, "send-keys", "-t", target, "q"], check=True, timeout=10)
        exit_deadline = time.monotonic() + 10
        while not any("KQP-TOP-EXIT=" in line for line in capture(sock, target)):
            assert time.monotonic() < exit_deadline, "kqp top did not quit on q"
            time.sleep(0.1)
        assert any("KQP-TOP-EXIT=0" in line for line in capture(sock, target))
    assert not load.errors, load.errors


def header_index(header: list[str], title: str) -> int:
    """Cell index of a column: headers like `PRODUCE B/s` are two words but one cell of the rows."""
    cells: list[str] = []
    for word in header:
        if word in ("B/s", "/s", "%") and cells:
            cells[-1] += f" {word}"
        else:
            cells.append(word)
    return next(i for i, cell in enumerate(cells) if cell.startswith(title))
