"""Etcd: the few etcd v3 calls the cluster needs, over etcd's JSON gateway.

etcd3gw (OpenStack's client of the gateway, plain HTTP through requests)
carries the calls, so nothing here touches our grpcio or protobuf. It talks
to one member; ``Etcd`` holds the list of members and moves to the next one
when a call cannot reach the current one, trying each member at most once
per call. Every request has a timeout (etcd3gw's default is none at all).

One ``Etcd`` per thread: a requests session is not safe across threads.

What the gateway does, as measured against Debian's etcd 3.4.23 (the
cluster's tests do it again on every run):

- ``/v3/lease/grant`` answers the TTL granted, which may exceed the one
  asked for: etcd raises it to its minimum (2 s with the default election
  timeout), so a term's length is read from the answer, never assumed;
- ``/v3/lease/keepalive`` takes one request and gives one answer (no stream
  to keep open), so each renewal's send time is known exactly; a lease that
  has run out answers no TTL;
- a transaction's success branch may put the key and range it back, so one
  round trip both creates the leader key and reads its revision;
- a member that has lost its quorum answers no linearizable read (the
  call times out or answers an error), and renews no lease once it knows it
  has no leader; an etcd leader cut off from its followers may still renew
  until it steps down (an election timeout), which is why ``Leadership``
  reads its key back after every renewal.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import etcd3gw
import requests
from etcd3gw import exceptions as gw

#: A request that gets no answer in this long has failed (seconds).
TIMEOUT = 1.0


class EtcdUnavailable(Exception):
    """No member of the etcd cluster answered the call (each was tried)."""


#: Errors of one call to etcd after which a loop simply tries again later:
#: no member answered, or one answered with an error.
TRANSIENT = (EtcdUnavailable, gw.Etcd3Exception)


def encode(text: str | bytes) -> str:
    """A key or value as the gateway's JSON carries it (base64)."""
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode("ascii")


def decode(text: str) -> bytes:
    """The gateway's base64 back to bytes."""
    return base64.b64decode(text)


@dataclass(frozen=True)
class Entry:
    """One key as etcd holds it."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    #: The lease the key lives under, 0 if none.
    lease: int

    @classmethod
    def of(cls, kv: dict[str, Any]) -> Entry:
        return cls(
            key=decode(kv["key"]),
            value=decode(kv.get("value", "")),
            create_revision=int(kv.get("create_revision", 0)),
            mod_revision=int(kv.get("mod_revision", 0)),
            lease=int(kv.get("lease", 0)),
        )


@dataclass(frozen=True)
class Grant:
    """A lease granted: its id and the TTL etcd actually gave it."""

    id: int
    ttl: int


@dataclass(frozen=True)
class Outcome:
    """A transaction's answer: which branch ran, the store's revision after
    it, and the entries its ``request_range`` operations read, in order."""

    succeeded: bool
    revision: int
    ranges: tuple[tuple[Entry, ...], ...]

    def read(self, index: int = 0) -> Entry | None:
        """The one entry the ``index``-th range read, or None."""
        found = self.ranges[index] if index < len(self.ranges) else ()
        return found[0] if found else None


def endpoints(urls: str | Sequence[str]) -> tuple[str, ...]:
    """``http://host:port`` URLs from a comma-separated string or a list;
    a bare ``host:port`` gets ``http://``."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        out.append(item if "://" in item else f"http://{item}")
    if not out:
        raise ValueError("no etcd endpoint given (expected URL[,URL...])")
    return tuple(out)


class Etcd:
    """A client of an etcd cluster's members (``endpoints``), one thread's."""

    def __init__(self, urls: str | Sequence[str], *, timeout: float = TIMEOUT) -> None:
        self.urls = endpoints(urls)
        self.timeout = timeout
        self.at = 0
        self.session = requests.Session()
        self.clients = [self._client(url) for url in self.urls]

    def _client(self, url: str) -> etcd3gw.Etcd3Client:
        scheme, _, rest = url.partition("://")
        host, _, port = rest.rstrip("/").rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"etcd endpoint {url!r} is not scheme://host:port")
        return etcd3gw.Etcd3Client(
            host=host.strip("[]"),
            port=int(port),
            protocol=scheme,
            timeout=self.timeout,
            api_path="/v3/",
            session=self.session,
        )

    def close(self) -> None:
        self.session.close()

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POSTs ``body`` to ``/v3/<path>`` on the current member, moving on to
        the next ones when it cannot be reached; raises EtcdUnavailable when
        none answered, and etcd3gw's errors for an answer that is an error."""
        errors = []
        for _ in self.urls:
            client = self.clients[self.at]
            try:
                answer: dict[str, Any] = client.post(client.get_url(path), json=body)
                return answer
            except (gw.ConnectionFailedError, gw.ConnectionTimeoutError) as e:
                errors.append(f"{self.urls[self.at]}: {type(e).__name__}")
            except (requests.RequestException, ValueError) as e:
                # Cut off mid-answer (a member dying), or not JSON.
                errors.append(f"{self.urls[self.at]}: {e!r}")
            except gw.InternalServerError as e:
                # A member without a leader ("etcdserver: no leader", "request
                # timed out") answers 500: another member may do better.
                errors.append(f"{self.urls[self.at]}: {e.detail_text or e}".strip())
            self.at = (self.at + 1) % len(self.urls)
        raise EtcdUnavailable(f"no etcd member answered {path}: " + "; ".join(errors))

    # -- leases -----------------------------------------------------------

    def grant(self, ttl: int) -> Grant:
        """A new lease of (at least) ``ttl`` seconds."""
        answer = self.call("lease/grant", {"TTL": ttl, "ID": 0})
        return Grant(int(answer["ID"]), int(answer["TTL"]))

    def keepalive(self, lease: int) -> int:
        """Renews ``lease``; its TTL from now, or 0 if it has run out."""
        answer = self.call("lease/keepalive", {"ID": lease})
        return int(answer.get("result", {}).get("TTL", 0))

    def revoke(self, lease: int) -> None:
        """Ends ``lease`` now: every key under it is deleted. A lease that is
        already gone is not an error."""
        try:
            self.call("kv/lease/revoke", {"ID": lease})
        except gw.Etcd3Exception as e:
            if "not found" not in str(e.detail_text):
                raise

    # -- keys ---------------------------------------------------------------

    def get(self, key: str) -> tuple[Entry | None, int]:
        """The key's entry (None if absent) and the store's revision then
        (a linearizable read: it needs the cluster's quorum)."""
        answer = self.call("kv/range", {"key": encode(key)})
        kvs = answer.get("kvs", [])
        return (Entry.of(kvs[0]) if kvs else None), int(answer["header"]["revision"])

    def put(self, key: str, value: str, lease: int = 0) -> int:
        """Stores ``value`` under ``key`` (under ``lease``, 0: none); the
        store's revision after it."""
        body: dict[str, Any] = {"key": encode(key), "value": encode(value)}
        if lease:
            body["lease"] = lease
        answer = self.call("kv/put", body)
        return int(answer["header"]["revision"])

    def prefixed(self, prefix: str) -> tuple[list[Entry], int]:
        """Every key that starts with ``prefix``, in key order, and the
        store's revision then (a linearizable read)."""
        raw = prefix.encode()
        end = raw[:-1] + bytes([raw[-1] + 1])  # the first key after the prefix
        answer = self.call("kv/range", {"key": encode(raw), "range_end": encode(end)})
        entries = [Entry.of(kv) for kv in answer.get("kvs", [])]
        return entries, int(answer["header"]["revision"])

    def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> Outcome:
        """One transaction (etcd's If/Then/Else), in the gateway's JSON."""
        answer = self.call(
            "kv/txn", {"compare": compare, "success": success, "failure": failure or []}
        )
        ranges = tuple(
            tuple(Entry.of(kv) for kv in r["response_range"].get("kvs", []))
            for r in answer.get("responses", [])
            if "response_range" in r
        )
        return Outcome(
            bool(answer.get("succeeded", False)), int(answer["header"]["revision"]), ranges
        )

    def watch(self, key: str, start_revision: int, wait: float) -> bool:
        """Waits up to ``wait`` seconds for a change of ``key`` at or after
        ``start_revision``: True if one came, False if the wait ran out.
        Raises EtcdUnavailable if the member could not be reached or the
        stream broke (etcd3gw's own watcher would hang on a dead member)."""
        client = self.clients[self.at]
        body = {"create_request": {"key": encode(key), "start_revision": start_revision}}
        try:
            with self.session.post(
                client.get_url("watch"), json=body, stream=True, timeout=(self.timeout, wait)
            ) as answer:
                for line in answer.iter_lines():
                    if not line.strip():
                        continue
                    result = json.loads(line).get("result", {})
                    if result.get("events"):
                        return True
                    if result.get("canceled"):
                        # A compacted start revision: the caller reads again.
                        return True
        except (requests.RequestException, ValueError) as e:
            if _timed_out(e):
                return False
            self.at = (self.at + 1) % len(self.urls)
            raise EtcdUnavailable(f"watch on {self.urls[self.at]} failed: {e}") from e
        self.at = (self.at + 1) % len(self.urls)
        raise EtcdUnavailable(f"the watch stream of {client.base_url} ended")


def _timed_out(e: Exception) -> bool:
    """A watch that saw nothing in its wait (a read timed out, which requests
    reports as a ConnectionError while streaming), not a broken member."""
    if isinstance(e, requests.exceptions.ReadTimeout):
        return True
    return "Read timed out" in str(e)
