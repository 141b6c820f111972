"""Event loop selection: uvloop when installed (and asked for), asyncio otherwise."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

LoopChoice = Literal["auto", "asyncio", "uvloop"]
T = TypeVar("T")
log = logging.getLogger("kqp.loop")


def loop_factory(choice: LoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for `asyncio.Runner`; None means asyncio's default loop."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit("kqp: --loop uvloop asked for, but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: LoopChoice = "auto") -> T:
    factory = loop_factory(choice)
    with asyncio.Runner(loop_factory=factory) as runner:
        log.debug("event loop: %s", type(runner.get_loop()).__module__)
        return runner.run(main)
