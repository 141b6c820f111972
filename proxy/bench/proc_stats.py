"""CPU time and resident memory of a process and its descendants, read from Linux's /proc.

The benchmark charges each proxy for the CPU it burns per GB moved and the memory it holds with
many clients connected. A proxy may be several processes (`kqp run --workers N` forks workers), so
every figure is summed over the process tree. Reading /proc directly keeps psutil out of the
dependencies; on a system without /proc the figures are reported as absent (None), not as zero.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class TreeSample:
    """One reading of a process tree: CPU seconds (user + system) and resident bytes."""

    cpu_seconds: float
    rss_bytes: int
    processes: int


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name sits in parentheses and may itself hold spaces or parentheses, so split
    # after the last ')'. Field 3 (state) is then index 0.
    return text[text.rindex(")") + 2:].split()


def descendants(pid: int) -> list[int]:
    """`pid` followed by every live descendant (one pass over /proc, parent links followed)."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def _rss_bytes(pid: int) -> int:
    try:
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _runtime_seconds(pid: int) -> float | None:
    """CPU time of `pid`'s live threads to the nanosecond (`/proc/PID/task/*/schedstat`), or None."""
    total = 0
    try:
        for task in (_PROC / str(pid) / "task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def sample(pid: int) -> TreeSample | None:
    """CPU and RSS of `pid` and its descendants now; None where /proc is not available.

    CPU is the scheduler's runtime of each process's threads, in nanoseconds, where /proc has it:
    `utime` and `stime` come in clock ticks (10 ms), which is 7 % of what kqp spends moving the
    consume workload's 250 MB. A process without it falls back to the ticks, with its reaped children.
    """
    if not _PROC.is_dir() or _stat_fields(pid) is None:
        return None
    cpu = 0.0
    rss = 0
    tree = descendants(pid)
    for member in tree:
        fields = _stat_fields(member)
        if fields is None:
            continue
        runtime = _runtime_seconds(member)
        # utime, stime are fields 14 and 15 of /proc/PID/stat (indexes 11, 12 after the name);
        # cutime and cstime (13, 14) hold reaped children, e.g. workers that already exited.
        cpu += runtime if runtime is not None else sum(int(value) for value in fields[11:15]) / _TICKS
        rss += _rss_bytes(member)
    return TreeSample(cpu, rss, len(tree))


class CpuTrace:
    """A process tree's CPU seconds sampled every `interval` on a thread of its own, so that a
    workload's CPU can be read over the span it moved data in (`between`), leaving out the
    connections' set-up and close, which are per connection, not per byte.

    The tree is taken once at the start (a scan of /proc per sample would cost the benchmark more
    than kqp's own figures vary); each sample reads the scheduler's runtime of its threads.
    """

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self._tree = descendants(pid)
        self._interval = interval
        self.samples: list[tuple[float, float]] = []   # (time.monotonic(), CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-trace", daemon=True)

    def _cpu(self) -> float | None:
        total = 0.0
        for member in self._tree:
            runtime = _runtime_seconds(member)
            if runtime is None:   # a member gone: what it ran cannot be told apart any more
                return None
            total += runtime
        return total

    def _take(self) -> None:
        cpu = self._cpu()
        if cpu is not None:
            self.samples.append((time.monotonic(), cpu))

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._take()

    def __enter__(self) -> CpuTrace:
        self._take()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    def at(self, when: float) -> float | None:
        """CPU seconds at monotonic time `when`, interpolated between the samples either side; None
        outside the trace."""
        samples = self.samples
        if not samples or not samples[0][0] <= when <= samples[-1][0]:
            return None
        i = bisect.bisect_right(samples, when, key=lambda sample: sample[0])
        if i == len(samples):   # exactly the last sample
            return samples[-1][1]
        (t0, c0), (t1, c1) = samples[i - 1], samples[i]
        return c0 + (c1 - c0) * (when - t0) / (t1 - t0)

    def between(self, start: float, end: float) -> float | None:
        """CPU seconds spent from `start` to `end` (monotonic), or None when either is outside the trace."""
        first, last = self.at(start), self.at(end)
        return None if first is None or last is None else last - first
