"""kqp's listening sockets: one bootstrap listener, and one listener per upstream broker node id.

A broker's listener is bound synchronously the moment kqp first hears of the broker (its own
Metadata refresh, or a response naming it, which the core holds until `EnsureListeners` is done:
`listen_for`), so the port can go into the very response that named it; the kernel's backlog holds
a client quicker than the accept. `lookup` binds nothing and answers the core for every broker.

With `tls:` or `proxy_protocol:` a listener accepts its sockets itself and hands each to the loop's
`connect_accepted_socket`: a PROXY header is read first off the raw socket (proxy_protocol.py),
`limits:` are checked before the handshake (admission.py: a refused client costs no TLS work), and
the handshake runs here with the current context, so every refusal is known with its peer, counted
and logged where `create_server(ssl=...)` would drop it silently. Plaintext listeners without a
header leave admission to the edge.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import ssl
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass

from kqp.config.model import HostPort
from kqp.proxy.tls.peers import Refusal, handshake_refusal

from .admission import Admission, Slot, peer_name
from .proxy_protocol import HeaderReader

log = logging.getLogger("kqp.listeners")

# (listener, node id, slot, the real client's address from a PROXY header or None: the socket's peer)
ProtocolFactory = Callable[[str, "int | None", "Slot | None", object], asyncio.Protocol]
BACKLOG = 1024
ACCEPT_RETRY_SECONDS = 0.1   # after an accept error (out of file descriptors): let closes catch up


@dataclass(frozen=True)
class ListenerTls:
    """What a TLS listener needs: the current context, a handshake deadline, where refusals go."""

    context: Callable[[], ssl.SSLContext]
    handshake_timeout: float                         # seconds
    refused: Callable[[str, str, Refusal], None]     # (listener, peer, why)
    admission: Admission | None = None               # limits:, checked before the handshake


class BindError(OSError):
    """A port kqp could not listen on, said with the config key that sets it (an OSError still)."""

    def __init__(self, key: str, host: str, port: int, cause: OSError) -> None:
        # The errno's own words: asyncio's servers put the whole address in `strerror`.
        super().__init__(cause.errno, os.strerror(cause.errno) if cause.errno else str(cause))
        self.key, self.host, self.port = key, host, port

    def __str__(self) -> str:
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        hint = " (another process listens there: stop it, or set another port)" \
            if self.errno == errno.EADDRINUSE else ""
        return f"{self.key}: cannot listen on {address}: {self.strerror}{hint}"


def bind_socket(host: str, port: int, reuse_port: bool = False, key: str = "listen") -> socket.socket:
    """A listening socket on host:port; BindError names `key`, the setting of that port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # `kqp run --workers N`: the kernel spreads connections over the workers
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise BindError(key, host, port, exc) from None
    return sock


class ListenerSet:
    def __init__(self, loop: asyncio.AbstractEventLoop, listen: HostPort, advertised_host: str,
                 broker_port: Callable[[int], int], factory: ProtocolFactory, reuse_port: bool = False,
                 tls: ListenerTls | None = None, header: HeaderReader | None = None,
                 broker_key: Callable[[int], str] = lambda node_id: f"broker_port_base + {node_id}") -> None:
        self._loop = loop
        self._tls = tls
        self._header = header
        self._reuse_port = reuse_port
        self._listen = listen
        self.advertised_host = advertised_host
        self._broker_port = broker_port
        self._broker_key = broker_key   # the config key that sets a broker's port, for errors
        self._factory = factory
        self._servers: list[asyncio.base_events.Server] = []
        self._accepting: list[socket.socket] = []     # TLS and PROXY-header listeners: readiness callbacks
        self._retries: dict[socket.socket, asyncio.TimerHandle] = {}   # such listeners backing off
        self._handshakes: set[asyncio.Task[None]] = set()   # sockets being opened: header, handshake
        self.bootstrap_port: int | None = None
        self.broker_ports: dict[int, int] = {}       # node id -> kqp's port for it
        self._pending: set[asyncio.Task[None]] = set()

    async def start_bootstrap(self) -> int:
        sock = bind_socket(self._listen.host, self._listen.port, self._reuse_port)
        self.bootstrap_port = sock.getsockname()[1]
        await self._serve(sock, "bootstrap", None)
        log.info("bootstrap listener on %s:%d", self._listen.host, self.bootstrap_port)
        return self.bootstrap_port

    def ensure_broker(self, node_id: int) -> int:
        """kqp's port for upstream broker `node_id`, binding its listener now if it has none."""
        port = self.broker_ports.get(node_id)
        if port is not None:
            return port
        sock = bind_socket(self._listen.host, self._broker_port(node_id), self._reuse_port,
                           self._broker_key(node_id))
        port = sock.getsockname()[1]
        self.broker_ports[node_id] = port
        task = self._loop.create_task(self._serve(sock, f"broker-{node_id}", node_id))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        log.info("broker %d listener on %s:%d", node_id, self._listen.host, port)
        return port

    async def _serve(self, sock: socket.socket, name: str, node_id: int | None) -> None:
        header = self._header if self._header is not None and self._header.applies_to(name) else None
        if self._tls is not None or header is not None:
            self._accepting.append(sock)
            self._loop.add_reader(sock, self._accept, sock, name, node_id, header)
            return
        server = await self._loop.create_server(lambda: self._factory(name, node_id, None, None), sock=sock,
                                                backlog=BACKLOG)
        self._servers.append(server)

    def _accept(self, sock: socket.socket, name: str, node_id: int | None, header: HeaderReader | None) -> None:
        """The listening socket is readable: take what the backlog holds (as asyncio's servers do)."""
        for _ in range(BACKLOG):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return   # ConnectionAbortedError: a client reset before accept, harmless (as asyncio's servers)
            except OSError as exc:
                # Out of file descriptors (EMFILE) and the like: stop watching the socket for a
                # moment so closes can catch up, as asyncio's own servers do; the backlog waits.
                log.warning("%s listener: accept failed: %s", name, exc)
                self._loop.remove_reader(sock)
                self._retries[sock] = self._loop.call_later(ACCEPT_RETRY_SECONDS, self._resume, sock, name,
                                                            node_id, header)
                return
            conn.setblocking(False)
            if header is not None:   # the real client first; admission and TLS follow in `_open`
                self._track(self._open(conn, address, name, node_id, header))
            else:
                assert self._tls is not None
                self._admit_and_handshake(conn, address, address, name, node_id, self._tls)

    def _resume(self, sock: socket.socket, name: str, node_id: int | None, header: HeaderReader | None) -> None:
        del self._retries[sock]
        self._loop.add_reader(sock, self._accept, sock, name, node_id, header)

    def _track(self, work: Coroutine[object, object, None]) -> None:
        task = self._loop.create_task(work)
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _open(self, conn: socket.socket, address: object, name: str, node_id: int | None,
                    header: HeaderReader) -> None:
        """A socket of a PROXY-header listener: its header, then TLS as any TLS listener's, or the edge."""
        peer = await header.real_peer(conn, address, name)
        if peer is None:
            return   # refused: counted, logged, closed
        if self._tls is not None:
            self._admit_and_handshake(conn, peer, address, name, node_id, self._tls)
            return
        try:   # plaintext: the edge admits it (`limits:`) with the real address, as it admits any client
            await self._loop.connect_accepted_socket(lambda: self._factory(name, node_id, None, peer), conn)
        except OSError:
            conn.close()

    def _admit_and_handshake(self, conn: socket.socket, peer: object, address: object, name: str,
                             node_id: int | None, tls: ListenerTls) -> None:
        slot = None
        if tls.admission is not None:
            slot = tls.admission.admit(name, peer, conn.close)
            if slot is None:
                return
        real = None if peer is address else peer
        self._track(self._handshake(conn, peer_name(peer), name, node_id, tls, slot, real))

    async def _handshake(self, conn: socket.socket, peer: str, name: str, node_id: int | None,
                         tls: ListenerTls, slot: Slot | None, real: object = None) -> None:
        try:
            # The protocol's connection_made runs only after the handshake has succeeded.
            await self._loop.connect_accepted_socket(lambda: self._factory(name, node_id, slot, real), conn,
                                                     ssl=tls.context(), ssl_handshake_timeout=tls.handshake_timeout)
        except (OSError, TimeoutError) as exc:   # ssl.SSLError is an OSError; the loop closes the socket
            if slot is not None:
                slot.release()
            tls.refused(name, peer, handshake_refusal(exc))
        except BaseException:
            if slot is not None:   # cancelled at shutdown mid-handshake: the edge never got it
                slot.release()
            raise

    def listen_for(self, node_ids: Iterable[int]) -> str | None:
        """A listener for each broker that has none yet; None when all are bound, else what failed."""
        failed = []
        for node_id in node_ids:
            try:
                self.ensure_broker(node_id)
            except OSError as exc:   # a BindError, which names the key and the port
                failed.append(f"broker {node_id}: {exc}")
        if failed:
            log.warning("no listener for %s", "; ".join(failed))
        return "; ".join(failed) or None

    def lookup(self, known: Mapping[int, HostPort]) -> Callable[[int, str, int], tuple[str, int] | None]:
        """The connection core's `listener_for`: kqp's address for a broker it listens for, named at the
        upstream address `known` (the cluster's brokers) has for it; None for any other (new, or moved),
        for which the core asks `EnsureListeners`. Binds nothing."""
        ports, host = self.broker_ports, self.advertised_host

        def listener_for(node_id: int, upstream_host: str, upstream_port: int) -> tuple[str, int] | None:
            port = ports.get(node_id)
            if port is None or known.get(node_id) != HostPort(upstream_host, upstream_port):
                return None
            return host, port

        return listener_for

    async def settle(self) -> None:
        """Wait until every listener bound so far is accepting."""
        if self._pending:
            await asyncio.gather(*list(self._pending))

    async def close(self) -> None:
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        for sock in self._accepting:
            self._loop.remove_reader(sock)
            sock.close()
        tasks = list(self._handshakes)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._accepting.clear()
        for server in self._servers:
            server.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
