"""Prometheus metrics, served at ``/metrics`` on the board's HTTP listener
(``--metrics-listen``; ``msgboard.server.http``, beside the console).

Counting costs the hot path nothing more than the engine already pays: the
per-queue counts are the engine's own traffic counters (plain integers
added once a group is durable, ``engine/traffic.py``'s ``Traffic``) and its
Stats figures, and ``BoardCollector`` reads them only when Prometheus
scrapes: one Stats view and one copy of the counters per scrape. Two things
are observed as they happen, each once per group commit, not per message:
the commit's duration and size (``Board.on_commit``). ``msgboard_connections``
comes from ``msgboard.server.calls``, which counts calls in progress by peer.

The listener is plain HTTP on loopback (the default host). Outside loopback
it follows the board's own rule (``msgboard.security``): the metrics name
every queue and its traffic, so it needs TLS, served with the board's
``--tls-cert``/``--tls-key`` (and client certificates signed by
``--tls-client-ca`` when that is set), or ``--insecure``, which logs a
warning. Prometheus's ``tls_config`` scrapes it.

A replicating board adds its role in the cluster (``ClusterCollector``):
``msgboard_role`` (1 primary, 0 standby), ``msgboard_epoch``, and on a
primary each connected standby's ``msgboard_replication_lag_entries`` and
``msgboard_replication_lag_seconds``, labelled ``standby`` with the name it
gave its primary (its address; its board name in a cluster); a board with no cluster settings
serves none of them (and never loads ``msgboard.cluster``).

The names and meanings are tabled in docs/operating.md ("Metrics").
"""

from __future__ import annotations

import logging
import shutil
import socket
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from msgboard.config import ServeConfig
from msgboard.engine import Board, Traffic
from msgboard.errors import Exposed, ListenFailed
from msgboard.results import BoardStats
from msgboard.server.calls import Calls
from msgboard.tls import is_loopback

if TYPE_CHECKING:  # msgboard.cluster is loaded only by a board that replicates
    from msgboard.cluster import Role
    from msgboard.cluster.status import Standbys

log = logging.getLogger("msgboard.metrics")

#: Seconds a scrape waits for the board's figures.
SCRAPE_TIMEOUT = 10.0
#: Group-commit durations, seconds: an fsync takes from tens of µs (cache)
#: to tens of ms (a busy disk).
COMMIT_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
#: Group-commit sizes, operations.
COMMIT_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)

#: Traffic counter -> (metric name without _total, help).
_COUNTERS = (
    ("posted", "msgboard_messages_published", "Messages stored on the queue (posts and moves)"),
    ("delivered", "msgboard_messages_delivered", "Messages handed to consumers and Takes"),
    ("acked", "msgboard_messages_acked", "Deliveries and leases acknowledged"),
    (
        "redelivered",
        "msgboard_messages_redelivered",
        "Held messages given back to be delivered again (nack, consumer gone, lease out)",
    ),
    ("expired", "msgboard_messages_expired", "Messages whose expires_at passed (dead-lettered)"),
    (
        "duplicates",
        "msgboard_messages_duplicate",
        "Messages not stored because the queue held their idempotency key",
    ),
)
#: Stats figure -> (gauge name, help).
_GAUGES = (
    ("ready", "msgboard_queue_messages_ready", "Waiting messages visible to takers"),
    ("outstanding", "msgboard_queue_messages_unacked", "Messages delivered or leased, not acked"),
    ("history", "msgboard_queue_messages_history", "Messages in the queue's history"),
    (
        "scheduled",
        "msgboard_queue_messages_scheduled",
        "Messages posted with a not_before still to come",
    ),
    ("consumers", "msgboard_queue_consumers", "Consumers attached to the queue's selectors"),
)


def reason_label(reason: str) -> str:
    """A dead letter's reason as a label value: its first word
    ("bounce: no room in reply_to" -> "bounce")."""
    return reason.split(":", 1)[0]


class BoardCollector(Collector):
    """Reads the board's figures at each scrape."""

    def __init__(self, board: Board | None, calls: Calls | None = None) -> None:
        #: None while a board of a cluster is a standby (it has no board open).
        self.board = board
        self.calls = calls

    def collect(self) -> Iterator[Metric]:
        if self.board is None:
            return
        stats = self.board.stats_async().result(SCRAPE_TIMEOUT)
        traffic = self.board.traffic_async().result(SCRAPE_TIMEOUT)
        yield from counters(traffic, [q.name for q in stats.queues])
        yield from gauges(stats)
        yield GaugeMetricFamily(
            "msgboard_disk_free_bytes",
            "Free bytes on the data directory's file system",
            value=shutil.disk_usage(self.board.path).free,
        )
        if self.calls is not None:
            yield GaugeMetricFamily(
                "msgboard_connections",
                "Clients (peer addresses) with a call in progress",
                value=self.calls.peers(),
            )


def counters(traffic: dict[str, Traffic], queues: list[str]) -> Iterator[Metric]:
    """The per-queue counters, for every queue that exists (0 when it has had
    no traffic since the board opened)."""
    none = Traffic()
    rows = [(q, traffic.get(q, none)) for q in queues]
    for attr, name, text in _COUNTERS:
        m = CounterMetricFamily(name, text, labels=["queue"])
        for q, t in rows:
            m.add_metric([q], getattr(t, attr))
        yield m
    m = CounterMetricFamily(
        "msgboard_messages_dead_lettered",
        "Messages dead-lettered (or discarded as dead letters), by reason",
        labels=["queue", "reason"],
    )
    for q, t in rows:
        by: dict[str, int] = {}
        for reason, n in t.reasons.items():
            label = reason_label(reason)
            by[label] = by.get(label, 0) + n
        for label, n in sorted(by.items()):
            m.add_metric([q, label], n)
    yield m


def gauges(stats: BoardStats) -> Iterator[Metric]:
    for attr, name, text in _GAUGES:
        m = GaugeMetricFamily(name, text, labels=["queue"])
        for q in stats.queues:
            m.add_metric([q.name], getattr(q, attr))
        yield m
    yield GaugeMetricFamily(
        "msgboard_takes_blocked",
        "Takes and Reads blocked waiting for a match",
        value=sum(q.waiting for q in stats.queues),
    )
    yield GaugeMetricFamily(
        "msgboard_lmdb_map_bytes", "The LMDB map's size", value=stats.store.map_size
    )
    yield GaugeMetricFamily(
        "msgboard_lmdb_used_bytes", "Bytes of the LMDB map in use", value=stats.store.map_used
    )


class ClusterCollector(Collector):
    """A replicating board's role, epoch and (on a primary) its standbys'
    lag, read at each scrape."""

    def __init__(self, role: Role, standbys: Standbys | None = None) -> None:
        self.role = role
        self.standbys = standbys

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "msgboard_role",
            "1 while this board is its cluster's primary, 0 while a standby",
            value=1 if self.role.is_primary else 0,
        )
        yield GaugeMetricFamily(
            "msgboard_epoch",
            "The epoch this board leads in or follows (0: static roles)",
            value=self.role.epoch,
        )
        if self.standbys is None or not self.role.is_primary:
            return
        standbys = self.standbys.report().standbys
        entries = GaugeMetricFamily(
            "msgboard_replication_lag_entries",
            "Log entries committed on this primary that the standby has not acknowledged",
            labels=["standby"],
        )
        seconds = GaugeMetricFamily(
            "msgboard_replication_lag_seconds",
            "Age of the oldest log entry the standby has not acknowledged (0: none)",
            labels=["standby"],
        )
        # Labelled by name (address); two standbys that said the same one
        # (both listening on 0.0.0.0:7878, say) get their ids appended.
        said = Counter(sb.board for sb in standbys)
        for sb in standbys:
            label = sb.board if said[sb.board] == 1 else f"{sb.board}/{sb.board_id}"
            entries.add_metric([label], sb.lag_entries)
            seconds.add_metric([label], sb.lag_seconds)
        yield entries
        yield seconds


class Metrics:
    """The metrics of one served board (``msgboard.server.http`` serves them).
    ``cluster``: a replicating board's (``ClusterCollector``). A board of a
    cluster starts as a standby with no board open (``board`` None: only
    the cluster's series and the process's) and calls ``use`` as it opens
    and closes its board."""

    def __init__(
        self,
        board: Board | None,
        calls: Calls | None = None,
        cluster: ClusterCollector | None = None,
    ) -> None:
        self.board = board
        self.cluster = cluster
        self.registry = CollectorRegistry(auto_describe=False)
        self.boards = BoardCollector(board, calls)
        self.registry.register(self.boards)
        if cluster is not None:
            self.registry.register(cluster)
        ProcessCollector(registry=self.registry)
        self.commit_seconds = Histogram(
            "msgboard_commit_seconds",
            "Group commits by duration (their operations, the commit and the fsync)",
            buckets=COMMIT_SECONDS,
            registry=self.registry,
        )
        self.commit_messages = Histogram(
            "msgboard_commit_messages",
            "Group commits by size: messages stored on queues (posted, forwarded, "
            "dead-lettered; 0 for acks alone)",
            buckets=COMMIT_SIZES,
            registry=self.registry,
        )
        if board is not None:
            board.on_commit(self._committed)

    def use(self, board: Board | None, standbys: Standbys | None = None) -> None:
        """A board of a cluster opened ``board`` (promoted; ``standbys``: its
        replication's), or closed its own (None: a standby again)."""
        if self.board is not None:
            self.board.on_commit(None)
        self.board = self.boards.board = board
        if self.cluster is not None:
            self.cluster.standbys = standbys
        if board is not None:
            board.on_commit(self._committed)

    def _committed(self, seconds: float, messages: int) -> None:
        self.commit_seconds.observe(seconds)
        self.commit_messages.observe(messages)

    @staticmethod
    def check(c: ServeConfig) -> None:
        """Raises what ``serve`` would for ``c.metrics_listen``, without
        serving: Exposed, or ListenFailed if its port is taken (tried with a
        socket bound and closed at once), so that a board that cannot serve
        its metrics stops before it opens (and makes) its data directory."""
        host, _, port = c.metrics_listen.rpartition(":")
        if not is_loopback(c.metrics_listen) and not c.tls and not c.insecure:
            raise Exposed(
                f"refusing to serve metrics on {c.metrics_listen} outside loopback without "
                "TLS (--tls-cert, --tls-key): they name every queue; add them, or "
                "--insecure to serve them to anyone who can reach it"
            )
        if int(port) == 0:
            return
        bare = host[1:-1] if host.startswith("[") else host
        try:
            infos = socket.getaddrinfo(bare or None, int(port), type=socket.SOCK_STREAM)
            family, kind, proto, _, addr = infos[0]
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(addr)
        except OSError as e:
            raise ListenFailed(
                f"cannot serve metrics on {c.metrics_listen}: {e.strerror or e}"
            ) from None

    def close(self) -> None:
        if self.board is not None:
            self.board.on_commit(None)
