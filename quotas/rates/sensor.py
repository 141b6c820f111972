"""One quota sensor: what one quota key has used of one quota type, and the throttle it earns.

Kafka's `Sensor.record` records first and checks afterwards, so usage counts even while the entity
is over quota; `QuotaSensor.charge` does the same. `sampled` quotas measure with a `SampledRate` and
throttle by ``(O - T) / T * W``; `steady` and `token_bucket` quotas (and `controller_mutation_rate`
always) enforce with a `TokenBucket` (a steady one holds Kafka's first allowance, (window_count - 1)
windows; KIP-599's, window_count) and keep a `SampledRate` for observation only. A quota of 0
blocks. A shared sensor also hands every recording to its `SharedUsage` (fleet/ledger.py).

Beyond Kafka, `pace` is how long to mute a client that does not back off by itself: the recording's
own cost, `value / limit` seconds, queued behind the key's earlier over-quota costs on a virtual
clock (`paced_until`, as GCRA keeps one), never more than the throttle (quotas/README.md, "Pacing").
A steady quota's throttle is the key's debt, which no request may skip: its violations carry no pace.
"""

from __future__ import annotations

import math

from kqp.quotas.fleet.ledger import UNHEARD, SharedUsage
from kqp.quotas.model import BUCKETS, SAMPLED, STEADY, TOKEN_BUCKET, EntitySpec, QuotaKey, QuotaType
from kqp.quotas.rates.sampled_rate import SampledRate
from kqp.quotas.rates.throttle import Violation, throttle_seconds
from kqp.quotas.rates.token_bucket import TokenBucket


class QuotaSensor:
    """Measurement, limit and last throttle of one `(quota type, QuotaKey)`."""

    __slots__ = ("_burst", "_scale", "algorithm", "bucket", "cap", "entity", "last_record", "last_throttle", "limit",
                 "paced_until", "rate", "shared", "span", "steady", "window")

    def __init__(self, limit: float, window_size: float, window_count: int, now: float, *,
                 cap: float | None = None, token_bucket: bool = False, entity: EntitySpec | None = None,
                 shared: SharedUsage | None = None, algorithm: str | None = None) -> None:
        """`algorithm` (model.ALGORITHMS) says how use is measured; without it, `token_bucket`."""
        self.algorithm = algorithm = algorithm or (TOKEN_BUCKET if token_bucket else SAMPLED)
        self.limit = limit
        self.entity = entity  # the configured entity whose quota this is (for logs and metrics)
        self.window = window_size
        self.span = window_size * window_count
        self.cap = cap
        self.rate = SampledRate(window_size, window_count)
        self.shared = shared
        self.steady = algorithm == STEADY
        self._scale = 1.0 if shared is None else shared.ledger.scale
        # KIP-599: refill rate Q, burst Q * S * W; steady: Kafka's first allowance, Q * (S - 1) * W.
        self._burst = window_size * max(window_count - 1, 1) if self.steady else self.span
        quota = limit * self._scale
        self.bucket = TokenBucket(quota, quota * self._burst, now) if algorithm in BUCKETS else None
        if shared is not None and self.bucket is not None:
            shared.on_others = self.bucket.record   # the others' mutations debit this replica
        self.last_record = now
        self.last_throttle = 0.0
        self.paced_until = now   # when the key's paced recordings so far are paid for (`pace`)

    def set_limit(self, limit: float) -> None:
        """Apply a new limit to the existing measurement, as Kafka swaps a live metric's quota.

        Rate samples are kept and compared with the new limit from the next check on. A token
        bucket keeps its tokens and takes the new rate and burst (Q * S * W): see
        `TokenBucket.update_rate` for what that does to a debt and to the burst.
        """
        self.limit = limit
        if self.bucket is not None:
            quota = limit * self._scale
            self.bucket.update_rate(quota, quota * self._burst)

    def follow_limit(self, limit: float, now: float) -> None:
        """A new limit that the past is judged against as it was: samples count as the same fraction
        of the new limit as they were of the old one (a pool member's quota moves with the others'
        demand, and usage within the quota in force must not be paid back when it shrinks, nor
        credited when it grows). A token bucket is refilled at the old rate up to `now` first: KIP-599's
        rate change refills the time since the bucket was last touched at the new rate, which would
        credit a member muted at a quota of 0 with its whole new burst at once."""
        if self.bucket is None and self.limit > 0 and limit > 0:
            self.rate.scale(limit / self.limit)
        elif self.bucket is not None:
            self.bucket.tokens(now)
        self.set_limit(limit)

    def _rescale(self, scale: float) -> None:
        """A new share of the limit (1 while the fleet is reachable, 1/n alone); a token bucket
        replica follows it as a live quota change (`TokenBucket.update_rate`)."""
        self._scale = scale
        if self.bucket is not None:
            self.bucket.update_rate(self.limit * scale, self.limit * scale * self._burst)

    def add(self, value: float, now: float) -> None:
        """Record `value` without checking the quota (Kafka's `record(value, time, false)`)."""
        self.rate.record(value, now)
        if self.bucket is not None:
            self.bucket.record(value, now)
        if self.shared is not None:
            self.shared.record(value, now)
        self.last_record = now

    def observe(self, now: float) -> tuple[float, float]:
        """(rate, window) as the quota sees it: this process's samples plus, shared, the fleet's
        (over this process's window: fleet/ledger.py says why)."""
        if self.shared is None:
            return self.rate.observe(now)
        return self.rate.observe(now, self.shared.remote(now))

    def measure(self, now: float) -> float:
        return self.observe(now)[0]

    def local_rate(self, now: float) -> float:
        """This process's own rate, without the fleet's usage (equal to `measure` unless shared)."""
        return self.rate.observe(now)[0]

    def pace(self, value: float, throttle: float, now: float) -> float:
        """The mute for a client that does not back off, for a recording of `value` that earned
        `throttle` at `now`: its cost queued behind the key's earlier paced ones, at most `throttle`."""
        limit = self.limit * self._scale
        if self.shared is not None:
            fleet = self.measure(now)
            if fleet > 0:
                limit *= min(1.0, self.local_rate(now) / fleet)
        if limit <= 0:   # a blocked key (quota 0): no cost can be paid, the throttle stands
            return throttle
        start = self.paced_until if self.paced_until > now else now
        # The whole cost joins the queue even when the throttle is shorter: a request let through by a
        # short throttle (the sampled rate forgetting an old burst) is paid back by the later paces,
        # so pacing never lets a key run above the quota for longer than Kafka's throttles would.
        self.paced_until = start + value / limit
        return min(self.paced_until - now, throttle)

    def throttle(self, now: float) -> float:
        """Seconds of throttle the quota asks for at `now`; 0 within quota."""
        shared = self.shared
        if shared is not None:
            shared.ledger.check(now)   # a stale view of the fleet puts it alone first
            if shared.ledger.scale != self._scale:
                self._rescale(shared.ledger.scale)
        if self.bucket is not None:
            t = self.bucket.throttle_seconds(now)
            if t == math.inf:
                t = self.span
        else:
            if shared is None:
                if self.rate.surely_below(self.limit, now):   # far below the quota: nothing to sum
                    return 0.0
                observed, window = self.rate.observe(now)
                limit = self.limit
            else:
                observed, window = self.rate.observe(now, shared.remote(now))
                limit = self.limit * self._scale
            if observed <= limit:
                return 0.0
            t = self.span if limit <= 0 else throttle_seconds(observed, limit, window)
            if shared is not None and shared.others_active == UNHEARD and shared.ledger.shared \
                    and t > shared.ledger.sync_interval:
                # The others' usage was only guessed (fleet/ledger.py, `remote`): mute no longer than it
                # takes the next exchange to tell; the client's next request is judged on the fleet's
                # real usage, which includes what it used now.
                t = shared.ledger.sync_interval
        if self.cap is not None and t > self.cap:
            if self.steady:
                # A capped quota (KIP-124) mutes one window at most, so a debt is repaid over the
                # key's later requests; past a span's worth it is forgiven (a GC pause, one huge request).
                self.forgive(t, now)
            t = self.cap
        if t > 0:
            self.last_throttle = t
            if self.shared is not None:
                self.shared.throttled(now + t)
        return t

    def forgive(self, t: float, now: float) -> float:
        """A bucket's debt past a span's worth forgiven, as the sampled rate forgets it, for a debt
        nothing enforces (a capped quota's past its cap, an observed quota's, which would otherwise
        grow for as long as it is observed and throttle the client for as long once enforced);
        returns the throttle left of `t`."""
        if self.bucket is None or not self.span < t != math.inf:
            return t
        self.bucket.record(-(t - self.span) * self.bucket.rate, now)
        return self.span

    def refund(self, value: float, now: float) -> None:
        """Take back a recording of `value` (a Fetch answered empty: Kafka's unrecordQuotaSensor)."""
        self.add(-value, now)

    def charge(self, value: float, now: float) -> float:
        """Record, then check (Kafka's `Sensor.record(value, time, true)`); returns the throttle."""
        bucket = self.bucket
        if bucket is None or self.shared is not None:
            self.add(value, now)
            return self.throttle(now)
        # A local bucket (every quota under `steady`): one refill for the charge and its check, and
        # within the quota nothing more to decide: `throttle` would give 0.
        self.rate.record(value, now)
        self.last_record = now
        if bucket.spend(value, now) >= 0:
            return 0.0
        return self.throttle(now)

    def violation(self, quota_type: QuotaType, key: QuotaKey, value: float, throttle: float, now: float,
                  pool: str | None = None, observed: bool = False) -> Violation:
        """The `Violation` a charge of `value` that earned `throttle` at `now` gives: with its pace,
        unless steady (its throttle is the key's debt) or observed (nothing acts on it)."""
        pace = None if self.steady or observed else self.pace(value, throttle, now)
        return Violation(quota_type, throttle, key, pool, pace, observed)

    def tokens(self, now: float) -> float | None:
        """Tokens left in the bucket, or None for a rate sensor."""
        if self.bucket is None:
            return None
        if self.shared is not None:
            self.shared.ledger.check(now)
            if self.shared.ledger.scale != self._scale:
                self._rescale(self.shared.ledger.scale)
        return self.bucket.tokens(now)
