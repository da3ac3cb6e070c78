"""Errors as the wire carries them, for people and for machines: the one
place where msgboard errors become gRPC status codes and ``google.rpc``
details.

Every failed call ends with the status code of the error's class, its text,
and the standard ``grpc-status-details-bin`` trailer: a ``google.rpc.Status``
(the same code and text) whose details hold a ``google.rpc.ErrorInfo``
(reason: the class name in ``msgboard.errors``, domain ``msgboard``,
metadata: the error's ``info()``) and, for INVALID_ARGUMENT with a field to
blame, a ``google.rpc.BadRequest`` with one field violation (the path,
``messages[2].tuple[0]``, and what is wrong with it). An error inside a
stream that carries on is an ``Error`` message with the same details.
``msgboard.client.wire`` reads them back for the Python client.
"""

from __future__ import annotations

from typing import Any, NoReturn

import grpc
from google.protobuf.any_pb2 import Any as AnyPb
from google.rpc import error_details_pb2, status_pb2

from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.v1 import board_pb2 as pb

#: ErrorInfo.domain of every msgboard error.
DOMAIN = "msgboard"
#: The standard trailer that carries a serialized google.rpc.Status.
DETAILS_KEY = "grpc-status-details-bin"


def status(e: MsgboardError) -> grpc.StatusCode:
    """The status code of an error of this tree."""
    return getattr(grpc.StatusCode, e.code, grpc.StatusCode.UNKNOWN)


def details(e: MsgboardError) -> list[AnyPb]:
    """The google.rpc details of ``e``: its ErrorInfo, then, for a bad field,
    a BadRequest naming it."""
    info = AnyPb()
    info.Pack(
        error_details_pb2.ErrorInfo(reason=type(e).__name__, domain=DOMAIN, metadata=e.info())
    )
    out = [info]
    if isinstance(e, InvalidArgument) and e.field:
        text = str(e)
        prefix = f"{e.field}: "
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=e.field, description=text[len(prefix) :] if text.startswith(prefix) else text
        )
        bad = AnyPb()
        bad.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
        out.append(bad)
    return out


def to_status(e: MsgboardError) -> status_pb2.Status:
    """``e`` as the google.rpc.Status of ``grpc-status-details-bin``."""
    return status_pb2.Status(code=status(e).value[0], message=str(e), details=details(e))


async def abort(context: grpc.aio.ServicerContext[Any, Any], e: MsgboardError) -> NoReturn:
    """Ends the call with the error's status, text and details."""
    trailer = ((DETAILS_KEY, to_status(e).SerializeToString()),)
    await context.abort(status(e), str(e), trailer)
    raise AssertionError("unreachable: abort raises")


def error_to_pb(e: MsgboardError) -> pb.Error:
    """``e`` as an in-stream ``Error`` answer."""
    return pb.Error(
        code=status(e).value[0], message=str(e), name=type(e).__name__, details=details(e)
    )
