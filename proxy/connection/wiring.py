"""What every connection of a process shares, built once where the server is assembled.

The core reaches nothing else: no service locator, no process object. Each field is the narrowest
thing the core uses (a callable rather than the object that answers it), so a test builds one from
plain values and the runtime can change what stands behind a field without the core knowing. The
process-wide policies (`kqp.proxy.policies`) are not here: the API handlers that consult them are
built with them (`handlers/registry.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kqp.config.model import UpstreamSasl
from kqp.protocol.frames import ReadArena
from kqp.proxy.connection.authentication import Principals
from kqp.proxy.connection.charging import Charging
from kqp.proxy.connection.handlers.registry import Handlers
from kqp.proxy.connection.sasl import SaslPolicy
from kqp.proxy.connection.settings import CoreSettings

__all__ = ["CoreSettings", "CoreWiring", "ListenerLookup"]

#: (node id, upstream host, upstream port) -> kqp's (host, port) for that broker, or None when kqp has
#: no listener for it yet or knows it at another address (the core then asks for `EnsureListeners`).
ListenerLookup = Callable[[int, str, int], "tuple[str, int] | None"]


@dataclass(slots=True)
class CoreWiring:
    charging: Charging
    handlers: Handlers                                         # api key -> its handler (the dispatcher's table)
    listener_for: ListenerLookup                               # upstream broker -> kqp's listener
    perf: Callable[[], float]   # handler-time clock (time.perf_counter), injected so the core reads none
    # ... and the loop thread's CPU clock (time.thread_time), which it reads instead while handler time is
    # charged (`QuotaManager.handler_cpu`): a request preempted by another process costs its client nothing more.
    cpu: Callable[[], float]
    settings: CoreSettings      # a reload assigns a new one
    sasl: SaslPolicy = field(default_factory=SaslPolicy)   # who authenticates clients (`sasl.mode`) and against what
    upstream_sasl: UpstreamSasl | None = None   # kqp's own login on each upstream connection (LOGGING_IN)
    principals: Principals = field(default_factory=Principals)   # one object per (user, client id), shared
    arena: ReadArena = field(default_factory=ReadArena)   # where reads land: one buffer for all connections
