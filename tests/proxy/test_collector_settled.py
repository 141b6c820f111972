"""A serving kqp leaves what it loaded at start out of the cyclic collector's scans (server.py)."""

from __future__ import annotations

import gc

from kqp.proxy.runtime.server import GC_YOUNG_THRESHOLD, _settle_collector


def test_startup_objects_are_frozen_and_young_collections_are_rarer() -> None:
    before = gc.get_threshold()
    gc.unfreeze()
    held = object(), [object()]   # a container the collector tracks, alive across the settle
    try:
        assert gc.get_freeze_count() == 0
        _settle_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        assert not any(o is held[1] for o in gc.get_objects())   # frozen: no generation scans it
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
