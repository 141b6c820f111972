"""KIP-599's token bucket for controller mutations, with an explicit clock.

A sampled rate copes badly with bursts: 560 partitions created at once against 5/s over 100
one-second windows hold the average above 5/s for 100 s, although 12 s of refill would pay for
them. The bucket accrues tokens continuously: refill ``K = min(K + (now - T) * R, B)`` with the
burst B = R * window_count * window_size; recording N ``K = min(K - N, B)``, possibly negative (one
request may create a topic of any size); throttle ``-K / R`` while K < 0.

Admission is the caller's rule (tokens >= 0 for Kafka's strict quota, always for the permissive
one; `QuotaManager.admit_mutations`). A new bucket starts full: Kafka's starts with 0 tokens last
updated at time 0, so its first refill fills it, the same thing said directly.
"""

from __future__ import annotations

import math


class TokenBucket:
    """Tokens refilled at `rate` per second up to `burst`; recording spends them, possibly below 0."""

    __slots__ = ("_burst", "_last", "_rate", "_tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        _check(rate, burst)
        self._rate = float(rate)
        self._burst = float(burst)
        self._tokens = self._burst
        self._last = now

    def _refill(self, now: float) -> None:
        elapsed = now - self._last
        if elapsed > 0:  # a clock that steps back must not drain the bucket
            self._tokens = min(self._burst, self._tokens + elapsed * self._rate)
        self._last = max(self._last, now)

    def record(self, value: float, now: float) -> None:
        """Spend `value` tokens at `now` (a negative value gives tokens back, up to the burst)."""
        self._refill(now)
        self._tokens = min(self._burst, self._tokens - value)

    def spend(self, value: float, now: float) -> float:
        """`record` then `tokens` with one refill: what a quota check right after a charge reads."""
        self._refill(now)
        self._tokens = tokens = min(self._burst, self._tokens - value)
        return tokens

    def tokens(self, now: float) -> float:
        """Tokens left at `now`; negative means the bucket is in debt and throttling applies."""
        self._refill(now)
        return self._tokens

    def throttle_seconds(self, now: float) -> float:
        """``-K / R`` when K < 0, else 0: the wait until the bucket is back to zero tokens.

        With a zero rate the debt is never repaid; that is reported as infinity and the caller
        decides what a blocked entity's throttle is.
        """
        tokens = self.tokens(now)
        if tokens >= 0:
            return 0.0
        if self._rate == 0:
            return math.inf
        return -tokens / self._rate

    def update_rate(self, rate: float, burst: float) -> None:
        """Change quota and burst as Kafka does when a `controller_mutation_rate` changes.

        Kafka swaps the metric's config (ClientQuotaManager.updateQuotaMetricConfigs) and leaves
        the bucket alone; TokenBucket reads quota and burst from the config at each refill. So:
        tokens are kept, a debt included (a higher rate repays it sooner, it is never forgiven);
        a higher burst is not filled, only refilled into; tokens above a lower burst are cut; and
        the time since the bucket was last touched (recorded or measured) is refilled at the new
        rate. Cutting now rather than at the next refill gives the same tokens: the refill is
        capped at the burst either way.
        """
        _check(rate, burst)
        self._rate = float(rate)
        self._burst = float(burst)
        self._tokens = min(self._tokens, self._burst)

    @property
    def rate(self) -> float:
        return self._rate

    @property
    def burst(self) -> float:
        return self._burst


def _check(rate: float, burst: float) -> None:
    if not (math.isfinite(rate) and rate >= 0):
        raise ValueError(f"token bucket rate must be finite and >= 0, got {rate}")
    if not (math.isfinite(burst) and burst >= 0):
        raise ValueError(f"token bucket burst must be finite and >= 0, got {burst}")
