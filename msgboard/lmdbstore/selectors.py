"""How the durable store keeps a selector's spec: the bytes of board.proto's
``SelectorSpec`` (``msgboard.codec`` encodes and decodes it), under the
selector's id in the ``selectors`` sub-database. The engine hands the store
a ``SelectorSpec`` and gets one back (``Txn.put_selector``,
``Txn.selectors``); only the store sees the bytes, which ``msgboard check``
and the Spark reader read too.
"""

from __future__ import annotations

from msgboard.codec import selector_spec_from_pb, selector_spec_to_pb
from msgboard.errors import DataFileDamaged
from msgboard.spec import SelectorSpec
from msgboard.v1 import board_pb2 as pb


def encode(spec: SelectorSpec) -> bytes:
    """The stored bytes of ``spec``."""
    return selector_spec_to_pb(spec).SerializeToString()


def decode(path: str, sid: str, data: bytes) -> SelectorSpec:
    """The spec stored as ``data`` for selector ``sid`` of the board at
    ``path``; DataFileDamaged if it does not parse."""
    try:
        # A record of the board's: it may come from before ``quota``.
        return selector_spec_from_pb(pb.SelectorSpec.FromString(data), stored=True)
    except Exception as e:  # DecodeError, InvalidArgument: damaged on disk
        raise DataFileDamaged(
            f"{path}: selector {sid}: its stored spec does not parse ({e}); "
            f"msgboard check {path} tells more"
        ) from None
