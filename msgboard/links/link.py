"""One link: a ``msgboard.client.Client`` of the remote board, kept
connected by a thread of its own, and the link's state and counters.

The Channel design's *connector*. The thread asks the remote board a cheap
question that needs the link's credentials (GetQueue of ``$sys``, which
every user may read) every ``PROBE`` seconds while it answers, and after a
failure again with capped, jittered backoff (``BACKOFF``, doubling to
``BACKOFF_MAX``). The forwarders (``forwarder.py``) report what their
calls met as well: a refusal of the remote queue (PERMISSION_DENIED, a
missing queue) makes the link *disconnected* with that reason while the
probe still passes, since for that selector the link is no use.

Each change of state is announced on the board's ``$sys``:
``link.connected`` (link, remote address) and ``link.disconnected``
(link, reason: the remote's status and its text); a disconnected link whose
reason changes is announced again.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable

from msgboard.client import Client
from msgboard.errors import MsgboardError
from msgboard.message import now_us
from msgboard.spec import LinkSpec

log = logging.getLogger("msgboard.links")

#: Seconds between probes of a link that answers.
PROBE = 2.0
#: The first wait after a failure, and the longest (seconds).
BACKOFF = 0.1
BACKOFF_MAX = 5.0
#: A call's deadline on the remote board (seconds).
CALL_TIMEOUT = 15.0

#: Emits an event on the board's ``$sys``: name, then its fields.
Emit = Callable[..., None]


def reason(e: BaseException) -> str:
    """What a failed call says, for ``last_error`` and ``link.disconnected``:
    its status name and text."""
    if isinstance(e, MsgboardError):
        return f"{e.code}: {e}"
    return f"{type(e).__name__}: {e}"


class Link:
    """A link's connection, state and counters (any thread)."""

    def __init__(self, spec: LinkSpec, emit: Emit, workdir: str) -> None:
        """``workdir``: where the link's TLS files are written for its
        client (its own directory, mode 0700)."""
        self.spec = spec
        self._emit = emit
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._up = threading.Event()
        #: Set while the remote board answers the probe, whatever a
        #: selector's own calls are refused with.
        self._reachable = threading.Event()
        self._random = random.Random()
        self.state = "connecting"
        self.last_error = ""
        self.since = now_us()
        self.forwarded = 0
        self.duplicates = 0
        self.in_flight = 0
        #: Whether the last probe passed; the forwarders' refusals by selector.
        self._probed = False
        self._refusals: dict[str, str] = {}
        files = _tls_files(spec, os.path.join(workdir, spec.name))
        self.client = Client(
            spec.server,
            timeout=CALL_TIMEOUT,
            token=spec.token,
            tls_ca=files.get("ca", ""),
            tls_cert=files.get("cert", ""),
            tls_key=files.get("key", ""),
            tls=spec.tls,
        )
        self._thread = threading.Thread(target=self._run, name=f"link-{spec.name}", daemon=True)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def connected(self) -> bool:
        return self._up.is_set()

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stops probing and closes the client (forwarders stop first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)  # a probe still waiting fails when closed
        self.client.close()

    def wait_up(self, timeout: float) -> bool:
        """Waits until the link is connected; False if it is not in time."""
        return self._up.wait(timeout)

    def wait_reachable(self, timeout: float) -> bool:
        """Waits until the remote board answers the probe; False if it does
        not in time. A forwarder waits on this, not on ``wait_up``: the
        link is disconnected while one of its selectors is refused (no
        such remote queue, no permission), and only that selector's next
        call, once the remote side is mended, can clear its refusal."""
        return self._reachable.wait(timeout)

    # -- what the forwarders report -----------------------------------------

    def counted(self, forwarded: int, duplicates: int) -> None:
        with self._lock:
            self.forwarded += forwarded
            self.duplicates += duplicates

    def sending(self, n: int) -> None:
        """``n`` more (or, negative, fewer) messages sent and not answered."""
        with self._lock:
            self.in_flight += n

    def refused(self, sid: str, e: BaseException) -> None:
        """Selector ``sid``'s calls are refused (or fail): until it is
        accepted again, the link is disconnected with that reason."""
        with self._lock:
            self._refusals[sid] = reason(e)
        self._judge()

    def accepted(self, sid: str) -> None:
        with self._lock:
            if self._refusals.pop(sid, None) is None and self.state == "connected":
                return
        self._judge()

    def forget(self, sid: str) -> None:
        """A selector no longer crosses the link."""
        self.accepted(sid)

    # -- the probe ----------------------------------------------------------------

    def _run(self) -> None:
        delay = BACKOFF
        while not self._stop.is_set():
            try:
                self.client.get_queue("$sys")
            except Exception as e:  # whatever the remote or the channel says
                self._reachable.clear()
                with self._lock:
                    self._probed = False
                    self._probe_error = reason(e)
                self._judge()
                self._stop.wait(delay * (0.5 + self._random.random()))
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            self._reachable.set()
            with self._lock:
                self._probed = True
                self._probe_error = ""
            self._judge()
            delay = BACKOFF
            self._stop.wait(PROBE)

    _probe_error = ""

    def _judge(self) -> None:
        """Sets the state from the probe and the refusals; announces a change."""
        with self._lock:
            if self._probed and not self._refusals:
                state, why = "connected", ""
            else:
                why = self._probe_error or next(iter(self._refusals.values()), "")
                state = "disconnected" if why else "connecting"
            changed = state != self.state or (state == "disconnected" and why != self.last_error)
            if not changed:
                return
            self.state, self.last_error, self.since = state, why, now_us()
        if state == "connected":
            self._up.set()
            log.info("link %s connected to %s", self.name, self.client.address)
            self._emit("link.connected", self.name, self.client.address)
        elif state == "disconnected":
            self._up.clear()
            log.warning("link %s disconnected: %s", self.name, why)
            self._emit("link.disconnected", self.name, why)


def _tls_files(spec: LinkSpec, where: str) -> dict[str, str]:
    """Writes the link's PEM texts to files under ``where`` (the client
    reads files) and returns their paths by kind."""
    pems = {"ca": spec.tls_ca_pem, "cert": spec.tls_cert_pem, "key": spec.tls_key_pem}
    out = {}
    for kind, text in pems.items():
        if not text:
            continue
        os.makedirs(where, mode=0o700, exist_ok=True)
        path = os.path.join(where, f"{kind}.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
        out[kind] = path
    return out
