"""CPU time and resident memory of a process and its descendants, read from Linux's /proc.

The benchmark charges each proxy for the CPU it burns per GB moved and the memory it holds with
many clients connected. A proxy may be several processes (`kqp run --workers N` forks workers), so
every figure is summed over the process tree. Reading /proc directly keeps psutil out of the
dependencies; on a system without /proc the figures are reported as absent (None), not as zero.
"""

from __future__ import annotations

import os
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
