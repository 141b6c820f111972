"""What one request costs and where it goes: the per-API part of the connection core.

`plan_request` reads the few bodies kqp must (Produce acks and record counts, Fetch max_bytes, the
KIP-599 mutations) and charges the request; the core (`core.py`) then carries the plan out: sends
`forward` upstream, awaits `entry`'s response, mutes for the violations. Frames kqp needs nothing
from go through on their header alone, as the slices they arrived in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kqp.protocol.api_versions import encode_api_versions_response
from kqp.protocol.apis import ApiKey
from kqp.protocol.headers import RequestHeader
from kqp.protocol.parts import joined
from kqp.protocol.produce import produce_acks
from kqp.proxy.policies.mutation_gate import GATED_APIS
from kqp.proxy.policies.quota_admin import ADMIN_APIS
from kqp.quotas.manager import Violation
from kqp.quotas.model import Principal

from .events import Parts
from .in_flight import InFlight
from .parts import CoreParts

PRODUCE, FETCH, API_VERSIONS = ApiKey.Produce, ApiKey.Fetch, ApiKey.ApiVersions
# Kafka's exemptions from request quotas (KIP-124): the SASL exchange itself.
SASL_APIS = frozenset({ApiKey.SaslHandshake, ApiKey.SaslAuthenticate})


@dataclass(slots=True)
class RequestPlan:
    forward: Parts | None                  # what goes upstream; None: nothing does
    entry: InFlight | None                 # the response to await; None: none comes (acks=0)
    violations: list[Violation] = field(default_factory=list)   # quotas already exceeded
    needs_lookup: bool = False             # look topics up first, then plan the request again


def plan_request(parts: CoreParts, hdr: RequestHeader, head: memoryview, frame: Parts, principal: Principal,
                 authenticated: bool, now: float, looked_up: bool = False) -> RequestPlan:
    """`frame` is the request as the slices it arrived in; `head` a contiguous start of it holding
    at least the header (and Produce's acks)."""
    api, version = hdr.api_key, hdr.api_version
    size = sum(map(len, frame))
    metering = parts.metering
    if not looked_up:   # planned again after a topic lookup: counted the first time
        metering.observer.request(principal, api, size)
    entry = InFlight(hdr.correlation_id, api, version, principal, now, 0.0, exempt=api in SASL_APIS)
    if api == API_VERSIONS:
        # Answered by kqp: the intersection of the upstream's ranges and what kqp serves. Before
        # authentication it is exempt from request quotas, as the broker's authenticator answers it.
        ranges = parts.sasl.advertised(parts.api_ranges())
        if parts.admin is not None:
            ranges = parts.admin.advertised(ranges)
        entry.local_response = encode_api_versions_response(version, hdr.correlation_id, ranges)
        entry.exempt = not authenticated
        return RequestPlan(None, entry)
    if api == PRODUCE:
        violations = metering.charge_produce(principal, size, frame, hdr.body_offset, version, now)
        if produce_acks(version, head[hdr.body_offset:]) == 0:
            return RequestPlan(frame, None, violations)
        return RequestPlan(frame, entry, violations)
    if api == FETCH:
        return RequestPlan((metering.capped_fetch(principal, joined(frame), hdr.body_offset, version),), entry)
    if parts.admin is not None and api in ADMIN_APIS:
        # kqp manages quotas (admin.manage_quotas): its own answer, charged like any request.
        entry.local_response = parts.admin.answer(principal, api, version, hdr.correlation_id,
                                                  joined(frame)[hdr.body_offset:])
        return RequestPlan(None, entry)
    if api in GATED_APIS:
        plan = parts.gate.plan(principal, hdr, joined(frame), now, looked_up)
        if plan.needs_lookup:
            return RequestPlan(None, None, needs_lookup=True)
        entry.rewrite = plan.rewrite
        entry.local_response = plan.answer
        return RequestPlan(None if plan.answer is not None else (plan.frame,), entry, plan.violations)
    return RequestPlan(frame, entry)
