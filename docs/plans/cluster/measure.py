"""The figures of DESIGN.md §0, against a real three-member etcd on loopback.

Run from the checkout's root: PYTHONPATH=. .venv/bin/python docs/plans/cluster/measure.py
(needs Debian's etcd-server; takes about 30 s).
"""

import statistics
import tempfile
import time
from pathlib import Path

from msgboard.cluster import Etcd, Leadership, clock
from tests.cluster import EtcdCluster, History, campaigners

root = Path(tempfile.mkdtemp())
etcd = EtcdCluster(root).start()
try:
    client = Etcd(etcd.endpoints)
    grant = client.grant(1)
    rtt = []
    for _ in range(50):
        t = time.perf_counter()
        client.keepalive(grant.id)
        rtt.append(time.perf_counter() - t)
    client.close()
    print(
        "lease asked 1 s, granted %d s; keep-alive round trip median %.2f ms, max %.2f ms over %d"
        % (grant.ttl, 1000 * statistics.median(rtt), 1000 * max(rtt), len(rtt))
    )

    h = History()
    gaps = []
    names = ["a", "b", "c", "d", "e", "f"]
    with campaigners(h, etcd.endpoints, "m1", names, "--ttl", "3") as kids:
        epoch = 0
        for _ in range(5):
            first = h.wait("leader", lambda r: r.kind == "elected" and r.epoch > epoch, 30)
            killed = clock()
            next(k for k in kids if k.name == first.board).kill()
            second = h.wait("next", lambda r: r.kind == "elected" and r.epoch > first.epoch, 30)
            gaps.append(second.at - killed)
            epoch = first.epoch
    print(
        "kill -9 of the leader -> next elected, TTL 3: median %.2f s, min %.2f, max %.2f over %d"
        % (statistics.median(gaps), min(gaps), max(gaps), len(gaps))
    )

    a = Leadership(etcd.endpoints, "m2", "a", "a:1", ttl=3).start()
    b = Leadership(etcd.endpoints, "m2", "b", "b:1", ttl=3).start()
    sw = []
    for _ in range(10):
        while not (a.leader() or b.leader()):
            time.sleep(0.01)
        lead, other = (a, b) if a.leader() else (b, a)
        t0 = clock()
        lead.resign(hold=0.5)
        other.wait(10)
        sw.append(clock() - t0)
        time.sleep(0.6)
    a.stop()
    b.stop()
    print(
        "switchover (resign -> the other leads): median %.1f ms, max %.1f ms over %d"
        % (1000 * statistics.median(sw), 1000 * max(sw), len(sw))
    )
finally:
    etcd.stop()
