"""The serve configuration: one table of settings, read from a TOML file,
the environment and flags.

Every setting in ``SETTINGS`` is a key of the ``--config`` TOML file (its
name), an environment variable (``MSGBOARD_`` + the name in capitals) and a
``msgboard serve`` flag (``--`` + the name with dashes). Flags override the
environment, which overrides the file, which overrides the default.
``docs/operating.md`` documents every key; a test checks the table and that
page agree.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from msgboard.errors import ConfigError

DEFAULT_LISTEN = "127.0.0.1:7878"
DEFAULT_DATA = "./msgboard-data"
ENV_PREFIX = "MSGBOARD_"


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean (true or false): {text!r}")


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise ValueError(f"must not be negative: {n}")
    return n


def _positive(text: str) -> int:
    n = _count(text)
    if n == 0:
        raise ValueError("must be at least 1")
    return n


def _sync(text: str) -> str:
    if text not in ("fsync", "weaker-no-fsync"):
        raise ValueError(f"not fsync or weaker-no-fsync: {text!r}")
    return text


def _log_format(text: str) -> str:
    if text not in ("text", "json"):
        raise ValueError(f"not text or json: {text!r}")
    return text


LOG_LEVELS = ("debug", "info", "warning", "error")


def _log_level(text: str) -> str:
    low = text.lower()
    if low not in LOG_LEVELS:
        raise ValueError(f"not one of {', '.join(LOG_LEVELS)}: {text!r}")
    return low


def _metrics_listen(text: str) -> str:
    """HOST:PORT, or a bare PORT (or :PORT) on loopback; "" is off."""
    if not text:
        return ""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"not HOST:PORT or PORT: {text!r}")
    return f"{host or '127.0.0.1'}:{port}"


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    """One serve setting."""

    name: str
    #: Parses the text of a flag or an environment variable; raises ValueError.
    parse: Callable[[str], Any]
    default: Any
    help: str
    metavar: str | None = None
    #: The flag's value when given bare (``--access-log``); None: it needs one.
    const: str | None = None

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any, where: str) -> Any:
        """A value from the TOML file, checked (its type) and parsed."""
        want: type = (
            bool if self.parse is _bool else int if self.parse in (_count, _positive) else str
        )
        if type(value) is not want:
            raise ConfigError(f"{where}: {self.name} must be a {want.__name__}, not {value!r}")
        try:
            return self.parse(str(value)) if want is not bool else value
        except ValueError as e:
            raise ConfigError(f"{where}: {self.name}: {e}") from None


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "data", str, DEFAULT_DATA, "the LMDB directory (created with mode 0700 if missing)", "DIR"
    ),
    Setting(
        "listen",
        str,
        DEFAULT_LISTEN,
        "HOST:PORT to listen on (port 0: any free port); outside loopback it needs "
        "TLS and a users file, or --insecure",
        "HOST:PORT",
    ),
    Setting(
        "sync",
        _sync,
        "fsync",
        "fsync every group commit (default); weaker-no-fsync survives a server crash "
        "but not a power loss or OS crash",
        "fsync|weaker-no-fsync",
    ),
    Setting("max_message_bytes", _count, 4 * 1024 * 1024, "the largest message accepted", "N"),
    Setting(
        "max_credit",
        _positive,
        10_000,
        "most unacked deliveries per consumer, whatever credit it asks",
        "N",
    ),
    Setting(
        "max_outstanding_bytes",
        _positive,
        32 * 1024 * 1024,
        "most unacked message bytes per consumer",
        "N",
    ),
    Setting(
        "max_read_ahead_bytes",
        _positive,
        16 * 1024 * 1024,
        "most bytes a post stream reads ahead of its answers",
        "N",
    ),
    Setting("tls_cert", str, "", "PEM certificate chain: serve TLS only", "FILE"),
    Setting("tls_key", str, "", "PEM private key of --tls-cert", "FILE"),
    Setting(
        "tls_client_ca",
        str,
        "",
        "PEM CA certificates: clients must show a certificate signed by one (mutual TLS)",
        "FILE",
    ),
    Setting("users", str, "", "the users TOML file: tokens, certificate names, rules", "FILE"),
    Setting(
        "snapshot_dir",
        str,
        "",
        "Snapshot writes only under this directory (requests name a relative directory)",
        "DIR",
    ),
    Setting(
        "init",
        _bool,
        False,
        "make a new, empty board in --data even where one was (its data.mdb missing or empty); "
        "without it such a directory is refused",
    ),
    Setting(
        "accept_rollback",
        _bool,
        False,
        "serve a data.mdb older than the board's last commit (a restored copy), logging by "
        "how much; without it such a file is refused",
    ),
    Setting(
        "insecure",
        _bool,
        False,
        "allow a listener outside loopback without TLS and a users file (logs a warning)",
    ),
    Setting(
        "max_streams", _count, 64, "open PostStream and Subscribe calls per user (0: no cap)", "N"
    ),
    Setting("max_waits", _count, 64, "blocked Takes and Reads per user (0: no cap)", "N"),
    Setting("max_consumers", _count, 32, "Subscribe consumers per user (0: no cap)", "N"),
    # -- observing it (docs/operating.md, "Metrics, logs and readiness") --
    Setting(
        "metrics_listen",
        _metrics_listen,
        "",
        "serve Prometheus metrics over HTTP at HOST:PORT/metrics and the web console "
        "at HOST:PORT/ (a bare PORT: on loopback); outside loopback it needs TLS "
        "(--tls-cert), or --insecure",
        "HOST:PORT",
    ),
    Setting("log_format", _log_format, "text", "log lines as text or JSON objects", "text|json"),
    Setting("log_level", _log_level, "info", "the least level logged", "|".join(LOG_LEVELS)),
    Setting(
        "access_log",
        str,
        "",
        "one log line per call (method, peer, identity, queue, status, duration) to "
        "FILE, or to standard error when given bare or as -",
        "FILE|-",
        const="-",
    ),
    # -- replication (docs/replication.md) --
    Setting(
        "replication_token",
        str,
        "",
        "the cluster's shared secret: a primary given it keeps an operation log and "
        "serves it to standbys that show it; a standby shows it to its primary",
        "TOKEN",
    ),
    Setting(
        "standby_of",
        str,
        "",
        "run as a standby of the primary at HOST:PORT (needs --replication-token): "
        "follow its log, refuse every client call with NotPrimary",
        "HOST:PORT",
    ),
    Setting(
        "sync_standbys",
        _count,
        1,
        "a primary answers a write once this many standbys have it too",
        "N",
    ),
    Setting(
        "sync_timeout_ms",
        _positive,
        5000,
        "how long a write waits for its standbys before it fails UNAVAILABLE",
        "MS",
    ),
    Setting(
        "allow_async",
        _bool,
        False,
        "answer writes without the standbys when they are not there in time (logged; "
        "a failover may then lose acknowledged writes)",
    ),
    Setting(
        "cluster_ca",
        str,
        "",
        "PEM CA that signed the other boards' certificates: this board reaches its primary "
        "with TLS, trusting it, and shows its --tls-cert/--tls-key as a client certificate",
        "FILE",
    ),
    Setting(
        "cluster_cert_cn",
        str,
        "",
        "comma-separated certificate names: the replication service also needs a client "
        "certificate (mutual TLS: --tls-client-ca) with one of these common names",
        "CN[,CN...]",
    ),
    Setting("log_keep", _positive, 10_000, "log entries a primary keeps at least", "N"),
    Setting(
        "log_limit",
        _positive,
        1_000_000,
        "log entries a primary keeps at most, for standbys that are behind",
        "N",
    ),
    # -- a cluster (docs/cluster.md) --
    Setting(
        "cluster",
        str,
        "",
        "run as a board of this cluster: leadership through etcd (--etcd), a standby "
        "until elected (needs --replication-token)",
        "NAME",
    ),
    Setting("etcd", str, "", "the cluster's etcd members", "URL[,URL...]"),
    Setting(
        "advertise",
        str,
        "",
        "the address the cluster's clients and boards reach this board at (default: "
        "the address it listens on)",
        "HOST:PORT",
    ),
    Setting(
        "board_name",
        str,
        "",
        "this board's name in its cluster (default: the advertised address, ':' as '-')",
        "NAME",
    ),
    Setting(
        "lease_ttl",
        _positive,
        3,
        "seconds a cluster's primary leads without renewing its etcd lease (2 at least)",
        "S",
    ),
    Setting(
        "log_pin_seconds",
        _positive,
        3600,
        "how long a primary keeps log entries for a standby that went away (it is "
        "seeded again if it comes back later)",
        "S",
    ),
    Setting(
        "ready_file",
        str,
        "",
        "written (JSON: pid and addresses) once the board serves, removed when it stops",
        "FILE",
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


@dataclasses.dataclass(frozen=True, slots=True)
class ServeConfig:
    """Every serve setting, resolved. Field names are the settings' names."""

    data: str = DEFAULT_DATA
    listen: str = DEFAULT_LISTEN
    sync: str = "fsync"
    max_message_bytes: int = 4 * 1024 * 1024
    max_credit: int = 10_000
    max_outstanding_bytes: int = 32 * 1024 * 1024
    max_read_ahead_bytes: int = 16 * 1024 * 1024
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    users: str = ""
    snapshot_dir: str = ""
    init: bool = False
    accept_rollback: bool = False
    insecure: bool = False
    max_streams: int = 64
    max_waits: int = 64
    max_consumers: int = 32
    metrics_listen: str = ""
    log_format: str = "text"
    log_level: str = "info"
    access_log: str = ""
    ready_file: str = ""
    replication_token: str = ""
    standby_of: str = ""
    sync_standbys: int = 1
    sync_timeout_ms: int = 5000
    allow_async: bool = False
    cluster_ca: str = ""
    cluster_cert_cn: str = ""
    log_keep: int = 10_000
    log_limit: int = 1_000_000
    cluster: str = ""
    etcd: str = ""
    advertise: str = ""
    board_name: str = ""
    lease_ttl: int = 3
    log_pin_seconds: int = 3600

    @property
    def cluster_cns(self) -> tuple[str, ...]:
        """The names of ``cluster_cert_cn``."""
        return tuple(n.strip() for n in self.cluster_cert_cn.split(",") if n.strip())

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("tls_cert and tls_key go together: give both or neither")
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("tls_client_ca (mutual TLS) needs tls_cert and tls_key")
        if self.standby_of and not self.replication_token:
            raise ConfigError("standby_of needs replication_token: the primary asks for it")
        if self.cluster_cert_cn and not self.tls_client_ca:
            raise ConfigError(
                "cluster_cert_cn needs tls_client_ca: the names are checked on client "
                "certificates, which only mutual TLS asks for"
            )
        if self.cluster:
            if not self.replication_token:
                raise ConfigError("cluster needs replication_token: its boards replicate")
            if not self.etcd:
                raise ConfigError("cluster needs etcd: the members of its etcd (URL[,URL...])")
            if self.standby_of:
                raise ConfigError("cluster and standby_of go apart: a cluster elects its primary")
            if self.lease_ttl < 2:
                raise ConfigError("lease_ttl must be at least 2 (etcd's shortest lease)")
        elif self.etcd or self.advertise or self.board_name:
            raise ConfigError("etcd, advertise and board_name need cluster")


def add_flags(p: argparse.ArgumentParser) -> None:
    """``msgboard serve``'s options, one per setting, plus ``--config``.
    Every default is None, so that ``load`` can tell a flag given."""
    p.add_argument("--config", metavar="FILE", help="a TOML file of these settings")
    for s in SETTINGS:
        env = f" [env {s.env}; default {s.default!r}]" if s.default != "" else f" [env {s.env}]"
        if s.parse is _bool:
            p.add_argument(s.flag, action="store_true", default=None, help=s.help + env)
        else:
            more: dict[str, Any] = {} if s.const is None else {"nargs": "?", "const": s.const}
            p.add_argument(s.flag, metavar=s.metavar, default=None, help=s.help + env, **more)


def load(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    file: str | os.PathLike[str] | None = None,
) -> ServeConfig:
    """The configuration from ``flags`` (setting name -> the flag's text, or
    None when not given), ``env`` (default: ``os.environ``) and the TOML
    ``file`` (default: ``$MSGBOARD_CONFIG``). Raises ConfigError naming the
    setting and where it came from."""
    flags = flags or {}
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = file or env.get(ENV_PREFIX + "CONFIG")
    if path:
        values.update(_read_file(Path(path)))
    for s in SETTINGS:
        if s.env in env:
            values[s.name] = _parse(s, env[s.env], s.env)
    for name, text in flags.items():
        if text is not None and name in BY_NAME:
            s = BY_NAME[name]
            values[name] = text if isinstance(text, bool) else _parse(s, str(text), s.flag)
    return ServeConfig(**values)


def _parse(s: Setting, text: str, where: str) -> Any:
    try:
        return s.parse(text)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None


def read_toml(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """The TOML document in ``path``; ConfigError naming ``what`` file it is,
    the path and the line, if it cannot be read or parsed."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{what} {path}: {e}") from None


def _read_file(path: Path) -> dict[str, Any]:
    doc = read_toml(path, "config file")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        s = BY_NAME.get(key)
        if s is None:
            known = ", ".join(BY_NAME)
            raise ConfigError(f"config file {path}: unknown key {key!r} (known: {known})")
        out[key] = s.check(value, f"config file {path}")
    return out
