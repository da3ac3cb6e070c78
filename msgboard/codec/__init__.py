"""Conversions between msgboard's Python types and their protobuf form.

One place for it: the server and client use it on the wire, and the LMDB
store uses the same ``msgboard.v1.Message`` encoding for its records, so a
snapshot can be decoded by any language that has the proto. This face
gathers the public names; each idea has its module:

- ``records``: the bytes a store keeps for a message and the message it
  reads back (``encode_record``, ``decode_record``), held fixed by
  tests/test_stored_bytes.py;
- ``messages``: tuple values, timestamps, messages and post receipts;
- ``patterns``: field patterns, templates, address patterns, patterns;
- ``specs``: queue specs, selector specs and start positions;
- ``enums``: one table per proto enum, the way back derived from it.

Conversions from protobuf check what they read: a malformed part is
InvalidArgument naming its path (``spec.pattern.templates[0]: …``).
"""

from __future__ import annotations

from msgboard.codec.enums import (
    DISPOSITION,
    OP,
    OVERFLOW,
    POSITION,
    ROLE,
    SECTION,
    START,
    UNMATCHED,
    VALUE_TYPE,
)
from msgboard.codec.messages import (
    fields_from_pb,
    fields_to_pb,
    message_from_pb,
    message_to_pb,
    messages_from_pb,
    messages_to_pb,
    receipts_from_pb,
    receipts_to_pb,
    section_from_pb,
    ts_to_us,
    us_to_ts,
    value_from_pb,
    value_to_pb,
)
from msgboard.codec.patterns import (
    address_from_pb,
    address_to_pb,
    field_pattern_from_pb,
    field_pattern_to_pb,
    pattern_from_pb,
    pattern_to_pb,
    template_from_pb,
    template_to_pb,
)
from msgboard.codec.records import (
    board_fields,
    decode_record,
    encode_record,
    exit_suffix,
    processed_suffix,
)
from msgboard.codec.specs import (
    browse_start_from_pb,
    browse_start_to_pb,
    duration_to_us,
    link_from_pb,
    link_spec_from_pb,
    link_spec_to_pb,
    link_to_pb,
    op_from_pb,
    position_from_pb,
    position_to_pb,
    redelivery_from_pb,
    redelivery_to_pb,
    selector_spec_from_pb,
    selector_spec_to_pb,
    spec_from_pb,
    spec_to_pb,
    us_to_duration,
)
from msgboard.codec.times import checked_duration, checked_ts

__all__ = [
    "DISPOSITION",
    "OP",
    "OVERFLOW",
    "POSITION",
    "ROLE",
    "SECTION",
    "START",
    "UNMATCHED",
    "VALUE_TYPE",
    "address_from_pb",
    "address_to_pb",
    "board_fields",
    "browse_start_from_pb",
    "browse_start_to_pb",
    "checked_duration",
    "checked_ts",
    "decode_record",
    "duration_to_us",
    "encode_record",
    "exit_suffix",
    "field_pattern_from_pb",
    "field_pattern_to_pb",
    "fields_from_pb",
    "fields_to_pb",
    "link_from_pb",
    "link_spec_from_pb",
    "link_spec_to_pb",
    "link_to_pb",
    "message_from_pb",
    "message_to_pb",
    "messages_from_pb",
    "messages_to_pb",
    "op_from_pb",
    "pattern_from_pb",
    "pattern_to_pb",
    "position_from_pb",
    "position_to_pb",
    "processed_suffix",
    "receipts_from_pb",
    "receipts_to_pb",
    "redelivery_from_pb",
    "redelivery_to_pb",
    "section_from_pb",
    "selector_spec_from_pb",
    "selector_spec_to_pb",
    "spec_from_pb",
    "spec_to_pb",
    "template_from_pb",
    "template_to_pb",
    "ts_to_us",
    "us_to_duration",
    "us_to_ts",
    "value_from_pb",
    "value_to_pb",
]
