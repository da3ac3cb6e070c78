"""The cluster: leadership through etcd (and, to come, the replication of
the operation log; docs/plans/cluster/DESIGN.md draws the whole).

It owns what a board of a cluster keeps in etcd and the threads that keep
it: ``Leadership`` campaigns for the cluster's leader key under a lease,
renews it, and fences the board by itself when it cannot (``term()`` is
None from the moment the lease may have run out in etcd); the leader key's
revision is the term's epoch. ``PrimaryWatch`` follows who leads and where
its clients reach it. ``write_sync`` and ``read_sync`` keep the in-sync
standby set, a compare-and-swap on the epoch. ``Etcd`` is the small etcd
client under them (etcd's JSON gateway, through etcd3gw), failing over
between the cluster's members.

It may import the engine, the store and the shared vocabulary (the
replication to come hooks into the engine's group commit from here, and its
gRPC service will live here, on its own proto); it never imports the
server, security, the client or the CLI, which sit above it. Nothing below
it (the engine, the store, ``associative``, the vocabulary) imports it: a
board with no cluster settings never loads it.
"""

from msgboard.cluster.etcd import TRANSIENT, Entry, Etcd, EtcdUnavailable, Grant, endpoints
from msgboard.cluster.keys import Keys, Primary, SyncSet
from msgboard.cluster.leadership import Change, Eligible, Leadership, Listener, Term, clock
from msgboard.cluster.standbys import read_sync, write_sync
from msgboard.cluster.watching import PrimaryWatch

__all__ = [
    "TRANSIENT",
    "Change",
    "Eligible",
    "Entry",
    "Etcd",
    "EtcdUnavailable",
    "Grant",
    "Keys",
    "Leadership",
    "Listener",
    "Primary",
    "PrimaryWatch",
    "SyncSet",
    "Term",
    "clock",
    "endpoints",
    "read_sync",
    "write_sync",
]
