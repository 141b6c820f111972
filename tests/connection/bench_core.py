"""CPU per request and response through the sans-io connection core (not collected by pytest).

The fast path is one client request in (`ClientData`) and its response back (`UpstreamData`) on a
connected core built on real parts (helpers.playbook), with the no-op observer and the real
handler-time clock (`time.perf_counter`, as the server injects it). Workloads: Produce v9 acks=1 and
Fetch v12, each without a quota and with one configured but never binding (a rate nobody reaches),
and Heartbeat v4, a header-only API. Each figure is CPU time (`time.process_time`) per
request+response over `ITERATIONS` exchanges.

    python tests/connection/bench_core.py [--rounds N]     # this tree: medians of 8 (N) rounds
    python tests/connection/bench_core.py --against DIR    # DIR (another checkout with its own .venv)
                                                           # and this tree alternately, side by side

With ``--against``, each round runs one subprocess per tree, alternately and in turns (ABBA), so
both see the same machine state; the table gives each tree's median, the ratio this tree / DIR of
the medians, and of the minima (on a loaded machine the steadier figure).
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the helpers package

from helpers.playbook import connected_core, fetch_request, fetch_response, produce_frame, produce_response

from kqp.protocol.apis import ApiKey
from kqp.protocol.messages import encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.hooks import ProxyObserver

ITERATIONS, ROUNDS = 20_000, 8
NOW = 100.0
FAR = 1e15   # a rate no exchange here comes near: the quota is configured, never binding
QUOTAS = {"entities": [{"client_id": "c", "producer_byte_rate": FAR, "consumer_byte_rate": FAR}]}


def heartbeat() -> tuple[bytes, bytes]:
    request = encode_request(ApiKey.Heartbeat, 4, 1, "c", group_id="g", generation_id=1, member_id="m",
                             group_instance_id=None)
    head = struct.pack(">i", 1) + b"\x00"                          # flexible response header
    body = struct.pack(">ih", 0, 0) + b"\x00"                      # throttle_time_ms, error_code, no tags
    return request, struct.pack(">i", len(head) + len(body)) + head + body


def workloads() -> dict[str, tuple[dict | None, bytes, bytes]]:
    produce = (produce_frame("t", 9, 1, "c", records=16, acks=1), produce_response(9, 1))
    fetch = (fetch_request(12, 1, "c"), fetch_response(12, 1, records=16))
    return {
        "produce_v9": (None, *produce),
        "produce_v9_quota": (QUOTAS, *produce),
        "fetch_v12": (None, *fetch),
        "fetch_v12_quota": (QUOTAS, *fetch),
        "heartbeat_v4": (None, *heartbeat()),
    }


def exchange(quotas: dict | None, request: bytes, response: bytes) -> Callable[[int], float]:
    """A timed loop of `n` request+response exchanges on one connected core: CPU seconds."""
    core = connected_core(quotas, observer=ProxyObserver())
    core.parts.perf = time.perf_counter
    first = core.handle(ev.ClientData(NOW, request)) + core.handle(ev.UpstreamData(NOW, response))
    sends = [a for a in first if isinstance(a, ev.Send)]
    assert [s.side for s in sends] == [ev.Side.UPSTREAM, ev.Side.CLIENT], first   # forwarded, answered
    handle, client_data, upstream_data = core.handle, ev.ClientData, ev.UpstreamData

    def run(n: int) -> float:
        t0 = time.process_time()
        for i in range(n):
            now = NOW + i * 1e-4
            handle(client_data(now, request))
            handle(upstream_data(now, response))
        return time.process_time() - t0

    return run


def once() -> dict[str, float]:
    """One round: microseconds of CPU per exchange, per workload."""
    out = {}
    for name, (quotas, request, response) in workloads().items():
        run = exchange(quotas, request, response)
        run(ITERATIONS // 10)   # warm-up
        out[name] = run(ITERATIONS) / ITERATIONS * 1e6
    return out


def table(columns: dict[str, list[dict[str, float]]]) -> str:
    names = list(next(iter(columns.values()))[0])
    heads = list(columns)
    lines = [f"{'us CPU per request+response':<28}" + "".join(f"{h:>14}" for h in heads)
             + ("  ratio median  ratio min" if len(heads) == 2 else "")]
    for name in names:
        medians = [statistics.median(r[name] for r in rounds) for rounds in columns.values()]
        minima = [min(r[name] for r in rounds) for rounds in columns.values()]
        row = f"{name:<28}" + "".join(f"{m:>14.2f}" for m in medians)
        if len(medians) == 2:
            row += f"{medians[1] / medians[0]:>14.3f}{minima[1] / minima[0]:>11.3f}"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", type=Path, help="another checkout (with .venv) to time alternately")
    parser.add_argument("--once", action="store_true", help="one round, as JSON (used by --against)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per tree (default {ROUNDS})")
    args = parser.parse_args()
    if args.once:
        print(json.dumps(once()))
        return
    if args.against is None:
        print(table({"this tree": [once() for _ in range(args.rounds)]}))
        return
    here = Path(__file__).resolve().parents[2]
    trees = {args.against.name: args.against.resolve(), "this tree": here}
    columns: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for turn in range(args.rounds):
        for name, root in (list(trees.items()) if turn % 2 == 0 else reversed(trees.items())):
            script = root / "tests" / "connection" / "bench_core.py"
            done = subprocess.run([str(root / ".venv" / "bin" / "python"), str(script), "--once"], check=True,
                                  capture_output=True, text=True, timeout=600)
            columns[name].append(json.loads(done.stdout))
    print(table(columns))


if __name__ == "__main__":
    main()
