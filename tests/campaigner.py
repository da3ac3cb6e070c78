"""A board's leadership alone, in a child process the cluster tests can kill
(-9), stop (SIGSTOP) and resume: ``python -m tests.campaigner --etcd URLS
--cluster NAME --name BOARD [--ttl S] [--eligible]``.

It prints one JSON line per event on its standard output, flushed at once:

- every ``Change`` of its ``Leadership`` (elected, renewed, fenced,
  resigned), printed before the change is published, so a term's deadline
  is never later than the last one printed;
- ``claim`` lines: every 25 ms a sampler asks ``term()`` and, when it gets a
  term, prints when it asked (``at``) and the term's epoch and deadline. A
  claim is the board saying "I may answer writes now": the checker
  (tests/cluster.py) holds every claim against every other board's terms.

All times are on ``msgboard.cluster.clock()`` (CLOCK_BOOTTIME), one clock
for every process of the machine, so the lines of several children compare.
With ``--eligible`` it campaigns only while the in-sync set names it.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from msgboard.cluster import Change, Leadership, SyncSet, clock

lock = threading.Lock()


def say(**line: object) -> None:
    with lock:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--etcd", required=True)
    p.add_argument("--cluster", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--ttl", type=int, default=3)
    p.add_argument("--eligible", action="store_true")
    a = p.parse_args()

    def told(c: Change) -> None:
        say(board=a.name, kind=c.kind, epoch=c.epoch, until=c.until, at=c.at, reason=c.reason)

    def eligible(s: SyncSet | None) -> bool:
        return s is not None and a.name in s.standbys

    leadership = Leadership(
        a.etcd,
        a.cluster,
        a.name,
        f"{a.name}.test:7",
        ttl=a.ttl,
        listener=told,
        eligible=eligible if a.eligible else None,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    leadership.start()
    say(board=a.name, kind="started", at=clock())
    while not done.wait(0.025):
        asked = clock()
        t = leadership.term()
        if t is not None:
            say(board=a.name, kind="claim", epoch=t.epoch, until=t.until, at=asked)
    leadership.stop()
    say(board=a.name, kind="stopped", at=clock())


if __name__ == "__main__":
    main()
