"""Proxy: a TCP proxy a test puts between two processes to cut the link.

``Proxy(target)`` listens on a free loopback port and forwards every
connection to ``target`` (``host:port``), a thread each way. ``cut()`` makes
it a black hole, as a partition is: nothing more crosses in either
direction, connections stay open, new ones are accepted and never answered,
so the far side learns of it only by its own timeouts. ``heal()`` forwards
again; a connection that lived through a cut has lost bytes, so it is reset
then, and the far side reconnects. A board given a proxy's address (for
etcd, or for another board) can be cut off by the test alone.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class Proxy:
    """Forwards ``127.0.0.1:port`` to ``target`` except while cut."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host.strip("[]") or "127.0.0.1", int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.address = f"127.0.0.1:{self.port}"
        self._open: set[socket.socket] = set()
        #: Connections that lived through a cut: reset on heal.
        self._tainted: set[socket.socket] = set()
        #: Connections that stay silent for good (``stall``).
        self._stalled: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = False
        #: While set, what ``target`` sends back is dropped.
        self._mute = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="proxy", daemon=True)
        self._thread.start()

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """From now on nothing crosses, either way, until ``heal()``."""
        with self._lock:
            self._cut = True
            self._tainted |= self._open

    def stall(self) -> None:
        """The connections open now go silent for good (nothing crosses
        them, either way, and nothing resets them: a partition that ends
        no connection); new ones cross as before."""
        with self._lock:
            self._stalled |= self._open

    def mute(self) -> None:
        """From now on what ``target`` sends back is dropped, until
        ``unmute()``; what the client sends still crosses."""
        self._mute.set()

    def unmute(self) -> None:
        self._mute.clear()

    def heal(self) -> None:
        with self._lock:
            self._cut = False
            doomed, self._tainted = self._tainted, set()
            self._open -= doomed
        for s in doomed:
            _reset(s)

    def close(self) -> None:
        self._closed = True
        # close() alone does not wake a thread blocked in accept(); shutdown does.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            doomed = self._open | self._tainted
            self._open, self._tainted = set(), set()
        for s in doomed:
            _reset(s)
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = None
            if not self._cut:
                try:
                    server = socket.create_connection(self.target, timeout=5)
                    server.settimeout(None)
                except OSError:
                    _reset(client)
                    continue
            with self._lock:
                pair = {client} if server is None else {client, server}
                self._open |= pair
                if self._cut:
                    self._tainted |= pair
            self._start(client, server, back=False)
            if server is not None:
                self._start(server, client, back=True)

    def _start(self, source: socket.socket, sink: socket.socket | None, back: bool) -> None:
        threading.Thread(target=self._pump, args=(source, sink, back), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket | None, back: bool) -> None:
        """Copies ``source`` to ``sink``, dropping what arrives while cut,
        and what comes ``back`` from the target while muted."""
        try:
            while data := source.recv(65536):
                if source in self._stalled:
                    continue
                if sink is not None and not self._cut and not (back and self._mute.is_set()):
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                if s is not None:
                    _reset(s)
            with self._lock:
                self._open.discard(source)
                if sink is not None:
                    self._open.discard(sink)


def _reset(s: socket.socket) -> None:
    """Ends ``s`` with a reset (SO_LINGER 0); wakes a thread blocked on it."""
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
