"""Reads a py-spy collapsed-stack profile and says where the time goes, in a few short lists.

`kqp bench --profile [produce,consume]` attaches py-spy (`py-spy record --native --format raw`) to kqp
during an extra run of each workload named. A flame graph needs a browser; the benchmark's notes in
proxy/README.md ("Later measurements") need a few lines of text, so this turns the collapsed stacks
into: the share of samples per area (system calls, uvloop's C code, kqp's Python, other Python), the functions with
the most samples on-CPU themselves (self), and the kqp functions with the most samples anywhere on
the stack (inclusive).
Samples whose innermost frame is the event loop's poll are waiting, not working, and so are those of a
thread blocked on a lock or a queue (an idle executor worker, whose innermost frame is an unnamed libc
futex wait py-spy counts as busy): they are counted apart and left out of the shares.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

_WAITING = ("epoll_wait", "epoll_pwait", "select", "poll")
_BLOCKED = "PyThread_acquire_lock_timed"   # CPython's blocking lock wait: Lock.acquire, queue.get
_KQP_DIRS = ("proxy/", "protocol/", "quotas/", "config/")


def _frames(stack: str) -> list[tuple[str, str]]:
    # py-spy raw frames look like "function (path/to/file.py:123)"; the line number varies
    # within a function, so it is dropped to add samples up per function.
    frames = []
    for frame in stack.split(";"):
        name, _, where = frame.partition(" (")
        path = _short(where.rsplit(":", 1)[0].rstrip(")"))
        frames.append((name, path))
    return frames


# kqp's source folders sit side by side in one checkout (proxy/, protocol/, ...): paths under it
# are shown relative to it, which is also how kqp's own frames are recognised.
_CHECKOUT = str(Path(__file__).resolve().parents[2]) + "/"


def _short(path: str) -> str:
    for marker in (_CHECKOUT, "site-packages/", "lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _label(frame: tuple[str, str]) -> str:
    name, path = frame
    return f"{name} ({path})" if path else name


def _area(frame: tuple[str, str]) -> str:
    name, path = frame
    if path.startswith("libc") or path.startswith("ld-linux") or name.startswith("0x"):
        return "system calls and libc (socket reads and writes)"
    if path.endswith((".c", ".h", ".pyx")) or "uvloop" in path:
        return "uvloop and CPython C code"
    if path.startswith(_KQP_DIRS):
        return "kqp Python code"
    return "other Python code (asyncio, kafka-python, stdlib)"


def summarize(path: Path, workload: str = "produce", top: int = 12) -> str:
    own: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    working = waiting = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = _frames(stack)
        if frames[-1][0] in _WAITING or any(name == _BLOCKED for name, _ in frames):
            waiting += count
            continue
        working += count
        own[_label(frames[-1])] += count
        areas[_area(frames[-1])] += count
        for frame in {frame for frame in frames if frame[1].startswith(_KQP_DIRS)}:
            inclusive[_label(frame)] += count
    if working == 0:
        return f"{path}: no working samples ({waiting} waiting)"
    lines = [f"py-spy profile of kqp under {workload} ({path.name}): {working} samples working, "
             f"{waiting} waiting in the event loop's poll or blocked on a lock",
             "by area (innermost frame):"]
    lines += [f"  {100 * n / working:5.1f}%  {name}" for name, n in areas.most_common()]
    lines.append("self (on-CPU in the function itself):")
    lines += [f"  {100 * n / working:5.1f}%  {name}" for name, n in own.most_common(top)]
    lines.append("kqp functions, inclusive (anywhere on the stack):")
    # Frames on every stack (the CLI's entry, the loop's runner) say nothing: leave them out.
    lines += [f"  {100 * n / working:5.1f}%  {name}" for name, n in inclusive.most_common()
              if n < working][:top]
    return "\n".join(lines)
