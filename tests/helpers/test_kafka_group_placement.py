"""The Kafka test node's readiness check places one group on each `__consumer_offsets` partition."""

from __future__ import annotations

from upstreams.kafka import group_on_partition, java_string_hash, offsets_partition


def test_java_string_hash_matches_java() -> None:
    # Values printed by Java 17's String.hashCode; the second is Integer.MIN_VALUE, whose abs stays negative.
    assert java_string_hash("kqp-ready-0") == 1894587267
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("") == 0


def test_one_group_on_each_partition() -> None:
    assert offsets_partition("polygenelubricants", 4) == 0
    assert offsets_partition("kqp-ready-0", 4) == 3
    groups = [group_on_partition(p, 4) for p in range(4)]
    assert [offsets_partition(g, 4) for g in groups] == [0, 1, 2, 3]
