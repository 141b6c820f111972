"""What kqp advertises to clients, and which requests go through on their header alone.

The APIs whose bodies kqp reads (Produce, Fetch, ApiVersions, SASL, the KIP-599 mutations and
Metadata) and every response that can name a broker are advertised only at versions kqp decodes:
an address kqp cannot rewrite would send a client round it. Every other API needs nothing from
kqp but its header, as Kroxylicious decides per API and version what to decode: a version the
upstream serves and kqp has no layout for is advertised all the same and passed through, charged
to request quotas only, its response matched by correlation id and left untouched (a throttle
still mutes; only the ``throttle_time_ms`` hint is missing).

No version newer than the definitions kqp carries (kafka-python's schemas, kqp's own definitions
and Kafka's facts in :mod:`kqp.protocol.kafka39` and :mod:`kqp.protocol.kafka44`) is advertised,
and no API key none of them knows: a newer version might add a broker address, as Produce v10 and
Fetch v16 did.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .addresses import names_brokers
from .api_versions import intersect_ranges
from .apis import UNSCHEMED, ApiKey, decodable_range, known_range, kqp_ranges

__all__ = ["BODY_APIS", "advertised_ranges", "header_only_pairs"]

#: The APIs whose request or response bodies kqp's readers read (produce.py, fetch.py,
#: api_versions.py, sasl.py, mutations.py, addresses.py).
BODY_APIS = frozenset({
    ApiKey.Produce, ApiKey.Fetch, ApiKey.ApiVersions, ApiKey.SaslHandshake, ApiKey.SaslAuthenticate,
    ApiKey.Metadata, ApiKey.CreateTopics, ApiKey.DeleteTopics, ApiKey.CreatePartitions,
    *(k for k in kqp_ranges() if names_brokers(k)),
    *(k for k, facts in UNSCHEMED.items() if facts.names_brokers),
})


def _passable_range(api_key: int) -> tuple[int, int] | None:
    """The versions of ``api_key`` kqp may advertise: what it decodes for an API whose body it
    reads, every version Kafka's definitions describe for any other; None for an unknown key."""
    if api_key in BODY_APIS:
        return decodable_range(api_key)
    return known_range(api_key)


_PASSABLE: Mapping[int, tuple[int, int]] = MappingProxyType(
    {k: r for k in {*kqp_ranges(), *UNSCHEMED} if (r := _passable_range(k)) is not None})


def header_only_pairs() -> list[tuple[int, int]]:
    """Every (api key, version) kqp forwards on its header alone: passable, not decodable."""
    out = []
    for key, (lo, hi) in sorted(_PASSABLE.items()):
        decodable = decodable_range(key)
        out.extend((key, v) for v in range(lo, hi + 1) if decodable is None or not decodable[0] <= v <= decodable[1])
    return out


def advertised_ranges(upstream: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """What kqp advertises in front of an upstream that advertises ``upstream``: per api key on
    both sides, the overlap of the upstream's range and the versions kqp may pass (empty overlaps
    dropped)."""
    return intersect_ranges(upstream, _PASSABLE)
