"""A SparkSession set up for msgboard: Java checked, the workers running this
very interpreter, every clock in UTC, the ``msgboard`` source registered.

Spark's own logging (log4j's, and whatever else the JVM and its Python
workers print) goes to a file when ``session()`` starts the JVM and is given
one (``log``: the commands pass ``--spark-log``, by default beside the
dataset): the JVM's standard output and error are that file, through
pyspark's ``launch_gateway(popen_kwargs=…)``. So a night's standard error
holds only what went wrong, in one ``msgboard: …`` line; ``quiet()`` does
the same for the Python side (py4j and the accumulator server, which print
tracebacks of their own when the JVM dies).

``session()`` runs Spark locally (``local[*]``, listening on loopback only:
driver, block manager and web UI), or under ``spark-submit``
with the master that spark-submit was given; ``session("spark://host:7077")``
uses a cluster from here (client mode). The same job runs either way.
"""

from __future__ import annotations

import logging
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


def quiet(log: str | None) -> None:
    """Python's side of a Spark job says nothing on stderr by itself: py4j
    logs a dead JVM on the root logger (which would print a traceback
    there), and pyspark's accumulator server prints one when its socket
    closes. Both go to ``log`` (None: nowhere); the command reports the
    failure as one line."""
    root = logging.getLogger()
    if not any(h.get_name() == "msgboard-spark" for h in root.handlers):
        handler: logging.Handler
        if log is not None:
            os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
            handler = logging.FileHandler(log, delay=True)
            form = "%(asctime)s %(levelname)s %(name)s: %(message)s"
            handler.setFormatter(logging.Formatter(form))
            handler.setLevel(logging.WARNING)
        else:
            handler = logging.NullHandler()
        handler.set_name("msgboard-spark")
        root.addHandler(handler)
    try:
        from pyspark import accumulators
    except ImportError:
        return
    server = getattr(accumulators, "AccumulatorTCPServer", None)
    if server is not None:
        server.handle_error = _unheard


def _unheard(*_: object) -> None:
    """socketserver's handle_error, silenced (see quiet())."""


def _launch(master: str | None, app: str, settings: dict[str, str], log: str) -> None:
    """Starts the JVM with its standard output and error in the file
    ``log`` (appended to), and a SparkContext on it that the builder then
    finds (the static settings, such as the driver's memory, go to the JVM
    here)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf().setAppName(app)
    if master is not None:
        conf.setMaster(master)
    for key, value in settings.items():
        conf.set(key, value)
    path = os.path.abspath(log)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "ab") as f:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": f, "stderr": f})  # type: ignore[no-untyped-call]
    SparkContext(conf=conf, gateway=gateway)


def session(
    master: str | None = None,
    app: str = "msgboard",
    conf: dict[str, str] | None = None,
    log: str | None = None,
) -> SparkSession:
    """The SparkSession (created, or the running one), set up as above;
    with ``log``, a session this call starts logs into that file."""
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
    settings = {**CONF, **conf}
    if log is not None and not submitted and SparkSession.getActiveSession() is None:
        _launch(master, app, settings, log)
    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(MsgboardDataSource)
    return spark
