"""The one error tree of msgboard, shared by the engine, server and client.

::

    MsgboardError                 .code: the gRPC status name it maps to
    ├── InvalidArgument           bad input; the message names the field
    ├── NotFound
    │   └── QueueNotFound
    ├── AlreadyExists
    │   └── QueueExists           same name, other properties
    ├── ResourceExhausted
    │   ├── QueueFull             over max_unprocessed with the reject policy
    │   ├── MessageTooLarge
    │   └── StoreFull             the disk refused a write
    ├── FailedPrecondition
    ├── Unavailable               the board is closed or unreachable
    ├── DeadlineExceeded          (client side: the call's deadline passed)
    ├── Unauthenticated
    ├── PermissionDenied
    └── StoreError                the store failed (INTERNAL)

The engine raises these; ``msgboard.server`` maps them to status codes in one
place and ``msgboard.client`` maps status codes back, so a client catches the
same classes an embedded user does. Nothing here imports gRPC.
"""

from __future__ import annotations

#: The gRPC trailing metadata key under which the server names an error's
#: class in this tree, so a client raises the same class.
ERROR_KEY = "msgboard-error"


class MsgboardError(Exception):
    """Base of every msgboard error."""

    code = "UNKNOWN"
    #: On a Subscribe stream: the ``ref`` of the request it answers (what the
    #: client's ``ack``, ``nack`` or ``credit`` returned); 0 otherwise.
    ref = 0


class InvalidArgument(MsgboardError):
    code = "INVALID_ARGUMENT"


class NotFound(MsgboardError):
    code = "NOT_FOUND"


class QueueNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"queue {name!r} does not exist")
        self.name = name


class AlreadyExists(MsgboardError):
    code = "ALREADY_EXISTS"


class QueueExists(AlreadyExists):
    pass


class ResourceExhausted(MsgboardError):
    code = "RESOURCE_EXHAUSTED"


class QueueFull(ResourceExhausted):
    pass


class MessageTooLarge(ResourceExhausted):
    pass


class StoreFull(ResourceExhausted):
    pass


class FailedPrecondition(MsgboardError):
    code = "FAILED_PRECONDITION"


class Unavailable(MsgboardError):
    code = "UNAVAILABLE"


class DeadlineExceeded(MsgboardError):
    code = "DEADLINE_EXCEEDED"


class Unauthenticated(MsgboardError):
    code = "UNAUTHENTICATED"


class PermissionDenied(MsgboardError):
    code = "PERMISSION_DENIED"


class StoreError(MsgboardError):
    code = "INTERNAL"


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
        Unauthenticated,
        PermissionDenied,
        StoreError,
    )
}


def _leaves(cls: type[MsgboardError]) -> dict[str, type[MsgboardError]]:
    out = {cls.__name__: cls}
    for sub in cls.__subclasses__():
        out.update(_leaves(sub))
    return out


def from_wire(code: str, message: str, name: str = "") -> MsgboardError:
    """Rebuilds an error the server sent: its own class when ``name`` names
    one of this tree (the server sends it), else the class of the status."""
    cls = _leaves(MsgboardError).get(name) or BY_CODE.get(code, MsgboardError)
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    if cls is MsgboardError:
        err.code = code
    return err
