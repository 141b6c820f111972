"""ApiVersions, answered by kqp: what the upstream and kqp both speak, and the APIs kqp answers itself.

The answer is the intersection of the upstream's ranges with what kqp serves (`api_ranges`, refreshed
from the upstream), with the versions of the APIs kqp answers itself laid over it (SASL when kqp
terminates it, the quota admin API when kqp manages quotas): each such policy is an `advertiser`. It
waits its turn in the in-flight FIFO like any answer. Before authentication it is served, and exempt
from request quotas, as the broker's authenticator answers it. A v3+ request names the client's
software (KIP-511), which the plan hands to the connection's identity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kqp.protocol.api_versions import client_software, encode_api_versions_response
from kqp.protocol.parts import joined

from ..plans import Handler, Plan, Request

__all__ = ["ApiVersionsHandler"]

Ranges = Mapping[int, tuple[int, int]]


class ApiVersionsHandler(Handler):
    before_authentication = True

    def __init__(self, api_ranges: Callable[[], Ranges], advertisers: Sequence[Callable[[Ranges], Ranges]]) -> None:
        self.api_ranges = api_ranges
        self.advertisers = tuple(advertisers)

    def plan(self, req: Request) -> Plan:
        hdr = req.hdr
        software = None
        if hdr.api_version >= 3:   # KIP-511: the client's software, for saying which ones back off
            software = client_software(hdr.api_version, joined(req.frame)[hdr.body_offset:])
        ranges = self.api_ranges()
        for advertise in self.advertisers:
            ranges = advertise(ranges)
        return Plan(None, answer=encode_api_versions_response(hdr.api_version, hdr.correlation_id, ranges),
                    exempt=not req.authenticated, software=software)
