"""Assertions the end-to-end tests share: delivery semantics and "clients only ever see kqp".

Both are stated once here so every client in the matrix is held to exactly the same standard.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from .clients import Consumed, Message
from .net import accepts, split_bootstrap, split_host_port


def _sequence(value: str) -> int:
    return int(value.rsplit("-", 1)[1])


def assert_exactly_once_in_order(produced: Sequence[Message], consumed: Sequence[Consumed]) -> None:
    """Every produced message consumed exactly once, each key on one partition, order kept per partition."""
    counts = Counter(c.value for c in consumed)
    duplicates = sorted(v for v, n in counts.items() if n > 1)
    assert not duplicates, f"consumed more than once: {duplicates[:10]}"
    missing = sorted({v for _, v in produced} - set(counts))
    assert not missing, f"{len(missing)} of {len(produced)} messages never consumed, e.g. {missing[:10]}"
    unexpected = sorted(set(counts) - {v for _, v in produced})
    assert not unexpected, f"consumed messages nobody produced: {unexpected[:10]}"
    sent_key = dict((v, k) for k, v in produced)
    assert all(sent_key[c.value] == c.key for c in consumed), "a message came back with another key"

    partitions_of_key: dict[str, set[int]] = defaultdict(set)
    per_partition: dict[int, list[Consumed]] = defaultdict(list)
    for c in consumed:
        partitions_of_key[c.key].add(c.partition)
        per_partition[c.partition].append(c)
    split = {k: sorted(p) for k, p in partitions_of_key.items() if len(p) > 1}
    assert not split, f"keys spread over several partitions: {split}"
    for partition, records in per_partition.items():
        offsets = [r.offset for r in records]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), \
            f"partition {partition}: offsets out of order {offsets[:20]}"
        sequence = [_sequence(r.value) for r in records]
        assert sequence == sorted(sequence), f"partition {partition}: producer order lost {sequence[:20]}"


def assert_only_kqp_addresses(seen: Iterable[tuple[str, int]], kqp_bootstrap: str, upstream: str,
                              expected_brokers: int | None = None) -> None:
    """Every broker address a client learned is one of kqp's listeners, never an upstream one."""
    seen = sorted(set(seen))
    assert seen, "the client saw no brokers at all"
    kqp_host, _ = split_host_port(kqp_bootstrap)
    upstream_addresses = set(split_bootstrap(upstream))
    leaked = [a for a in seen if a in upstream_addresses or a[0] != kqp_host]
    assert not leaked, f"client metadata names non-kqp addresses {leaked} (upstream {sorted(upstream_addresses)})"
    if expected_brokers is not None:
        assert len(seen) == expected_brokers, f"expected {expected_brokers} brokers via kqp, saw {seen}"
    dead = [a for a in seen if not accepts(*a)]
    assert not dead, f"advertised kqp broker addresses do not accept connections: {dead}"


def expected_broker_count(upstream_kind: str, upstream: str) -> int | None:
    """How many brokers the upstream has, where the fixture knows it (the mock names them all)."""
    if upstream_kind in ("mock", "kafka"):   # their fixtures name every broker
        return len(split_bootstrap(upstream))
    if upstream_kind == "tansu":
        return 1
    return None
