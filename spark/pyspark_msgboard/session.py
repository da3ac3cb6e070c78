"""A SparkSession set up for msgboard: Java checked, the workers running this
very interpreter, every clock in UTC, the ``msgboard`` source registered.

``session()`` runs Spark locally (``local[*]``, listening on loopback only:
driver, block manager and web UI), or under ``spark-submit``
with the master that spark-submit was given; ``session("spark://host:7077")``
uses a cluster from here (client mode). The same job runs either way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from msgboard.errors import FailedPrecondition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The oldest Java that Spark 4 runs on.
JAVA = 17

#: Settings every msgboard session gets (a caller's ``conf`` wins).
CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    # Parquet's standard timestamp: INT64 microseconds, adjusted to UTC.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Our own progress bar (export.py) replaces Spark's console one.
    "spark.ui.showConsoleProgress": "false",
}


#: A local session's driver, its block manager and UI listen on loopback only
#: (``SPARK_LOCAL_IP`` for the UI), unless a --master, SPARK_LOCAL_IP or one
#: of these settings says otherwise.
LOOPBACK = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


def java_version() -> int:
    """The major version of the Java that Spark would start; FailedPrecondition
    saying what is missing when there is none, or it is too old."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        raise FailedPrecondition(
            f"Spark needs Java {JAVA} or newer, and {where}: install a JDK or JRE "
            f"(e.g. apt-get install openjdk-{JAVA}-jre-headless) or set JAVA_HOME"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not found:
        raise FailedPrecondition(f"cannot tell the version of {java}: {out.stderr.strip()}")
    major = int(found.group(1))
    if major == 1 and found.group(2):  # "1.8.0" is Java 8
        major = int(found.group(2))
    if major < JAVA:
        raise FailedPrecondition(f"Spark needs Java {JAVA} or newer; {java} is Java {major}")
    return major


def session(
    master: str | None = None, app: str = "msgboard", conf: dict[str, str] | None = None
) -> SparkSession:
    """The SparkSession (created, or the running one), set up as above."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise FailedPrecondition(
            "pyspark is not installed: pip install 'msgboard[spark]' (scripts/setup --dev does)"
        ) from None
    from pyspark_msgboard.source import MsgboardDataSource

    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started us
    conf = dict(conf or {})
    if not submitted:
        java_version()  # this process is about to start the JVM
        master = master or "local[*]"
        own = "SPARK_LOCAL_IP" in os.environ or any(k in conf for k in LOOPBACK)
        if master.startswith("local") and not own:
            # The JVM we start inherits it: its web UI binds where it says.
            os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
            conf = {**LOOPBACK, **conf}
    # Executors' Python workers run the interpreter that has msgboard.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    for key, value in {**CONF, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(MsgboardDataSource)
    return spark
