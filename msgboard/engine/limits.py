"""What the board accepts: names, sizes and counts, checked before any write.

Every check raises InvalidArgument (or MessageTooLarge) naming the field, so
bad input is refused before it can touch the store.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from msgboard.associative import check_fields
from msgboard.associative.tuples import INT64_MAX, INT64_MIN
from msgboard.engine.events import SYS
from msgboard.errors import InvalidArgument, MessageTooLarge, Reserved
from msgboard.lmdbstore import DAMAGED
from msgboard.message import Message, Section, size, stamp
from msgboard.spec import (
    MAX_DEDUP_WINDOW,
    MAX_KEY_BYTES,
    MAX_MULTIPLIER,
    MAX_REDELIVERY,
    OUTBOX,
    QueueSpec,
    Redelivery,
)

_NAME = re.compile(r"[A-Za-z0-9._:\-]{1,255}")
UINT64_MAX = 2**64 - 1
#: The last instant a protobuf Timestamp (and Spark, Arrow, Parquet) can
#: hold: 9999-12-31T23:59:59.999999Z, in µs since the epoch.
MAX_TIME_US = 253_402_300_799_999_999


@dataclass(frozen=True, slots=True)
class Limits:
    """Board-wide limits; the server takes them from its options."""

    max_message_bytes: int = 4 * 1024 * 1024
    max_arity: int = 64
    max_address_bytes: int = 1024
    max_batch: int = 10_000
    max_take: int = 10_000
    max_page: int = 10_000
    #: The longest a Take or Read may block, in seconds.
    max_timeout: float = 24 * 3600.0
    #: The most deliveries one consumer may have outstanding (delivered and
    #: not acked, which includes those still queued for sending), whatever
    #: credit it asks for: its effective credit.
    max_credit: int = 10_000
    #: The most message bytes one consumer may have outstanding; past it the
    #: consumer gets nothing more until it acks (one message always fits).
    max_outstanding_bytes: int = 32 * 1024 * 1024
    #: The most request bytes a PostStream reads ahead of the batches it has
    #: answered (one batch is always read).
    max_read_ahead_bytes: int = 16 * 1024 * 1024

    def check_name(
        self, name: str, where: str = "queue", *, write: bool = False, verb: str = "write"
    ) -> str:
        """A queue name; the board's own ``$sys`` and ``$damaged`` (where
        ``check --repair`` sets damage aside) only to read (``write``: the
        call posts to, creates, deletes or manages the queue; ``verb``, the
        Reserved error's, says which: ``write`` or ``manage``). The server
        fills the Reserved error's ``user`` (``security.auth.blame``)."""
        if name in (SYS, DAMAGED):
            if write:
                raise Reserved(
                    f"{where}: {name!r} is the board's own queue: read it, never {verb} it",
                    verb=verb,
                    queue=name,
                )
            return name
        if isinstance(name, str) and name.startswith(OUTBOX) and not write:
            if not _NAME.fullmatch(name[1:]):
                raise InvalidArgument(f"{where}: {name!r} is not a queue name")
            return name  # a crossing selector's outbox: read, never written
        if isinstance(name, str) and name.startswith("$"):
            raise InvalidArgument(f"{where}: {name!r}: names starting with '$' are the board's")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidArgument(
                f"{where}: {name!r} is not a queue name (1-255 letters, digits or '._:-')"
            )
        return name

    def check_spec(self, spec: QueueSpec) -> QueueSpec:
        self.check_name(spec.name, "spec.name", write=True, verb="manage")
        if not 0 <= spec.max_unprocessed <= UINT64_MAX:
            raise InvalidArgument("spec.max_unprocessed: must be 0 (no limit) or more")
        if not 0 <= spec.max_history <= UINT64_MAX:
            raise InvalidArgument("spec.max_history: must be 0 (keep none) or more")
        if spec.dead_letter:
            self.check_name(spec.dead_letter, "spec.dead_letter", write=True)
            if spec.dead_letter == spec.name:
                raise InvalidArgument(
                    "spec.dead_letter: a queue cannot be its own dead-letter queue"
                )
        if not 0 <= spec.max_deliveries <= 0xFFFFFFFF:
            raise InvalidArgument("spec.max_deliveries: must be 0 (no limit) to 2^32-1")
        if spec.redelivery is not None:
            check_redelivery(spec.redelivery, "spec.redelivery")
        if not 0 <= spec.dedup_window <= MAX_DEDUP_WINDOW:
            raise InvalidArgument(
                f"spec.dedup_window: must be 0 (only while on the board) to 30 days "
                f"(got {spec.dedup_window} µs)"
            )
        # A policy that sends messages to a dead-letter queue needs one: without
        # it they would be discarded while the policy said otherwise. (Past
        # max_deliveries a message is dead-lettered too, but there discarding
        # a poison message is a policy of its own, as RabbitMQ's delivery-limit
        # without a dead-letter exchange: allowed, and counted in dead_lettered.)
        if not spec.dead_letter:
            for field, policy in (("overflow", spec.overflow), ("unmatched", spec.unmatched)):
                if policy.value == "dead-letter":
                    raise InvalidArgument(
                        f"spec.{field}: the dead-letter policy needs a dead-letter queue "
                        "(spec.dead_letter); none is named"
                    )
        return spec

    def check_message(self, m: Message, where: str) -> tuple[Message, int]:
        """Validates a message to post and returns it with the fields the
        board sets cleared, and its size (``message.size``)."""
        if m.tuple != ():  # the empty tuple is valid: no call, no f-string
            check_fields(m.tuple, self.max_arity, f"{where}.tuple")
        if len(m.address.encode()) > self.max_address_bytes:
            raise InvalidArgument(f"{where}.address: longer than {self.max_address_bytes} bytes")
        if not INT64_MIN <= m.priority <= INT64_MAX:
            raise InvalidArgument(f"{where}.priority: does not fit in 64 bits")
        for k, v in m.headers.items():
            if not isinstance(k, str) or not 1 <= len(k.encode()) <= 255:
                raise InvalidArgument(f"{where}.headers: key {k!r} must be 1-255 bytes")
            if not isinstance(v, str):
                raise InvalidArgument(f"{where}.headers[{k!r}]: value must be a string")
        if m.reply_to:
            self.check_name(m.reply_to, f"{where}.reply_to", write=True)
        if m.key and len(m.key.encode()) > MAX_KEY_BYTES:
            raise InvalidArgument(
                f"{where}.key: {len(m.key.encode())} bytes is over the limit of {MAX_KEY_BYTES}"
            )
        if m.expires_at < 0:
            raise InvalidArgument(f"{where}.expires_at: before 1970")
        if m.expires_at > MAX_TIME_US:  # nanoseconds by mistake, or past year 9999
            raise InvalidArgument(
                f"{where}.expires_at: {m.expires_at} µs is after 9999-12-31, the last time "
                "a timestamp can hold (microseconds since 1970 expected)"
            )
        if m.not_before:
            if not 0 <= m.not_before <= MAX_TIME_US:
                raise InvalidArgument(
                    f"{where}.not_before: {m.not_before} µs is not between 1970 and "
                    "9999-12-31 (microseconds since 1970 expected)"
                )
            if m.expires_at and m.expires_at < m.not_before:
                raise InvalidArgument(
                    f"{where}.expires_at: before not_before: the message would expire "
                    "before it is visible"
                )
        n = size(m)
        if n > self.max_message_bytes:
            raise MessageTooLarge(
                f"{where}: {n} bytes is over the limit of {self.max_message_bytes}"
            )
        if m.seq or m.queue or m.posted_at or m.processed_at or m.delivery_count:
            m = stamp(m, "", 0, 0, 0, 0, Section.UNPROCESSED)
        return m, n

    def check_count(self, n: int, limit: int, where: str, default: int) -> int:
        """A max/limit argument: 0 means ``default``; negative is invalid."""
        if n < 0:
            raise InvalidArgument(f"{where}: must not be negative (got {n})")
        if n > limit:
            raise InvalidArgument(f"{where}: at most {limit} (got {n})")
        return n or default

    def check_timeout(self, seconds: float, where: str = "timeout") -> float:
        if not seconds >= 0:  # also refuses NaN
            raise InvalidArgument(f"{where}: must not be negative (got {seconds})")
        if seconds > self.max_timeout:
            raise InvalidArgument(f"{where}: at most {self.max_timeout:.0f} seconds")
        return seconds


def check_redelivery(r: Redelivery, where: str) -> None:
    """InvalidArgument, naming the field under ``where``, for a redelivery
    policy out of bounds: delays from 0 to 1 day, ``most`` at least
    ``initial``, a multiplier from 1 to ``MAX_MULTIPLIER``."""
    if not 0 <= r.initial <= MAX_REDELIVERY:
        raise InvalidArgument(f"{where}.initial: must be 0 to 1 day (got {r.initial} µs)")
    if not (r.multiplier >= 1 and math.isfinite(r.multiplier)):
        raise InvalidArgument(
            f"{where}.multiplier: must be at least 1 (got {r.multiplier}): a delay never shrinks"
        )
    if r.multiplier > MAX_MULTIPLIER:
        raise InvalidArgument(
            f"{where}.multiplier: must be at most {MAX_MULTIPLIER} (got {r.multiplier:g})"
        )
    if not r.initial <= r.most <= MAX_REDELIVERY:
        raise InvalidArgument(
            f"{where}.max: must be from initial ({r.initial} µs) to 1 day (got {r.most} µs)"
        )


def check_delay(us: int, where: str) -> None:
    """A nack's own delay: 0 to 1 day."""
    if not 0 <= us <= MAX_REDELIVERY:
        raise InvalidArgument(f"{where}: must be 0 to 1 day (got {us} µs)")
