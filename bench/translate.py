"""What a translator costs per message (msgboard/links/translate.py): µs of
CPU per ``apply`` and per ``reverse`` for a few translators, the rounds
alternating between them in one run, with the cost of copying the message
with ``dataclasses.replace`` beside them as a yardstick. Prints each
case's median over the rounds::

    .venv/bin/python bench/translate.py [--messages 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable

from msgboard import Message
from msgboard.links import Origin, compile_translator

CASES = {
    "identity": "",
    "prefix": "prefix +site1.",
    "words": "word cats=felines dogs=canines",
    "typical": "prefix +site1. ; word cats=felines ; header set x-site=1 ; "
    "header del secret ; origin",
    "bounce-ready": "prefix +site1. ; word cats=felines ; reply back-site1",
}


def per_message(fn: Callable[[Message], object], msgs: list[Message]) -> float:
    t = time.process_time()
    for m in msgs:
        fn(m)
    return (time.process_time() - t) / len(msgs) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    origin = Origin("2f9c0d6e1a7b4c55", "orders", 1)
    msgs = [
        Message(
            address=f"rec.pets.cats.n{i % 100}",
            headers={"secret": "s", "trace": f"t{i}"},
            reply_to="answers",
            body=b"x" * 100,
            tuple=(i, "cats"),
        )
        for i in range(args.messages)
    ]
    runs: dict[str, list[float]] = {}
    for r in range(args.rounds):
        order = list(CASES.items())
        if r % 2:
            order.reverse()
        runs.setdefault("replace (yardstick)", []).append(
            per_message(lambda m: dataclasses.replace(m, address="x"), msgs)
        )
        for name, text in order:
            t = compile_translator(text)
            out = [t.apply(m, origin) for m in msgs]
            runs.setdefault(f"{name} apply", []).append(
                per_message(lambda m, t=t: t.apply(m, origin), msgs)
            )
            runs.setdefault(f"{name} reverse", []).append(per_message(t.reverse, out))
    print(f"µs of CPU per message, medians of {args.rounds} rounds of {args.messages:,}:")
    for name, xs in runs.items():
        print(f"  {name:26} {statistics.median(xs):6.2f}   runs {[round(x, 2) for x in xs]}")


if __name__ == "__main__":
    main()
