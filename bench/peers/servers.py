"""Throw-away servers on loopback for the side-by-side benchmark: msgboard,
RabbitMQ (with its own epmd) and Redis, each on free ports with a data
directory under the run's temporary directory; for bench/replication.py,
msgboard as a primary with standbys and RabbitMQ as a cluster of nodes.

Every process started here is recorded and stopped by ``stop_all`` (called
by the harness in a ``finally`` and registered with ``atexit``). The peers'
processes run in sessions of their own, so that a Ctrl-C reaches only the
harness, which then stops them in order; their process groups are killed
last, which also takes the Erlang VM's helpers (erl_child_setup,
inet_gethost). They are asked to die with the harness, too (Linux
PR_SET_PDEATHSIG), in case it is killed with SIGKILL.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from msgboard.client import Client
from msgboard.testing import ServerProcess


class Stoppable(Protocol):
    def stop(self) -> None: ...


_started: list[Stoppable] = []


def stop_all() -> None:
    """Stops everything started here, newest first."""
    while _started:
        s = _started.pop()
        try:
            s.stop()
        except Exception as e:  # go on with the others
            print(f"stopping {s!r}: {e!r}")


atexit.register(stop_all)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:  # runs in the child, before exec
    with contextlib.suppress(Exception):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _wait(
    what: str, ok: Callable[[], object], proc: subprocess.Popen[bytes], log: Path, seconds: float
) -> None:
    """Polls ``ok()`` until it is true; RuntimeError with the log's tail if
    the process exits or the time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with contextlib.suppress(Exception):
            if ok():
                return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"{what} did not start (exit code {proc.poll()}):\n{tail}")


def _listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, start time), from /proc."""
    out: dict[int, tuple[int, str]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{d}/stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                out[int(d)] = (int(fields[1]), fields[19])
    return out


def _descendants(pid: int) -> dict[int, str]:
    """The processes below ``pid`` (pid -> start time), whatever their
    session (Erlang's port programs start sessions of their own)."""
    procs = _processes()
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for p, (ppid, start) in procs.items():
            if ppid == parent and p not in found:
                found[p] = start
                todo.append(p)
    return found


class Child:
    """One child process in its own session and process group."""

    def __init__(
        self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=log.parent,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.pgid = self.proc.pid  # a session leader leads its group
        _started.append(self)

    def __repr__(self) -> str:
        return f"<{self.name} pid {self.proc.pid}>"

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM and wait; then SIGKILL to the whole process group and to
        any process it had started that is still there."""
        below = _descendants(self.proc.pid)
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    print(f"{self!r} ignored SIGTERM for {timeout:.0f} s: SIGKILL")
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            now = _processes()
            for pid, start in below.items():
                if pid in now and now[pid][1] == start:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ValueError):
                _started.remove(self)


class Board:
    """``msgboard serve`` (the default durable board: fsync'd group commits)
    through ``msgboard.testing.ServerProcess``; with ``standbys``, a primary
    (``--replication-token``, ``--sync-standbys sync``) and that many
    standbys (``--standby-of`` it: static roles), started and stopped
    together; with ``log`` and no standby, a primary writing its log that
    answers without standbys (``--allow-async``). ``address`` is the
    primary's. A cluster is ready once the primary has logged every standby
    following it."""

    durability = "fsync'd group commit (default)"

    def __init__(
        self,
        tmp: Path,
        name: str = "msgboard",
        *,
        standbys: int = 0,
        sync: int = 1,
        log: bool = False,
    ) -> None:
        data = tmp / name
        data.mkdir()
        if standbys:
            self.durability += f", {sync} of {standbys} standbys fsync'd before each answer"
        elif log:
            self.durability += ", operation log, no standby (--allow-async)"
        # Row 5's COPY subscribers ask credit for every message (a COPY
        # without credit loses its copy); the default cap (10,000) would
        # drop the rest of a bigger run and stall it. Durability unchanged.
        args = ["--max-credit", "10000000"]
        token = ["--replication-token", secrets.token_hex(16)]
        if standbys:
            args += [*token, "--sync-standbys", str(sync)]
        elif log:
            args += [*token, "--allow-async"]
        self.servers: list[ServerProcess] = []
        _started.append(self)
        self.server = ServerProcess(data / "board", *args)
        self.servers.append(self.server)
        self.address = self.server.address
        for k in range(1, standbys + 1):
            self.servers.append(
                ServerProcess(data / f"standby{k}", *token, "--standby-of", self.address)
            )

        def following() -> bool:
            return len(_FOLLOWS.findall(self.server.log.read_text())) >= standbys

        _wait(f"{name}'s standbys", following, self.server.proc, self.server.log, 60)
        with Client(self.address) as c:
            c.wait_ready(30)

    def __repr__(self) -> str:
        return f"<msgboard serve pids {[s.proc.pid for s in self.servers]}>"

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM to every board at once, then waits for each; SIGKILL to
        one still there after ``timeout``."""
        try:
            for s in self.servers:
                if s.proc.poll() is None:
                    s.proc.send_signal(signal.SIGTERM)
            for s in self.servers:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    s.proc.wait(timeout)
        finally:
            while self.servers:
                self.servers.pop().kill()  # a no-op for one that has exited
            with contextlib.suppress(ValueError):
                _started.remove(self)


#: What a primary logs when a standby starts following it.
_FOLLOWS = re.compile(r"standby \S+ follows from log index")


class Redis:
    """``redis-server`` with an append-only file fsync'd ``always`` (before
    each reply) or ``everysec`` (weaker: up to a second of acknowledged
    writes lost in a crash); no RDB snapshots."""

    def __init__(self, tmp: Path, fsync: str) -> None:
        self.fsync = fsync
        self.durability = (
            "AOF, appendfsync always"
            if fsync == "always"
            else f"AOF, appendfsync {fsync} (WEAKER: ~1 s of acked writes may be lost)"
        )
        data = tmp / f"redis-{fsync}"
        data.mkdir()
        self.port = free_port()
        # Only what differs from redis-server's defaults.
        conf = {
            "bind": "127.0.0.1",
            "port": str(self.port),
            "dir": str(data),
            "appendonly": "yes",
            "appendfsync": fsync,
            "save": '""',
            "daemonize": "no",
            "logfile": '""',
        }
        (data / "redis.conf").write_text("".join(f"{k} {v}\n" for k, v in conf.items()))
        self.child = Child(
            f"redis-server ({fsync})",
            ["redis-server", str(data / "redis.conf")],
            data / "redis.log",
        )
        import redis  # the client, installed by scripts/bench-compare

        client = redis.Redis(host="127.0.0.1", port=self.port)
        _wait("redis-server", client.ping, self.child.proc, self.child.log, 30)
        client.close()

    def stop(self) -> None:
        self.child.stop()


def _rabbit_env(data: Path, home: Path, node: str, epmd_port: int) -> tuple[dict[str, str], int]:
    """The environment of a RabbitMQ node named ``node`` with every file in
    ``data`` (config, plugins list, mnesia, logs) and its Erlang cookie in
    ``home``, the AMQP listener and the distribution port on free ports of
    127.0.0.1, no plugins; and its AMQP port. rabbitmqctl reaches the node
    with the same environment."""
    port = free_port()
    (data / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = 127.0.0.1:{port}\nlog.console = false\nlog.file.level = warning\n"
    )
    (data / "enabled_plugins").write_text("[].\n")
    (data / "rabbitmq-env.conf").write_text("")
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_NODENAME": node,
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(free_port()),
        "RABBITMQ_CONF_ENV_FILE": str(data / "rabbitmq-env.conf"),
        "RABBITMQ_CONFIG_FILE": str(data / "rabbitmq.conf"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(data / "advanced.config"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(data / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(data / "mnesia"),
        "RABBITMQ_LOG_BASE": str(data / "log"),
    }
    return env, port


def _epmd(data: Path, env: dict[str, str]) -> Child:
    """Our own epmd on ``env``'s ERL_EPMD_PORT, in the foreground, so that it
    is ours to stop (the Erlang VM would otherwise start a daemon epmd that
    outlives it)."""
    port = int(env["ERL_EPMD_PORT"])
    epmd = Child(
        "epmd", ["epmd", "-address", "127.0.0.1", "-port", str(port)], data / "epmd.log", env
    )
    _wait("epmd", lambda: _listening(port), epmd.proc, epmd.log, 30)
    return epmd


def _rabbit_node(name: str, data: Path, env: dict[str, str]) -> Child:
    return Child(name, ["/usr/lib/rabbitmq/bin/rabbitmq-server"], data / "rabbitmq-server.log", env)


def _amqp_ready(port: int, node: Child) -> None:
    """Waits until the node at ``port`` takes an AMQP connection."""
    import pika  # the client, installed by scripts/bench-compare

    params = pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1)

    def connects() -> bool:
        pika.BlockingConnection(params).close()
        return True

    _wait(node.name, connects, node.proc, node.log, 180)


class Rabbit:
    """A RabbitMQ node of its own: a unique node name, its own epmd on a free
    port, the AMQP listener and the distribution port on 127.0.0.1, every
    file (config, plugins list, mnesia, logs, Erlang cookie) in the
    temporary directory, no plugins."""

    durability = "durable queue, persistent msgs, publisher confirms"

    def __init__(self, tmp: Path, name: str = "rabbitmq") -> None:
        data = tmp / name
        data.mkdir()
        env, self.port = _rabbit_env(
            data, data, f"bench-{os.getpid()}-{name}@localhost", free_port()
        )
        self.epmd = _epmd(data, env)
        self.node = _rabbit_node("rabbitmq-server", data, env)
        _amqp_ready(self.port, self.node)

    def stop(self) -> None:
        # SIGTERM to the start script makes it stop the node (rabbit shuts
        # down cleanly on SIGTERM); the group kill takes what is left.
        try:
            self.node.stop(timeout=60)
        finally:
            self.epmd.stop()


class RabbitCluster:
    """``nodes`` RabbitMQ nodes on this machine joined in one cluster, as
    RabbitMQ's guide runs several nodes on one host: distinct node names
    (``bench-PID-rabbitN@localhost``), AMQP and distribution ports and
    mnesia and log directories, one epmd of our own for all of them, one
    Erlang cookie (``$HOME/.erlang.cookie``, HOME shared). All are started
    at once; then each node after the first is joined to the first with
    ``rabbitmqctl stop_app``, ``join_cluster``, ``start_app``, and the
    first must list them all as running, and a probe quorum queue must have
    a member on each. ``port`` is the first node's AMQP port: a quorum
    queue declared through it has its leader there (``client-local``).
    Anything that fails stops what was started, by PID."""

    def __init__(self, tmp: Path, nodes: int = 3, name: str = "rabbitmq-cluster") -> None:
        base = tmp / name
        base.mkdir()
        cookie = base / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(20))
        cookie.chmod(0o400)
        self.epmd: Child | None = None
        self.nodes: list[tuple[Child, dict[str, str], int]] = []
        try:
            self._start(base, nodes)
        except BaseException:
            self.stop()
            raise

    def _start(self, base: Path, count: int) -> None:
        epmd_port = free_port()
        for k in range(1, count + 1):
            data = base / f"rabbit{k}"
            data.mkdir()
            env, port = _rabbit_env(
                data, base, f"bench-{os.getpid()}-rabbit{k}@localhost", epmd_port
            )
            if self.epmd is None:
                self.epmd = _epmd(base, env)
            self.nodes.append((_rabbit_node(f"rabbitmq-server {k}", data, env), env, port))
        for node, _env, port in self.nodes:
            _amqp_ready(port, node)
        first = self.nodes[0][1]["RABBITMQ_NODENAME"]
        for _node, env, _port in self.nodes[1:]:
            for cmd in (["stop_app"], ["join_cluster", first], ["start_app"]):
                self.ctl(env, *cmd)
        for node, _env, port in self.nodes:
            _amqp_ready(port, node)
        status = json.loads(self.ctl(self.nodes[0][1], "cluster_status", "--formatter", "json"))
        running = sorted(status.get("running_nodes", []))
        want = sorted(env["RABBITMQ_NODENAME"] for _node, env, _port in self.nodes)
        if running != want:
            raise RuntimeError(f"the cluster runs {running}, not {want}")
        self.port = self.nodes[0][2]
        self.names = want
        members = self.quorum_members()
        if members != want:
            raise RuntimeError(f"a quorum queue has members {members}, not {want}")

    def quorum_members(self) -> list[str]:
        """The nodes a new quorum queue declared through ``port`` has a
        member on (a probe queue, deleted after)."""
        import pika

        probe = f"probe-{secrets.token_hex(4)}"
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))
        try:
            ch = conn.channel()
            ch.queue_declare(probe, durable=True, arguments={"x-queue-type": "quorum"})
            listed = json.loads(
                self.ctl(self.nodes[0][1], "list_queues", "name", "members", "--formatter", "json")
            )
            ch.queue_delete(probe)
        finally:
            conn.close()
        return sorted(next(q["members"] for q in listed if q["name"] == probe))

    @staticmethod
    def ctl(env: dict[str, str], *args: str) -> str:
        """``rabbitmqctl -n NODE ARGS`` for the node of ``env``; its output."""
        argv = ["/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", env["RABBITMQ_NODENAME"], *args]
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
        if r.returncode:
            raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr or r.stdout}")
        return r.stdout

    def stop(self) -> None:
        """Stops the nodes, newest first, then epmd."""
        try:
            while self.nodes:
                self.nodes.pop()[0].stop(timeout=60)
        finally:
            if self.epmd is not None:
                self.epmd.stop()
                self.epmd = None
