"""Every broker address the responses a wire tap kept hand to a client, read with kafka-python's classes.

A client learns where brokers are from Metadata, FindCoordinator and DescribeCluster answers, and
since KIP-951 from the `NodeEndpoints` tag of Produce v10+ and Fetch v16+ answers (a partition's
new leader, with `CurrentLeader` beside the partition's NOT_LEADER_OR_FOLLOWER). A tap asked to
keep those api keys' frames (`WireTap(keep_frames=ADDRESS_APIS)`) lets a test list every address
in them; the decoding is kafka-python's, so a bug in kqp's rewriter cannot confirm itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kqp.protocol.apis import ApiKey, message_classes
from kqp.protocol.headers import response_body_offset

from .wire_tap import WireResponse

ADDRESS_APIS = frozenset({ApiKey.Metadata, ApiKey.FindCoordinator, ApiKey.DescribeCluster, ApiKey.Produce,
                          ApiKey.Fetch})


@dataclass(frozen=True, slots=True)
class SeenAddress:
    api_key: int
    api_version: int
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port


def _endpoints(api_key: int, version: int, body: object) -> Iterable[tuple[int, str, int]]:
    if api_key in (ApiKey.Metadata, ApiKey.DescribeCluster):
        for broker in body.brokers:   # type: ignore[attr-defined]
            yield getattr(broker, "node_id", getattr(broker, "broker_id", -1)), broker.host, broker.port
    elif api_key == ApiKey.FindCoordinator:
        if version >= 4:
            for entry in body.coordinators:   # type: ignore[attr-defined]
                if entry.error_code == 0:
                    yield entry.node_id, entry.host, entry.port
        elif body.error_code == 0:   # type: ignore[attr-defined]
            yield body.node_id, body.host, body.port   # type: ignore[attr-defined]
    elif api_key in (ApiKey.Produce, ApiKey.Fetch):
        for node in getattr(body, "node_endpoints", None) or ():
            yield node.node_id, node.host, node.port


def seen_addresses(responses: Iterable[WireResponse]) -> list[SeenAddress]:
    """Every endpoint in the kept response frames (responses kept without a frame are skipped)."""
    out: list[SeenAddress] = []
    for response in responses:
        if response.frame is None or response.api_key not in ADDRESS_APIS:
            continue
        view = memoryview(response.frame)
        offset = response_body_offset(response.api_key, response.api_version, view)
        body = message_classes(response.api_key)[1].decode(bytes(view[offset:]), version=response.api_version)
        out.extend(SeenAddress(response.api_key, response.api_version, node_id, host, port)
                   for node_id, host, port in _endpoints(response.api_key, response.api_version, body))
    return out
