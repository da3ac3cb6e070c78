"""Credit: how many messages a selector may take now, in the vocabulary of
``selectors.py`` (a consumer's window, an internal selector's quota, a
queue's room). The rules are ``network.py``'s ("Credit"); pulling when
credit arrives is ``pulling.py``'s.
"""

from __future__ import annotations

import math

from msgboard.engine.selectors import Selector
from msgboard.engine.writer import Batch
from msgboard.spec import Op


def room(b: Batch, name: str) -> float:
    """How many more messages queue ``name`` takes under its
    ``max_unprocessed`` (0 if it is gone)."""
    found = b.lookup(name)
    if found is None:
        return 0
    txn, info = found
    limit = info.spec.max_unprocessed
    if not limit:
        return math.inf
    return max(0, limit - txn.counts(name).unprocessed)


def credit(b: Batch, s: Selector) -> float:
    """How many messages ``s`` may take now: a DELETE, any; a terminal
    selector, its consumer's credit; a BOUNCE, its quota; a selector to a
    queue, its quota or the room in that queue, the lesser."""
    spec = s.spec
    if spec.op is Op.DELETE:
        return math.inf
    if spec.terminal:
        c = s.consumer
        return 0 if c is None or c.closed else c.credit()
    if spec.op is Op.BOUNCE:
        return s.quota
    return min(s.quota, room(b, spec.destination))
