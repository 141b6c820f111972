"""The delay queue stepped with a fake clock: order, ties, cancel, compaction, scale."""

from __future__ import annotations

import random
import weakref

from hypothesis import given, settings
from hypothesis import strategies as st

from kqp.quotas.delay_queue import DelayQueue


def test_pops_in_deadline_order_as_the_clock_moves() -> None:
    q: DelayQueue[str] = DelayQueue()
    q.add("c", 3.0)
    q.add("a", 1.0)
    q.add("b", 2.0)
    assert len(q) == 3
    assert q.next_deadline() == 1.0
    assert q.pop_expired(0.5) == []
    assert q.pop_expired(1.0) == ["a"]  # due exactly at the deadline
    assert q.next_deadline() == 2.0
    assert q.pop_expired(2.9) == ["b"]
    assert q.pop_expired(10.0) == ["c"]
    assert len(q) == 0
    assert q.next_deadline() is None
    assert q.pop_expired(11.0) == []


def test_ties_come_out_in_insertion_order() -> None:
    q: DelayQueue[int] = DelayQueue()
    for i in range(10):
        q.add(i, 5.0)
    q.add(-1, 4.0)
    assert q.pop_expired(5.0) == [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_cancel_is_lazy_and_idempotent() -> None:
    q: DelayQueue[str] = DelayQueue()
    a = q.add("a", 1.0)
    q.add("b", 2.0)
    q.cancel(a)
    assert len(q) == 1
    assert q.next_deadline() == 2.0  # the cancelled head is skipped
    q.cancel(a)  # twice: no effect
    assert len(q) == 1
    assert q.pop_expired(5.0) == ["b"]
    assert len(q) == 0


def test_cancel_after_pop_does_nothing() -> None:
    q: DelayQueue[str] = DelayQueue()
    a = q.add("a", 1.0)
    assert q.pop_expired(1.0) == ["a"]
    q.cancel(a)
    assert len(q) == 0
    q.add("b", 2.0)
    assert len(q) == 1


def test_many_cancellations_compact_the_heap() -> None:
    q: DelayQueue[int] = DelayQueue()
    handles = [q.add(i, float(i)) for i in range(1000)]
    for h in handles[:900]:
        q.cancel(h)
    assert len(q) == 100
    # dead entries outnumbered live ones, so the heap was rebuilt and holds few dead ones
    assert len(q._heap) < 200
    assert q.pop_expired(2000.0) == list(range(900, 1000))


def test_count_by_counts_live_entries() -> None:
    q: DelayQueue[tuple[str, int]] = DelayQueue()
    q.add(("produce", 1), 1.0)
    h = q.add(("produce", 2), 1.0)
    q.add(("request", 3), 1.0)
    q.cancel(h)
    assert q.count_by(lambda item: item[0]) == {"produce": 1, "request": 1}


def test_100k_entries_smoke() -> None:
    rng = random.Random(7)
    q: DelayQueue[int] = DelayQueue()
    deadlines = [rng.uniform(0.0, 100.0) for _ in range(100_000)]
    handles = [q.add(i, d) for i, d in enumerate(deadlines)]
    cancelled = set(rng.sample(range(100_000), 10_000))
    for i in cancelled:
        q.cancel(handles[i])
    assert len(q) == 90_000
    popped: list[int] = []
    now = 0.0
    while len(q):  # bounded: the clock passes the last deadline after 100 steps
        now += 1.0
        batch = q.pop_expired(now)
        assert all(deadlines[i] <= now for i in batch)
        popped.extend(batch)
        assert now <= 101.0
    assert len(popped) == 90_000
    assert not cancelled & set(popped)
    assert [deadlines[i] for i in popped] == sorted(deadlines[i] for i in popped)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.booleans()), max_size=60), st.integers(0, 25))
def test_matches_a_sorted_model(entries: list[tuple[int, bool]], now: int) -> None:
    q: DelayQueue[int] = DelayQueue()
    model = []
    for i, (deadline, keep) in enumerate(entries):
        h = q.add(i, float(deadline))
        if keep:
            model.append((deadline, i))
        else:
            q.cancel(h)
    model.sort()
    assert len(q) == len(model)
    assert q.next_deadline() == (float(model[0][0]) if model else None)
    assert q.pop_expired(float(now)) == [i for d, i in model if d <= now]
    assert len(q) == sum(1 for d, _ in model if d > now)


def test_a_cancelled_entry_lets_go_of_its_item_while_the_heap_still_holds_it() -> None:
    # A closed connection's timer is cancelled, not popped: its entry may sit in the heap until it
    # surfaces (or a compaction), and must not keep the connection alive meanwhile.
    class Item:
        pass

    q: DelayQueue[Item] = DelayQueue()
    item = Item()
    gone = weakref.ref(item)
    q.add(Item(), 20.0)
    q.cancel(q.add(item, 10.0))
    del item
    assert gone() is None
    assert q.pop_expired(11.0) == [] and len(q) == 1
