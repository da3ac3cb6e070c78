"""The cluster: a primary board's operation log shipped to its standbys
(this part), and leadership through etcd (docs/plans/cluster/DESIGN.md).

Replication with static roles: ``Primary`` (primary.py) assembles a
primary's side: ``Shipper`` hands each logged commit to the standbys'
streams, ``SyncGate`` holds each group's answers until enough standbys
acknowledged it, and ``ReplicationService`` is the gRPC service they
follow. ``Replica`` (replica.py) is a standby's side: it follows the
primary and applies its log. ``Role`` is what the server asks before it
serves a client.

It may import the engine, the store, the shared vocabulary and the
generated ``v1`` code; it never imports the server, security, the client
or the CLI, which sit above it. Nothing below it imports it: a board with
no replication settings never loads it.
"""

from __future__ import annotations

from msgboard.cluster.primary import Primary
from msgboard.cluster.replica import Replica
from msgboard.cluster.role import Role
from msgboard.cluster.service import TOKEN_KEY, ReplicationService
from msgboard.cluster.shipper import Shipper
from msgboard.cluster.sync import SyncGate

__all__ = [
    "TOKEN_KEY",
    "Primary",
    "Replica",
    "ReplicationService",
    "Role",
    "Shipper",
    "SyncGate",
]
