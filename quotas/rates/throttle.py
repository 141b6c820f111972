"""Throttle-time arithmetic (Kafka's QuotaUtils) and how several quotas on one request combine.

KIP-13 / KIP-124: ``X = (O - T) / T * W``, the delay that brings the observed rate O back to the
target T over the rate's own window W. Byte, record and batch throttles are used as computed;
request quotas are capped at one window so a GC pause or one huge request cannot silence a client,
heartbeats included, for long.

`decide` is a request's one decision, as the broker's (KafkaApis; `sendResponseMaybeThrottleWith
ControllerQuota` for mutations): every quota recorded, the largest throttle wins, the channel is
throttled once under the quota that produced it, a tie naming the request quota. Its `Throttle` is
what the response tells and how long the connection is muted: the same time (KIP-219). `throttle_ms`
is Java's Math.round of the milliseconds, so under half a millisecond is no throttle (no mute
either). A violation also carries `pace_seconds` (rates/sensor.py): the largest one's decides the pace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kqp.quotas.model import QUOTA_TYPES, Principal, QuotaKey, QuotaType

# `throttle_time_ms` is an INT32 in every response schema.
INT32_MAX = 2**31 - 1

# Quota types whose throttle is capped at one window (ClientRequestQuotaManager.maxThrottleTimeMs).
CAPPED_TYPES = frozenset({QuotaType.REQUEST_PERCENTAGE, QuotaType.REQUEST_RATE})

# Tie-break for `combine`: KafkaApis names the request quota when the throttles are equal (its
# `bandwidth > request` test sends ties to the request quota), so request types rank first.
_TIE_ORDER = (QuotaType.REQUEST_PERCENTAGE, QuotaType.REQUEST_RATE, *(t for t in QUOTA_TYPES if t not in CAPPED_TYPES))
_RANK = {t: i for i, t in enumerate(_TIE_ORDER)}


@dataclass(frozen=True, slots=True)
class Violation:
    """One quota exceeded by one recording: its type, the throttle it asks for, and the sensor (for a
    capacity pool's quota: the member's key, and the pool's name)."""

    quota_type: QuotaType
    throttle_seconds: float
    key: QuotaKey
    pool: str | None = None
    # Pacing: the mute for a client that does not back off, at most `throttle_seconds`; None: not
    # paced (a steady quota's throttle is its debt; a KIP-599 strict rejection recorded nothing).
    pace_seconds: float | None = None
    # The quota is observed (`mode: observe`): its throttle is counted, never told or muted.
    observed: bool = False


@dataclass(frozen=True, slots=True)
class Throttle:
    """One request's throttle, decided once (`decide`): what its response tells the client, until
    when its connection is muted, and whose quota of which type caused it."""

    ms: int                 # throttle_time_ms, as the response tells it (> 0)
    until: float            # when the mute ends: the decision's time + ms
    principal: Principal
    quota_type: QuotaType
    paced: bool = False     # shortened to its pace: the client cannot back off
    # An observed quota decided it (`mode: observe`): counted, never told or muted; the client gets
    # `enforced`, what the request's enforced quotas alone decide (None: nothing).
    observed: bool = False
    enforced: Throttle | None = None

    @property
    def acted(self) -> Throttle | None:
        """The throttle the client gets: this one, or for an observed one its enforced part."""
        return self.enforced if self.observed else self


def throttle_seconds(observed: float, bound: float, window_size: float) -> float:
    """``X = (O - T) / T * W``: the delay that brings rate O over window W back to T; 0 if O <= T.

    Kafka only computes this after a violation (O > T), so it is never negative there; here an
    acceptable rate gives 0 to the same effect.
    """
    if bound <= 0:
        raise ValueError(f"a throttle needs a positive bound, got {bound}")
    if observed <= bound:
        return 0.0
    return (observed - bound) / bound * window_size


def capped(throttle: float, cap: float) -> float:
    """`throttle`, but no longer than `cap` (QuotaUtils.boundedThrottleTime)."""
    return cap if throttle > cap else throttle


def largest(violations: Iterable[Violation]) -> Violation | None:
    """The violation whose throttle one request gets: the largest; ties go to the request quotas as
    in KafkaApis. None when there are none (or only zero throttles)."""
    best: Violation | None = None
    for violation in violations:
        t = violation.throttle_seconds
        if t <= 0:
            continue
        if (
            best is None
            or t > best.throttle_seconds
            or (t == best.throttle_seconds and _RANK.get(violation.quota_type, 99) < _RANK.get(best.quota_type, 99))
        ):
            best = violation
    return best


def combine(violations: Iterable[Violation]) -> tuple[float, QuotaType | None]:
    """The throttle one request gets from all its violations, and the quota type that caused it
    (`largest`'s); no violations (or only zero throttles) give ``(0.0, None)``."""
    best = largest(violations)
    return (0.0, None) if best is None else (best.throttle_seconds, best.quota_type)


def throttle_ms(seconds: float) -> int:
    """The `throttle_time_ms` for a throttle of `seconds`: 0 means no throttle and no mute.

    Kafka rounds each throttle to whole milliseconds with Java's Math.round, half up
    (QuotaUtils.throttleTime; ControllerMutationQuotaManager.throttleTimeMs), and throttles only
    when the result is > 0 (ClientQuotaManager.throttle), so 0.4 ms is no throttle and 0.5 ms is
    1 ms. Python's round() would not do: it rounds half to even (round(0.5) == 0). Kafka then
    narrows the long to an int (`toInt`), which wraps past 2^31 - 1; here it is capped there, the
    most the INT32 field can say. Negative and NaN (Math.round(NaN) is 0) give 0. Rounding is
    monotonic, so rounding the largest of several throttles equals KafkaApis' max of rounded ones.
    """
    ms = seconds * 1000.0
    if not ms > 0:  # zero, negative, NaN
        return 0
    if ms >= INT32_MAX:
        return INT32_MAX
    whole = math.floor(ms)
    # ms - whole is exact for |ms| < 2**52, so this is half up without floor(ms + 0.5)'s
    # rounding of 0.49999999999999994 + 0.5 to 1.0.
    return whole + 1 if ms - whole >= 0.5 else whole


def decide(violations: Iterable[Violation], principal: Principal, now: float, *, blind: bool = False,
           pacing: bool = False) -> Throttle | None:
    """A request's one throttle from every quota it was charged to, decided at `now`, or None.

    KIP-124's co-existence: the largest throttle wins (ties to the request quotas), in whole
    milliseconds as Kafka rounds them, and the connection is muted exactly as long as the client is
    told. A client that cannot back off (`blind`) is muted for its pace instead, when `pacing` is
    on and the pace is shorter (never a steady quota's debt, which carries no pace). When an observed
    quota decides, the throttle is marked so and carries what the enforced quotas alone decide.
    """
    found = list(violations)
    throttle = _decide(found, principal, now, blind, pacing)
    if throttle is None or not throttle.observed:
        return throttle
    enforced = [v for v in found if not v.observed]
    return replace(throttle, enforced=_decide(enforced, principal, now, blind, pacing) if enforced else None)


def _decide(violations: list[Violation], principal: Principal, now: float, blind: bool,
            pacing: bool) -> Throttle | None:
    worst = largest(violations)
    if worst is None:
        return None
    seconds, pace = worst.throttle_seconds, worst.pace_seconds
    paced = blind and pacing and pace is not None and pace < seconds
    ms = throttle_ms(pace if paced and pace is not None else seconds)
    if not ms:
        return None
    return Throttle(ms, now + ms / 1000, principal, worst.quota_type, paced, worst.observed)
