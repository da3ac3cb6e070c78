"""The cluster: leadership through etcd, and the replication of the
operation log to standbys (docs/plans/cluster/DESIGN.md draws the whole;
docs/replication.md tells what is built of the second).

Leadership: what a board of a cluster keeps in etcd and the threads that
keep it: ``Leadership`` campaigns for the cluster's leader key under a
lease, renews it, and fences the board by itself when it cannot (``term()``
is None from the moment the lease may have run out in etcd); the leader
key's revision is the term's epoch. ``PrimaryWatch`` follows who leads and
where its clients reach it. ``write_sync`` and ``read_sync`` keep the
in-sync standby set, a compare-and-swap on the epoch. ``Etcd`` is the small
etcd client under them (etcd's JSON gateway, through etcd3gw), failing over
between the cluster's members.

Replication, with static roles for now: ``Replication`` (primary.py)
assembles a primary's side: ``Shipper`` hands each logged commit to the
standbys' streams, ``SyncGate`` holds each group's answers until enough
standbys acknowledged it, and ``ReplicationService`` is the gRPC service
they follow (and seed from). ``Replica`` (replica.py) is a standby's side:
it follows the primary and applies its log. ``Role`` is what the server
asks before it serves a client.

A cluster's boards (``msgboard.server.node`` assembles them): ``Membership``
(members.py) publishes a board's log position, ``promotable`` is the
promotion rule, ``InSync`` (insync.py) is a cluster primary's gate, which
keeps the in-sync set in etcd, and switching.py asks for and awaits a
switchover.

It may import the engine, the store, the shared vocabulary and the
generated ``v1`` code; it never imports the server, security, the client
or the CLI, which sit above it. Nothing below it (the engine, the store,
``associative``, the vocabulary) imports it: a board with no cluster
settings never loads it.
"""

from msgboard.cluster.etcd import TRANSIENT, Entry, Etcd, EtcdUnavailable, Grant, endpoints
from msgboard.cluster.keys import Handover, Keys, Position, Primary, SyncSet
from msgboard.cluster.leadership import Change, Eligible, Leadership, Listener, Term, clock
from msgboard.cluster.primary import Replication
from msgboard.cluster.replica import Replica
from msgboard.cluster.role import Role
from msgboard.cluster.service import TOKEN_KEY, ReplicationService
from msgboard.cluster.shipper import Shipper
from msgboard.cluster.standbys import read_sync, write_sync
from msgboard.cluster.sync import SyncGate
from msgboard.cluster.watching import PrimaryWatch

__all__ = [
    "TOKEN_KEY",
    "TRANSIENT",
    "Change",
    "Eligible",
    "Entry",
    "Etcd",
    "EtcdUnavailable",
    "Grant",
    "Handover",
    "Keys",
    "Leadership",
    "Listener",
    "Position",
    "Primary",
    "PrimaryWatch",
    "Replica",
    "Replication",
    "ReplicationService",
    "Role",
    "Shipper",
    "SyncGate",
    "SyncSet",
    "Term",
    "clock",
    "endpoints",
    "read_sync",
    "write_sync",
]
