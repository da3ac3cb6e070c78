"""Queue properties, fixed when a queue is created."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

#: ``max_history`` value meaning "keep every taken message".
UNLIMITED = 2**64 - 1


class OverflowPolicy(enum.Enum):
    """What a post to a full queue does."""

    REJECT = "reject"  # the poster gets RESOURCE_EXHAUSTED
    DROP_NEW = "drop-new"  # accepted, answered with seq 0, not stored
    DEAD_LETTER = "dead-letter"  # not supported yet


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A queue's name and properties."""

    name: str
    transient: bool = False
    #: Most waiting messages; 0: no limit.
    max_unprocessed: int = 0
    overflow: OverflowPolicy = OverflowPolicy.REJECT
    #: Most taken messages kept in history; 0 keeps none, UNLIMITED all.
    max_history: int = 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["overflow"] = self.overflow.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> QueueSpec:
        return cls(**{**d, "overflow": OverflowPolicy(d["overflow"])})
