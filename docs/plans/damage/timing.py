"""Times the verifier (deep and shallow), the child walker and today's
check on the boards given; wall and CPU seconds, best of ``--rounds``.

    python timing.py DIR... [--rounds N] [--check]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import childwalk
from msgboard.lmdbstore import verify as pageverify


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv: list[str]) -> None:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 3
    dirs = [a for a in argv if os.path.isdir(a)]
    for d in dirs:
        size = os.path.getsize(os.path.join(d, "data.mdb"))
        print(f"{d}: data.mdb {size / 1e6:,.0f} MB")
        for deep in (False, True):
            best = (1e9, 1e9)
            for _ in range(rounds):
                t, c = time.perf_counter(), time.process_time()
                r = pageverify.verify(d, deep=deep)
                best = min(best, (time.perf_counter() - t, time.process_time() - c))
            print(
                f"  verify {'deep   ' if deep else 'shallow'}: wall {best[0]:6.2f} s, "
                f"cpu {best[1]:6.2f} s, {r.pages_read:,} pages, ok={r.ok}"
            )
        best = (1e9, 1e9)
        for _ in range(rounds):
            c0 = _children_cpu()
            out = childwalk.walk(d)
            best = min(best, (out.seconds, _children_cpu() - c0))
        n = sum(out.counts.values())
        print(
            f"  child walk     : wall {best[0]:6.2f} s, cpu {best[1]:6.2f} s, {n:,} entries, "
            f"ok={out.ok}"
        )
        if "--check" in argv:
            c0 = _children_cpu()
            t = time.perf_counter()
            subprocess.run(["/work/main/.venv/bin/msgboard", "check", d], capture_output=True)
            print(
                f"  msgboard check : wall {time.perf_counter() - t:6.2f} s, "
                f"cpu {_children_cpu() - c0:6.2f} s (today's, once)"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
