"""ApiVersions, answered by kqp: what the upstream and kqp both speak, and the APIs kqp answers itself.

The answer is the intersection of the upstream's ranges with what kqp serves (`api_ranges`, refreshed
from the upstream), with the versions of the APIs kqp answers itself laid over it (SASL when kqp
terminates it, the quota admin API when kqp manages quotas): each such policy is an `advertiser`. It
waits its turn in the in-flight FIFO like any answer. Before authentication it is served, and exempt
from request quotas, as the broker's authenticator answers it. A v3+ request names the client's
software (KIP-511), which the plan hands to the connection's identity. A v5+ request may name the
cluster and node the client means to reach (KIP-1242): as a broker does, kqp answers
REBOOTSTRAP_REQUIRED when that is not the upstream's cluster (`cluster_id`, once kqp has learnt it)
or not the broker this listener stands for, and INVALID_REQUEST when it names one without the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kqp.protocol.api_versions import (
    INVALID_REQUEST,
    REBOOTSTRAP_REQUIRED,
    client_software,
    encode_api_versions_response,
    intended_broker,
    readdressed,
)
from kqp.protocol.parts import joined

from ..plans import Handler, Plan, Request

__all__ = ["ApiVersionsHandler"]

Ranges = Mapping[int, tuple[int, int]]
MAX_ANSWERS = 64   # answers kept per upstream ranges, by (version asked, error)


class ApiVersionsHandler(Handler):
    before_authentication = True

    def __init__(self, api_ranges: Callable[[], Ranges], advertisers: Sequence[Callable[[Ranges], Ranges]],
                 cluster_id: Callable[[], str | None] = lambda: None) -> None:
        self.api_ranges = api_ranges
        self.advertisers = tuple(advertisers)
        self.cluster_id = cluster_id
        # Every connection asks first, and the answer changes only with the upstream's ranges (replaced
        # at a refresh, never changed in place): one frame per (version, error) for the ranges of `_from`.
        self._from: Ranges | None = None
        self._answers: dict[tuple[int, int], bytes] = {}

    def plan(self, req: Request) -> Plan:
        hdr = req.hdr
        software = None
        error = 0
        if hdr.api_version >= 3:   # KIP-511: the client's software, for saying which ones back off
            body = joined(req.frame)[hdr.body_offset:]
            software = client_software(hdr.api_version, body)
            error = self._kip_1242(intended_broker(hdr.api_version, body), req.node)
        return Plan(None, answer=readdressed(self._answer(hdr.api_version, error), hdr.correlation_id),
                    exempt=not req.authenticated, software=software)

    def _answer(self, version: int, error: int) -> bytes:
        upstream = self.api_ranges()
        if upstream is not self._from:
            self._from, self._answers = upstream, {}
        answer = self._answers.get((version, error))
        if answer is None:
            if len(self._answers) >= MAX_ANSWERS:   # a client trying every version: bounded all the same
                self._answers.clear()
            ranges: Ranges = {}
            if not error:
                ranges = upstream
                for advertise in self.advertisers:
                    ranges = advertise(ranges)
            answer = self._answers[version, error] = encode_api_versions_response(version, 0, ranges, error)
        return answer

    def _kip_1242(self, intended: tuple[str | None, int] | None, node: int | None) -> int:
        """The error a broker answers a client that means to reach `intended` with (0: none)."""
        if intended is None:
            return 0
        cluster, node_id = intended
        if (cluster is None) != (node_id == -1):
            return INVALID_REQUEST
        ours = self.cluster_id()
        if cluster is not None and ((ours is not None and cluster != ours) or (node is not None and node_id != node)):
            return REBOOTSTRAP_REQUIRED
        return 0
