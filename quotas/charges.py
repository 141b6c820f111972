"""Charges named as values: what a plan says a request costs, for the one room that charges it.

The proxy's handlers and its mutation gate never charge a quota themselves: they say what to charge,
and the connection's `Charging` applies it to the `QuotaManager`. KIP-599's partition mutations need
more than an amount, since how they are recorded and whether their throttle counts depends on the
request's version and on what the controller did (StrictControllerMutationQuota,
ControllerMutationQuota): `MutationRule` says which.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from .model import Principal

__all__ = ["MutationCharge", "MutationRule"]


class MutationRule(enum.Enum):
    """How a `MutationCharge` is recorded, and whether its throttle counts for the request."""

    PERMISSIVE = "recorded and checked: its throttle is the request's (versions before the strict quota)"
    STRICT = "admitted while the bucket had tokens: recorded unchecked, no throttle"
    REJECTED = "admitted topics recorded unchecked; the others got 89, so the request's throttle is -K/R"
    SETTLE = "recorded and checked, its throttle left to the next mutation (a correction, an auto-creation)"


class MutationCharge(NamedTuple):
    """Partitions created or deleted, charged to `principal`'s `controller_mutation_rate`."""

    principal: Principal
    partitions: int
    rule: MutationRule = MutationRule.SETTLE
