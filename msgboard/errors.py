"""The one error tree of msgboard, shared by the engine, server and client.

::

    MsgboardError                 .code: the gRPC status name it maps to
    ├── InvalidArgument           bad input; .field: the path of the bad part
    │   ├── ConfigError           a bad setting, users file or certificate (start-up)
    │   └── RelativePath          a relative snapshot path, and no snapshot dir
    ├── NotFound                  .field: the part that named it (a rejected ack)
    │   └── QueueNotFound
    ├── AlreadyExists
    │   └── QueueExists           same name, other properties
    ├── ResourceExhausted
    │   ├── QueueFull             over max_unprocessed with the reject policy
    │   ├── MessageTooLarge
    │   └── StoreFull             the disk refused a write
    ├── FailedPrecondition
    │   ├── Exposed               a non-loopback listener without TLS and users
    │   ├── LogTruncated          a standby asked for log entries no longer kept
    │   └── LogDiverged           a standby's log is not the primary's
    ├── Unavailable               the board is closed or unreachable
    │   ├── ListenFailed          the server cannot bind its address
    │   ├── NotPrimary            a standby: .primary, where the primary is
    │   └── NoLease               a primary not sure of its lease (.epoch)
    ├── DeadlineExceeded          (client side: the call's deadline passed)
    ├── Aborted
    │   └── Kicked                an operator ended the consumer (KickConsumer)
    ├── Unauthenticated
    ├── PermissionDenied
    │   └── Reserved              a write to the board's own queue ($sys)
    ├── DataLoss                  stored data failed its check (DATA_LOSS)
    │   ├── RecordDamaged         one record, named by queue and seq (or place)
    │   └── StoreDamaged          LMDB met a damaged page or entry (.queue)
    └── StoreError                the store failed (INTERNAL)
        ├── DirectoryLocked       another board holds the data directory
        │                         (FAILED_PRECONDITION)
        └── DataFileDamaged       data.mdb is truncated or not LMDB's

The engine raises these; ``msgboard.details`` maps them to status codes and
``google.rpc`` details (an ErrorInfo whose reason is the class name, with the
facts of ``info()``; a BadRequest for InvalidArgument), in one place, and
``msgboard.client.wire`` maps them back with ``from_wire``, so a client catches the
same classes, with the same attributes, an embedded user does. Nothing here
imports gRPC.
"""

from __future__ import annotations

import copy
import re


class MsgboardError(Exception):
    """Base of every msgboard error."""

    code = "UNKNOWN"
    #: On a Subscribe stream: the ``ref`` of the request it answers (what the
    #: client's ``ack``, ``nack`` or ``credit`` returned); 0 otherwise.
    ref = 0
    #: On an error rebuilt from the wire: the ErrorInfo reason the board
    #: sent (its class name there; a newer board's may be no class here).
    reason = ""

    def info(self) -> dict[str, str]:
        """Facts for machines, the ErrorInfo metadata on the wire (e.g.
        ``{"queue": "jobs", "seq": "7"}``); ``from_wire`` sets them back."""
        return {}

    def _restore(self, info: dict[str, str]) -> None:
        """Sets what ``info()`` said, on an error rebuilt from the wire."""


#: A field path at the start of a message: ``messages[2].tuple[0]: ...``.
_PATH = re.compile(r"([A-Za-z_]\w*(?:\[[^\]]*\]|\.[A-Za-z_]\w*)*): ")


class InvalidArgument(MsgboardError):
    """Bad input. The message starts with the path of the bad part of the
    request, ``messages[2].tuple[0]: no kind set``; ``field`` holds that path
    alone ("" when no one field is to blame), for machine-readable errors."""

    code = "INVALID_ARGUMENT"
    field = ""

    def __init__(self, message: str = "", *, field: str | None = None) -> None:
        super().__init__(message)
        if field is None:
            m = _PATH.match(message)
            field = m.group(1) if m else ""
        self.field = field

    def info(self) -> dict[str, str]:
        return {"field": self.field} if self.field else {}

    def _restore(self, info: dict[str, str]) -> None:
        self.field = info.get("field", "")

    def within(self, where: str) -> InvalidArgument:
        """The same error about a part of ``where``: ``tuple[0]: ...`` within
        ``messages[2]`` is ``messages[2].tuple[0]: ...``."""
        field = self.field
        text = str(self)
        if field:
            sep = "" if field.startswith("[") else "."
            field = f"{where}{sep}{field}"
            text = f"{where}{sep}{text}"
        else:
            field, text = where, f"{where}: {text}"
        err = copy.copy(self)
        err.args = (text,)
        err.field = field
        return err


class ConfigError(InvalidArgument):
    """A serve setting, the users file or a certificate is wrong: the server
    does not start."""


class RelativePath(InvalidArgument):
    """A relative Snapshot path on a board with no snapshot directory."""


class NotFound(MsgboardError):
    """Something named in the request is not there. ``field``: the path of
    the request's part that named it, when one part is to blame (an ack of
    ``lease_ids[1]``), "" otherwise."""

    code = "NOT_FOUND"
    field = ""

    def __init__(self, message: str = "", *, field: str = "") -> None:
        super().__init__(message)
        self.field = field

    def info(self) -> dict[str, str]:
        return {"field": self.field} if self.field else {}

    def _restore(self, info: dict[str, str]) -> None:
        self.field = info.get("field", "")


class QueueNotFound(NotFound):
    """No queue ``name`` (the bare name); ``message`` may say what was tried
    with it (default: ``queue 'name' does not exist``)."""

    def __init__(self, name: str, message: str = "") -> None:
        super().__init__(message or f"queue {name!r} does not exist")
        self.name = name

    def info(self) -> dict[str, str]:
        return {"queue": self.name}

    def _restore(self, info: dict[str, str]) -> None:
        self.name = info.get("queue", "")


class AlreadyExists(MsgboardError):
    code = "ALREADY_EXISTS"


class QueueExists(AlreadyExists):
    """Queue ``queue`` exists with other properties than those asked for."""

    queue = ""

    def __init__(self, queue: str, message: str) -> None:
        super().__init__(message)
        self.queue = queue

    def info(self) -> dict[str, str]:
        return {"queue": self.queue}

    def _restore(self, info: dict[str, str]) -> None:
        self.queue = info.get("queue", "")


class ResourceExhausted(MsgboardError):
    code = "RESOURCE_EXHAUSTED"


class QueueFull(ResourceExhausted):
    """A post does not fit in ``queue``: over its max_unprocessed, with the
    reject policy."""

    queue = ""

    def __init__(self, queue: str, message: str) -> None:
        super().__init__(message)
        self.queue = queue

    def info(self) -> dict[str, str]:
        return {"queue": self.queue}

    def _restore(self, info: dict[str, str]) -> None:
        self.queue = info.get("queue", "")


class MessageTooLarge(ResourceExhausted):
    pass


class StoreFull(ResourceExhausted):
    pass


class FailedPrecondition(MsgboardError):
    """The board is not in the state the call needs. ``queue`` and ``seq``
    name the message in the way, when one is ("" and 0 otherwise)."""

    code = "FAILED_PRECONDITION"
    queue = ""
    seq = 0

    def __init__(self, message: str = "", *, queue: str = "", seq: int = 0) -> None:
        super().__init__(message)
        self.queue, self.seq = queue, seq

    def info(self) -> dict[str, str]:
        return {"queue": self.queue, "seq": str(self.seq)} if self.queue else {}

    def _restore(self, info: dict[str, str]) -> None:
        self.queue = info.get("queue", "")
        self.seq = int(info.get("seq", "0") or 0)


class Exposed(FailedPrecondition):
    """A listener outside loopback without both TLS and a users file."""


class Unavailable(MsgboardError):
    code = "UNAVAILABLE"


class ListenFailed(Unavailable):
    """The server cannot listen where it was told (address in use, bad
    address)."""


class NotPrimary(Unavailable):
    """This board is a standby: it answers no client call. ``primary``: the
    address of its primary (HOST:PORT), where clients should go; "" when
    this board knows of none (a standby that has not found its primary, or
    a primary fenced and cut off from etcd): clients try another board."""

    def __init__(self, primary: str = "") -> None:
        if primary:
            text = f"this board is a standby; its primary is at {primary}"
        else:
            text = "this board is a standby and knows of no primary yet; try another board"
        super().__init__(text)
        self.primary = primary

    def info(self) -> dict[str, str]:
        return {"primary": self.primary}

    def _restore(self, info: dict[str, str]) -> None:
        self.primary = info.get("primary", "")


class NoLease(Unavailable):
    """A board of a cluster that cannot confirm its leadership's lease (it
    may have run out in etcd): it answers nothing, reads included, until it
    is sure again or another board leads. ``epoch``: the term it held."""

    def __init__(self, epoch: int = 0) -> None:
        super().__init__(
            f"this board cannot confirm its lease as the cluster's primary (epoch {epoch}); "
            "try again, or another board"
        )
        self.epoch = epoch

    def info(self) -> dict[str, str]:
        return {"epoch": str(self.epoch)}

    def _restore(self, info: dict[str, str]) -> None:
        self.epoch = int(info.get("epoch", "0") or 0)


class LogTruncated(FailedPrecondition):
    """A standby asked for log entries the primary no longer keeps: it must
    be seeded again."""


class LogDiverged(FailedPrecondition):
    """A standby's last log entry is not the primary's entry at that index
    (or is past the primary's last): it moves its data aside and is seeded
    again."""


class DeadlineExceeded(MsgboardError):
    code = "DEADLINE_EXCEEDED"


class Unauthenticated(MsgboardError):
    code = "UNAUTHENTICATED"


class Aborted(MsgboardError):
    code = "ABORTED"


class Kicked(Aborted):
    """An operator ended the subscription (KickConsumer); its outstanding
    messages went back to the queue."""


class PermissionDenied(MsgboardError):
    """A user may not do this: ``user``, the ``verb`` (or verbs, "read or
    manage") and the ``queue`` ("" for the whole board) say what."""

    code = "PERMISSION_DENIED"
    user = verb = queue = ""

    def __init__(
        self, message: str = "", *, user: str = "", verb: str = "", queue: str = ""
    ) -> None:
        super().__init__(message)
        self.user, self.verb, self.queue = user, verb, queue

    def info(self) -> dict[str, str]:
        return {"user": self.user, "verb": self.verb, "queue": self.queue}

    def _restore(self, info: dict[str, str]) -> None:
        self.user, self.verb = info.get("user", ""), info.get("verb", "")
        self.queue = info.get("queue", "")


class Reserved(PermissionDenied):
    """A post, create, delete or dead letter to a queue the board keeps for
    itself (``$sys``): users may read it, nobody may write it."""


class DataLoss(MsgboardError):
    """Stored data failed its checksum: it is not served as if it were whole."""

    code = "DATA_LOSS"


class RecordDamaged(DataLoss):
    """One stored message failed its check (``queue`` and ``seq`` say which).
    When its key is damaged too, its seq is not trusted: ``seq`` is 0 and
    ``after`` names its place, the seq of the last good record before it."""

    queue = ""
    seq = 0
    after = -1
    why = ""

    def __init__(self, queue: str, seq: int, why: str, after: int = -1) -> None:
        where = f"the record after seq {after}" if after >= 0 else f"seq {seq}"
        super().__init__(f"queue {queue!r} {where}: the stored record is damaged ({why})")
        self.queue = queue
        self.seq = 0 if after >= 0 else seq
        self.after = after
        self.why = why

    def info(self) -> dict[str, str]:
        info = {"queue": self.queue, "seq": str(self.seq)}
        if self.after >= 0:
            info["after"] = str(self.after)
        return info

    def _restore(self, info: dict[str, str]) -> None:
        self.queue = info.get("queue", "")
        self.seq = int(info.get("seq", "0") or 0)
        self.after = int(info.get("after", "-1") or -1)


class StoreDamaged(DataLoss):
    """LMDB met a damaged page or entry while serving (MDB_CORRUPTED and its
    kin): the call that met it fails, the rest of the board serves, and
    ``msgboard check`` names the damage. ``queue``: where it was met, if
    known."""

    queue = ""

    def __init__(self, message: str, queue: str = "") -> None:
        super().__init__(f"queue {queue!r}: {message}" if queue else message)
        self.queue = queue

    def info(self) -> dict[str, str]:
        return {"queue": self.queue}

    def _restore(self, info: dict[str, str]) -> None:
        self.queue = info.get("queue", "")


class StoreError(MsgboardError):
    code = "INTERNAL"


class DirectoryLocked(StoreError):
    """Another board (this process or another) holds the data directory."""

    code = "FAILED_PRECONDITION"


class DataFileDamaged(StoreError):
    """The data file cannot be opened safely: truncated, or not an LMDB file."""


#: Status name -> the class a client raises for it.
BY_CODE: dict[str, type[MsgboardError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        ResourceExhausted,
        FailedPrecondition,
        Unavailable,
        DeadlineExceeded,
        Aborted,
        Unauthenticated,
        PermissionDenied,
        DataLoss,
        StoreError,
    )
}


def _leaves(cls: type[MsgboardError]) -> dict[str, type[MsgboardError]]:
    out = {cls.__name__: cls}
    for sub in cls.__subclasses__():
        out.update(_leaves(sub))
    return out


def from_wire(
    code: str, message: str, name: str = "", info: dict[str, str] | None = None
) -> MsgboardError:
    """Rebuilds an error the server sent: its own class when ``name`` (the
    ErrorInfo reason) names one of this tree, else the class of the status;
    ``info`` (the ErrorInfo metadata) gives back its attributes."""
    cls = _leaves(MsgboardError).get(name) or BY_CODE.get(code, MsgboardError)
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    if info is None and isinstance(err, InvalidArgument):
        m = _PATH.match(message)
        info = {"field": m.group(1)} if m else {}
    err._restore(info or {})
    if cls is MsgboardError:
        err.code = code
    return err
