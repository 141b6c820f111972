"""Micro-benchmark: what a capacity pool costs `QuotaManager.record_produce` (timing only, not collected).

Run ``.venv/bin/python tests/quotas/bench_pool_cost.py``. Each case charges the same 16 KB Produce requests, a
request every millisecond of simulated time, from 8 principals; the managers differ only in their
settings (no clock is read by the manager: `now` is the loop's counter):

- ``none``: no quota at all (the call returns at once);
- ``quotas``: kqp-quotas's settings (every quota type at every entity level, none exceeded);
- ``quotas + pool, not a member``: the same, and a pool that these principals are not in;
- ``quotas + pool, member``: the same, and a pool they are all in, its budget never reached
  (what the issue's "a pool configured but not binding" costs the requests it takes);
- ``quotas + pool, member, fleet``: that pool in cluster scope (usage noted for the exchange).

Prints per case the median and the minimum over `ROUNDS` interleaved rounds of the time per call,
and each pool case's median and minimum as ratios of ``quotas``'s. A pool's reallocation runs once per window
(0.2 s here, 200 calls), inside the timed calls, as it does in kqp.
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable

from kqp.quotas.fleet.ledger import FleetLedger
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import DEFAULT, QUOTA_TYPES, EntitySpec, Principal, QuotaSettings
from kqp.quotas.pools.spec import MemberSelector, PoolSpec

ROUNDS = 15
CALLS = 20_000
PRINCIPALS = [Principal("ANONYMOUS", f"bench-{i}") for i in range(8)]
UNREACHABLE = 1e12


def every_entity() -> dict[EntitySpec, dict[str, float]]:
    """proxy/bench/kqp_target.py's every-entity: every quota type at every level of precedence."""
    values = dict.fromkeys(QUOTA_TYPES, UNREACHABLE)
    values["request_percentage"] = 1e9
    specs = [EntitySpec(u, c) for u in ("ANONYMOUS", DEFAULT, None) for c in ("bench-0", DEFAULT, None)
             if (u, c) != (None, None)]
    return {spec: values for spec in specs}


def settings(pool: str | None) -> QuotaSettings:
    pools = () if pool is None else (PoolSpec("ingest", {"producer_byte_rate": UNREACHABLE},
                                              (MemberSelector(client_id_prefix=pool),)),)
    return QuotaSettings(0.2, 11, every_entity(), pools=pools)


def runner(manager: QuotaManager) -> Callable[[], None]:
    clock = iter(range(10**12))

    def run() -> None:
        record, ps = manager.record_produce, PRINCIPALS
        for _ in range(CALLS):
            now = next(clock) / 1000
            record(ps[int(now * 1000) & 7], 16384, 16, 1, now)
    return run


def main() -> None:
    ledger = FleetLedger("bench", "e", 0.2, 11, 1, 0.1)
    cases = {
        "none": QuotaManager(QuotaSettings(), 0.0),
        "quotas": QuotaManager(settings(None), 0.0),
        "quotas + pool, not a member": QuotaManager(settings("etl-"), 0.0),
        "quotas + pool, member": QuotaManager(settings("bench-"), 0.0),
        "quotas + pool, member, fleet": QuotaManager(settings("bench-"), 0.0, ledger),
    }
    runs = {name: runner(m) for name, m in cases.items()}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            times[name].append(timeit.timeit(run, number=1) / CALLS * 1e6)
            if name.endswith("fleet"):
                ledger.collect(0.0)   # what the exchange would take away, so pending stays small
    base, floor = statistics.median(times["quotas"]), min(times["quotas"])
    print(f"record_produce, 16 KB requests, {CALLS} calls x {ROUNDS} rounds (us per call; ratios to quotas, "
          "median and min: on a loaded machine the min is the steadier)")
    for name, values in times.items():
        median = statistics.median(values)
        ratio = f"  x {median / base:.3f} / {min(values) / floor:.3f}" if name.startswith("quotas +") else ""
        print(f"  {name:30} median {median:6.2f}  min {min(values):6.2f}{ratio}")
    for name, m in cases.items():
        assert not any(v for p in PRINCIPALS for v in m.record_produce(p, 1, 1, 1, 10**9)), name


if __name__ == "__main__":
    main()
