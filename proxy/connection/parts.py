"""What every connection of a process shares, built once where the server is assembled.

The core reaches nothing else: no service locator, no process object. Each field is the narrowest
thing the core uses (a callable rather than the object that answers it), so a test builds one from
plain values and the runtime can change what stands behind a field without the core knowing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kqp.protocol.addresses import AddressMapper, BrokerAddress
from kqp.proxy.policies.mutation_gate import MutationGate
from kqp.proxy.policies.quota_admin import QuotaAdmin

from .metering import Metering
from .sasl import SaslPolicy


@dataclass(frozen=True, slots=True)
class CoreSettings:
    """The settings a connection reads; replaced whole on a live reload."""

    max_frame_bytes: int
    fetch_throttle: str = "deliver"   # "deliver" | "empty" (DESIGN.md: Fetch over quota)
    max_in_flight: int | None = None  # limits.max_in_flight_per_connection: stop reading at this many


@dataclass(slots=True)
class CoreParts:
    metering: Metering
    gate: MutationGate
    api_ranges: Callable[[], Mapping[int, tuple[int, int]]]   # what kqp and the upstream both speak
    learn_brokers: Callable[[Iterable[BrokerAddress]], None]   # brokers named in responses
    map_address: AddressMapper                                 # upstream broker -> kqp's listener
    perf: Callable[[], float]   # handler-time clock (time.perf_counter), injected so the core reads none
    settings: CoreSettings      # a reload assigns a new one
    sasl: SaslPolicy = field(default_factory=SaslPolicy)   # who authenticates clients (`sasl.mode`) and against what
    admin: QuotaAdmin | None = None   # kqp answers the quota admin API (`admin.manage_quotas`); None: forwarded
