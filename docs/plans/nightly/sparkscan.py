"""Spark full scans (noop sink) of SNAP through the data source, today's
decoder and ptars, interleaved twice, one session; beside the one-process
scan + check + parse floor.

    venv/bin/python sparkscan.py SNAP
"""
import os, sys, time
sys.path.insert(0, "/work/main/bench")
from spark import parse
from pyspark_msgboard.session import session
from ptars_source import PtarsSource, FreeSource

snap = os.path.abspath(sys.argv[1])
spark = session(conf={"spark.ui.enabled": "false"})
try:
    spark.dataSource.register(PtarsSource)
    spark.dataSource.register(FreeSource)
    n = spark.read.format("msgboard").load(snap).count()
    def scan(fmt):
        df = spark.read.format(fmt).option("numPartitions", os.environ.get("PARTS", "0")).load(snap)
        t = time.perf_counter(); df.write.format("noop").mode("overwrite").save(); return time.perf_counter() - t
    scan("msgboard_ptars")  # warm the workers
    for r in range(2):
        f = time.perf_counter(); parse(snap); f = time.perf_counter() - f
        a = scan("msgboard"); b = scan("msgboard_ptars"); c = scan("msgboard_free")
        print(f"round {r+1}: load {os.getloadavg()[0]:.1f}  floor {n/f:,.0f} rows/s  "
              f"Spark scan today {n/a:,.0f} rows/s ({f/a:.2f}x)  with ptars {n/b:,.0f} rows/s ({f/b:.2f}x)  no decode {n/c:,.0f} rows/s ({f/c:.2f}x)", flush=True)
finally:
    spark.stop()
