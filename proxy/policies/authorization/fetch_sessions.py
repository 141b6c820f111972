"""Fetch sessions (KIP-227) opened through kqp, so that a change of the ACLs reaches them.

A broker authorizes every partition of a fetch session on every Fetch. kqp forwards as its own user
and sees only what each request names, and an incremental Fetch (epoch > 0) names only what changed:
the rest lives in the upstream's session. So kqp remembers each session a full Fetch opened (its id
read from the upstream's answer): on which broker, for which principal, under which ACLs
(`AclState.generation`). An incremental Fetch on a session opened under ACLs that have since taken
something away, by another principal, or one kqp does not know (opened before it started, or
forgotten by this bounded table) is answered FETCH_SESSION_ID_NOT_FOUND (70), as by a broker that
lost the session: the client then opens a new one with a full Fetch, which kqp authorizes whole.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from kqp.protocol.fetch import fetch_session_id
from kqp.protocol.parts import Parts

__all__ = ["FETCH_SESSION_ID_NOT_FOUND", "FetchSessions"]

FETCH_SESSION_ID_NOT_FOUND = 70
LIMIT = 32768   # sessions remembered (a broker keeps 1000 by default); one forgotten costs a full Fetch
_FINAL_EPOCH, _INITIAL_EPOCH = -1, 0


class FetchSessions:
    """One per process: (broker, session id) -> (principal, ACL generation), oldest forgotten first."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._opened: OrderedDict[tuple[int | None, int], tuple[str, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._opened)

    def admits(self, node: int | None, principal: str, request: Any, generation: int) -> bool:
        """Whether a Fetch (v7+, decoded) may go on: False for an incremental one on a session kqp
        cannot vouch for. A full Fetch closes the session it names, as the broker does."""
        session_id, epoch = request.session_id, request.session_epoch
        if epoch in (_FINAL_EPOCH, _INITIAL_EPOCH):
            if session_id:
                self._opened.pop((node, session_id), None)
            return True
        key = (node, session_id)
        if self._opened.get(key) != (principal, generation):
            return False
        self._opened.move_to_end(key)   # in use: forgotten last
        return True

    def watch(self, node: int | None, principal: str, version: int,
              generation: int) -> Callable[[Parts, int], None]:
        """What reads the answer to a full Fetch: the session it opened, if any, is remembered."""
        def opened(frame: Parts, body_offset: int) -> None:
            session_id = fetch_session_id(version, frame, body_offset)
            if session_id:
                self._opened[(node, session_id)] = (principal, generation)
                if len(self._opened) > self.limit:
                    self._opened.popitem(last=False)

        return opened
