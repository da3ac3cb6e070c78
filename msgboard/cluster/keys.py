"""Keys: where a cluster's state lives in etcd, and what its values say.

Everything of a cluster named NAME is under ``/msgboard/NAME/``:

- ``leader``: the primary's key, under its lease; its value is the JSON
  ``{"name": ..., "address": ...}`` (the board's name and the address its
  clients should use). It is created once per term and never modified, so
  its ``create_revision`` (= its ``mod_revision``) is the term's **epoch**;
- ``sync``: the standbys the primary counts on, the JSON
  ``{"epoch": E, "standbys": [names]}``, written only by the primary of
  epoch E (a transaction that compares the leader key's revision);
- ``term``: the lease of the latest term, written by the campaign that won
  it (in the transaction that creates ``leader``); ``resigned``: the lease
  of the latest term that ended by resigning, written by its leader while
  the key was still its own. A new leader that finds ``term`` and
  ``resigned`` equal knows its predecessor stopped before its key went;
  otherwise it waits out the predecessor's longest possible deadline
  (``Leadership``: "A term that begins").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from msgboard.cluster.etcd import Entry

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def checked(what: str, name: str) -> str:
    """``name`` if it is a valid cluster or board name, else ValueError."""
    if not NAME.fullmatch(name):
        raise ValueError(
            f"{what} {name!r} is not a name: 1 to 63 letters, digits, '.', '_' or '-',"
            " starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class Keys:
    """The etcd keys of one cluster."""

    cluster: str

    def __post_init__(self) -> None:
        checked("cluster", self.cluster)

    @property
    def prefix(self) -> str:
        return f"/msgboard/{self.cluster}/"

    @property
    def leader(self) -> str:
        return self.prefix + "leader"

    @property
    def sync(self) -> str:
        return self.prefix + "sync"

    @property
    def term(self) -> str:
        return self.prefix + "term"

    @property
    def resigned(self) -> str:
        return self.prefix + "resigned"

    @property
    def members(self) -> str:
        return self.prefix + "members/"

    def member(self, name: str) -> str:
        return self.members + checked("board", name)

    @property
    def switchover(self) -> str:
        return self.prefix + "switchover"


@dataclass(frozen=True)
class Primary:
    """Who leads: the board's name, where its clients reach it, and its
    epoch; and where its web console is (``console``, a URL; "" when it
    serves none, or its key does not say: a board before the console)."""

    name: str
    address: str
    epoch: int
    console: str = ""

    def value(self) -> str:
        body = {"name": self.name, "address": self.address}
        if self.console:
            body["console"] = self.console
        return json.dumps(body, sort_keys=True)

    @classmethod
    def of(cls, entry: Entry) -> Primary:
        """The primary a leader key names (its epoch is the key's revision)."""
        body = json.loads(entry.value)
        return cls(
            str(body["name"]),
            str(body["address"]),
            entry.create_revision,
            str(body.get("console", "")),
        )


@dataclass(frozen=True)
class SyncSet:
    """The standbys the primary of ``epoch`` counts on, as stored in etcd.
    ``revision`` is the sync key's mod_revision (0: never written);
    ``primary``: the board that wrote it ("" if not said); ``ids``: the
    data directory (``board-id``) each standby joined with, by name (a name
    missing there: not recorded, as in a set written before they were)."""

    epoch: int
    standbys: tuple[str, ...]
    revision: int = 0
    primary: str = ""
    ids: tuple[tuple[str, str], ...] = ()

    def id_of(self, name: str) -> str:
        """The directory ``name`` joined with ("": not recorded)."""
        return dict(self.ids).get(name, "")

    def holds(self, p: Position) -> bool:
        """Whether ``p`` is the member this set names: its name is in the set
        and it publishes the directory it joined with (when one was
        recorded), not a new one made under the same name."""
        recorded = self.id_of(p.name)
        return p.name in self.standbys and (not recorded or recorded == p.board_id)

    def value(self) -> str:
        body: dict[str, object] = {"epoch": self.epoch, "standbys": sorted(self.standbys)}
        if self.primary:
            body["primary"] = self.primary
        if self.ids:
            body["ids"] = dict(sorted(self.ids))
        return json.dumps(body)

    @classmethod
    def of(cls, entry: Entry | None) -> SyncSet | None:
        if entry is None:
            return None
        body = json.loads(entry.value)
        return cls(
            int(body["epoch"]),
            tuple(body["standbys"]),
            entry.mod_revision,
            str(body.get("primary", "")),
            tuple(sorted((str(k), str(v)) for k, v in body.get("ids", {}).items())),
        )


@dataclass(frozen=True)
class Position:
    """Where a board's log stands, as it published it under ``members/``.
    ``revision``: the member key's mod_revision (0: not read from etcd);
    ``board_id``: its data directory's ``board-id`` ("": not said)."""

    name: str
    address: str
    index: int
    epoch: int
    stopped: bool = False
    revision: int = 0
    board_id: str = ""

    @property
    def rank(self) -> tuple[int, int]:
        """What a promotion compares: the last entry's (epoch, index)."""
        return (self.epoch, self.index)

    def value(self) -> str:
        body = {"address": self.address, "index": self.index, "epoch": self.epoch,
                "stopped": self.stopped, "board_id": self.board_id}  # fmt: skip
        return json.dumps(body, sort_keys=True)

    @classmethod
    def of(cls, entry: Entry) -> Position:
        body = json.loads(entry.value)
        name = entry.key.decode().rsplit("/", 1)[1]
        return cls(
            name,
            str(body["address"]),
            int(body["index"]),
            int(body["epoch"]),
            bool(body.get("stopped", False)),
            entry.mod_revision,
            str(body.get("board_id", "")),
        )


@dataclass(frozen=True)
class Handover:
    """A switchover asked for: the primary of ``epoch`` hands over to the
    board ``to``, whose clients use ``address``."""

    to: str
    address: str
    epoch: int

    def value(self) -> str:
        return json.dumps({"to": self.to, "address": self.address, "epoch": self.epoch})

    @classmethod
    def of(cls, entry: Entry | None) -> Handover | None:
        if entry is None:
            return None
        body = json.loads(entry.value)
        return cls(str(body["to"]), str(body["address"]), int(body["epoch"]))
