"""A serving kqp collects young objects less often than CPython's default, and leaves what start-up
made out of its collections (server.py)."""

from __future__ import annotations

import gc

from kqp.proxy.runtime.server import GC_YOUNG_THRESHOLD, _settle_collector


def test_young_collections_are_rarer_and_the_older_generations_keep_their_pace() -> None:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    try:
        _settle_collector()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
        assert GC_YOUNG_THRESHOLD > 700
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
