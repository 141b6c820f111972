"""Every client family under every quota type, through one kqp at once: each holds its quota within 5 %.

Cells (helpers.fidelity): one quota each, its own client id, prefix group or pool, so no two share a
sensor; all run at once, 26 s, through client tap -> kqp -> upstream tap -> the upstream, at short quota
windows (0.2 s x 11, a span of 2.2 s) and the default algorithm (`steady`). Each is judged on the wire:
the rate after the first span within 0.95-1.05 of the quota (at most 1.05 at the ceiling the quota holds
the client to, which a client's stalls on a busy machine cannot raise; at least 0.95 by the plain slope,
counting what its clients forfeited: quota left unused beyond the allowance, which the quota's
arithmetic takes from a client too slow to use it on a busy machine); no client error, timeout or
request given up; the first burst, how far the units ran ahead of the quota's line, at most Kafka's: its
first allowance ((window_count - 1) windows of quota) and the request that crosses it, per connection (a
pipeline stops there), also for producers with librdkafka's default 1 MB batches pipelining several,
alone and two in a prefix group; and KIP-219's promise, the throttle told in all and the time kqp muted
the cell's connections agreeing within a window (`helpers.fidelity.agrees`).

Families: librdkafka (confluent-kafka, kcat), kafka-python 3 and 2, aiokafka, the Java client and
its share consumer (a share group's member, KIP-932: Kafka only), Sarama 1.61 and Debian's 1.22,
franz-go, kafkajs (tests/clients/), and raw Produce floods that never wait out a throttle (v3, which
cannot, and v7, which will not). Quota types: producer and consumer
bytes, records and batches, request_rate, request_percentage (kqp's own measure, read from its
metrics), controller_mutation_rate. Upstreams: Apache Kafka, and librdkafka's mock cluster (no
CreateTopics: no mutation cell; cells whose client cannot run on it say so).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from helpers.fidelity import Run, Verdict, agrees, judge_all, largest_response, run_matrix, standard_cells, table
from helpers.quota_analysis import unanswered_closes
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

# Both upstreams' matrices run on the worker that runs the Spark tests one after another: some 50
# client processes each, they starved each other (and a Spark JVM would) when they met on 2 cores.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("spark")]

WINDOWS = {"window_size_seconds": 0.2, "window_count": 11}
SECONDS = 26.0
RATIO = (0.95, 1.05)
WINDOW = WINDOWS["window_size_seconds"]
ALLOWANCE = (WINDOWS["window_count"] - 1) * WINDOW   # seconds of quota a fresh key may send at once
JUDGED = 8.0         # seconds judged at least: the clients start at once, some slowly (JVMs, groups)
JITTER = 0.5         # seconds the taps may stamp a cell's first request late, while 40 clients start


def check(run: Run, verdicts: list[Verdict]) -> list[str]:
    """Every cell's failures, as lines."""
    bad = []
    for v in verdicts:
        cell = v.cell
        # Over the quota is judged at the ceiling: a client's own stalls cannot raise it, though early
        # ones tilt the plain slope up (CI: 1.07 x). Under it by the plain slope: in one loaded full run
        # the ceiling read 0.93-0.94 x for three producers whose slope read 0.96-1.005 x; or by what the
        # whole run gave, the allowance aside, where large crossing requests on several connections
        # left a debt that is paid back as the requests that follow shrink (librdkafka's 1 MB batches on
        # the mock's three brokers: 0.88-0.94 x by the slope, 1.0 x over the run).
        # A quota is a ceiling: what a client left unused beyond the allowance it may carry is its own
        # loss (one CI run beside other tests: three producers 0.87-0.93 x, starved, or their requests
        # at a starved Kafka, while the same kqp held the rest at 0.99-1.03 x).
        under = max(v.slope or 0.0, v.average or 0.0) + v.forfeited / max(v.judged, 1e-9)
        if v.ratio is None or v.slope is None or v.ratio > RATIO[1] or under < RATIO[0]:
            bad.append(f"{cell.name}: {v.ratio} x its quota at the ceiling, {v.slope} x by the plain slope, "
                       f"{v.average} x over the run, over {v.judged:.1f} s, {v.forfeited:.1f} s forfeited")
        if v.judged < JUDGED:
            bad.append(f"{cell.name}: only {v.judged:.1f} s judged")
        if v.ratio is None or v.judged < JUDGED:   # too little to judge: what the clients said they did
            bad.append(f"  {cell.name}'s clients: {_told(v)}")
        if v.errors or v.timeouts:
            bad.append(f"{cell.name}: errors {v.errors[:3]}, timeouts {v.timeouts}")
        # Kafka's first allowance and the request that crosses it on each connection (or a window,
        # whichever is more), and the taps' lag on a busy machine; a consumer's also one response (kqp
        # caps a Fetch to what fits only for a byte quota). request_percentage is kqp's own measure,
        # read from its metrics: no first burst to see.
        crossing = v.connections * largest_response(run, cell) / cell.quota if cell.mode == "produce" else 0.0
        bound = ALLOWANCE + max(WINDOW, crossing) + JITTER
        if cell.scope == "pool":
            # A member that starts after the others have spent brings its share of the allowance with
            # it (its own full bucket, as a new entity's): k members in turn, 1/2 + ... + 1/k more.
            bound += ALLOWANCE * sum(1 / k for k in range(2, len(cell.members) + 1))
        if cell.mode == "consume":
            bound += largest_response(run, cell) / cell.quota
        elif cell.quota_type == "controller_mutation_rate":
            # KIP-599's bucket holds the whole span (window_count windows, one more than the allowance),
            # and one CreateTopics of any size always fits, so the last topic in may overrun it.
            bound += WINDOW + largest_response(run, cell) / cell.quota
        if cell.quota_type != "request_percentage" and v.burst > bound:
            bad.append(f"{cell.name}: first burst {v.burst:.2f} s of quota, more than {bound:.2f}")
        if not agrees(v, WINDOW):
            bad.append(f"{cell.name}: told {v.told_s:.2f} s of throttle, muted {v.imposed_s:.2f} s "
                       f"(last throttles {v.last_s:.2f} s)")
    return bad


def _told(v: Verdict) -> dict[str, Any]:
    keys = ("sent", "acked", "consumed", "keys_distinct", "seconds", "timeouts")
    return {cid: {**{k: r[k] for k in keys if k in r}, "stderr": (r.get("stderr") or "")[-300:]}
            for cid, r in v.reports.items()}


@pytest.mark.parametrize("kind", ["kafka", "mock"])
def test_every_client_and_quota_type_holds_its_quota_within_5_percent(kind: str, request: pytest.FixtureRequest,
                                                                      kqp: Any) -> None:
    upstream: Upstream = request.getfixturevalue("kafka" if kind == "kafka" else "mock_cluster")
    matrix = standard_cells(WINDOWS, kind)
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        run = run_matrix(stack, kqp, upstream, matrix, windows=WINDOWS, seconds=SECONDS)
        verdicts = judge_all(run, matrix)
        # A consumer closing mid-Fetch, a share consumer mid-ShareFetch (its long poll).
        closes = unanswered_closes(run.path.client_tap, ignore=frozenset({ApiKey.Fetch, ApiKey.ShareFetch}))
    print(f"\n{kind}, {len(matrix)} cells, {time.monotonic() - began:.0f} s:\n{table(verdicts)}")
    for v in verdicts:
        if len(v.shares) > 1:
            print(f"  {v.cell.name} split: {', '.join(f'{k} {s:.2f}' for k, s in sorted(v.shares.items()))}")
    bad = check(run, verdicts)
    assert not bad, "\n".join(bad)
    assert not closes, closes
