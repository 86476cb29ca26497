"""Configuration, read only from the environment.

``load_config`` is pure (it takes the mapping to read), so tests can feed it any environment.
A missing or bad value raises ``ConfigError`` with one line naming the variable; ``__main__``
prints it and exits with status 2.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg.conninfo
from coordinator_contract import REDIS_CA_FILE_ENV


class ConfigError(Exception):
    """A missing or invalid environment variable; the message is one line naming it."""


#: The bodies COORDINATOR_NOTIFY_FORMAT chooses from (coordinator/notify.body).
NOTIFY_FORMATS = ("ntfy", "discord", "slack", "json")
DSN_EXAMPLE = "host=db.example port=5432 dbname=coordinator user=coordinator password=..."


@dataclass(frozen=True)
class Config:
    pg_dsn: str
    redis_host: str
    redis_port: int = 6379
    redis_password: str | None = None
    # The Redis ACL user (the redis role's coordinator user); None is Redis' default user.
    redis_username: str | None = None
    # The CA certificate of a Redis serving TLS (the cluster CA's); None: plain TCP.
    redis_ca_file: str | None = None
    bind: str = "127.0.0.1"
    # Addresses listened on whether this host holds them or not (a virtual address keepalived
    # moves between the Coordinator hosts): comma-separated; None: none.
    virtual_address: str | None = None
    port: int = 8000
    # The certificate (with its chain) and key the API serves HTTPS with (the cluster CA's,
    # docs/tls.md); None: plain HTTP.
    tls_cert: str | None = None
    tls_key: str | None = None
    token: str | None = None
    # A read-only token accepted for GET /metrics only (a Prometheus scrape), and whether
    # /metrics is open to anyone instead (it is, too, when the Coordinator has no token).
    metrics_token: str | None = None
    metrics_open: bool = False
    # The key worker tokens are derived from (coordinator_contract.worker_token): each one is
    # accepted only for its own worker's registration, heartbeats and goodbye.
    worker_token_key: str | None = None
    heartbeat_ttl: float = 15.0
    web_task_deadline: float = 60.0
    max_attempts: int = 3
    task_timeout: float = 900.0
    max_prompt_bytes: int = 1024 * 1024
    repush_grace: float = 5.0
    pg_pool_size: int = 10
    timeline_retention_days: float = 30.0
    # Worker probes (coordinator/probes.py): how often each worker gets one (0: never), and
    # how long one may take, its wait behind the worker's queued tasks included.
    probe_interval: float = 300.0
    probe_timeout: float = 120.0
    # Notifications (coordinator/notify.py): the URL they are POSTed to (None: none sent; it
    # holds the receiver's secret, so it is never logged or shown but by host), its body's
    # shape, and the least time between two problem notifications of one subject.
    notify_url: str | None = None
    notify_format: str = "json"
    notify_gap: float = 3600.0
    log_level: str = "INFO"

    @property
    def heartbeat_interval(self) -> float:
        """How often workers heartbeat, and how often the Reaper runs."""
        return self.heartbeat_ttl / 3

    @property
    def bind_addresses(self) -> tuple[str, ...]:
        """The addresses to listen on: ``bind`` is one, or several separated by commas
        (a host's LAN address and loopback, rather than every interface)."""
        return split_addresses(self.bind)

    @property
    def virtual_addresses(self) -> tuple[str, ...]:
        """The addresses of ``virtual_address``, listened on before the host holds them."""
        return split_addresses(self.virtual_address) if self.virtual_address else ()

    @property
    def max_body_bytes(self) -> int:
        """Largest POST /route body read: room for a maximal prompt written with JSON escapes."""
        return 6 * self.max_prompt_bytes + 64 * 1024

    @property
    def pg_address(self) -> str:
        return pg_address(self.pg_dsn)

    @property
    def pg_user(self) -> str:
        params = psycopg.conninfo.conninfo_to_dict(self.pg_dsn)
        return str(params.get("user") or "(the OS user)")

    @property
    def pg_dbname(self) -> str:
        params = psycopg.conninfo.conninfo_to_dict(self.pg_dsn)
        return str(params.get("dbname") or params.get("user") or "(default)")

    @property
    def redis_address(self) -> str:
        return f"{self.redis_host}:{self.redis_port}"

    @property
    def redis_user(self) -> str:
        """The Redis user the Coordinator logs in as, for messages."""
        return self.redis_username or "default"


#: Every setting's default, for load_config and for the docs: the one place they live.
DEFAULT = Config(pg_dsn="", redis_host="")


def split_addresses(raw: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(a.strip() for a in raw.split(",") if a.strip()))


def pg_address(dsn: str) -> str:
    """``host:port`` of a libpq DSN, never including the password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unparsable PG_DSN)"
    host = str(params.get("host") or params.get("hostaddr") or "local socket")
    port = str(params.get("port") or "5432")
    return f"{host}:{port}"


def _number(
    env: Mapping[str, str], name: str, default: float, *, integer: bool, minimum: float,
    unit: str,
) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    kind = "an integer" if integer else "a number"
    try:
        value = int(raw.strip()) if integer else float(raw.strip())
    except ValueError:
        raise ConfigError(
            f"{name}={raw!r} is not {kind}: set it to {kind} of {unit} "
            f"(at least {minimum:g}), or unset it for the default {default:g}"
        ) from None
    if not math.isfinite(value) or value < minimum:
        raise ConfigError(
            f"{name}={raw!r} is out of range: set it to at least {minimum:g} {unit}, "
            f"or unset it for the default {default:g}"
        )
    return value


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise ConfigError(
            f"{name}={raw!r} is not a TCP port: use an integer from 1 to 65535 "
            f"(default {default})"
        )
    return value


def _token(env: Mapping[str, str], name: str) -> str | None:
    token = env.get(name) or None
    if token is not None and (token != token.strip() or any(c.isspace() for c in token)):
        raise ConfigError(f"{name} contains whitespace: use a token without spaces or newlines")
    return token


def _backends(env: Mapping[str, str]) -> tuple[str, str]:
    """PG_DSN and REDIS_HOST, both required."""
    dsn = env.get("PG_DSN", "").strip()
    if not dsn:
        raise ConfigError(f"PG_DSN is not set: set it to a libpq DSN, e.g. '{DSN_EXAMPLE}'")
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"PG_DSN is not a valid libpq DSN ({first}): use e.g. '{DSN_EXAMPLE}'"
        ) from None
    redis_host = env.get("REDIS_HOST", "").strip()
    if not redis_host:
        raise ConfigError(
            "REDIS_HOST is not set: set it to the Redis server's host name or address"
        )
    return dsn, redis_host


def _addresses(env: Mapping[str, str], name: str, default: str, example: str) -> str:
    """The comma-separated IP addresses of ``name`` (``default`` when unset)."""
    value = env.get(name, "").strip() or default
    for address in split_addresses(value) if value else ():
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ConfigError(
                f"{name}={value!r}: {address!r} is not an IP address: use one or more, "
                f"separated by commas, e.g. {example}"
            ) from None
    return value


def _tokens(env: Mapping[str, str]) -> dict[str, Any]:
    """The tokens and whether /metrics is open, as Config's fields."""
    token = _token(env, "COORDINATOR_TOKEN")
    metrics_token = _token(env, "COORDINATOR_METRICS_TOKEN")
    if metrics_token is not None and metrics_token == token:
        raise ConfigError(
            "COORDINATOR_METRICS_TOKEN equals COORDINATOR_TOKEN: give the scrape a token of "
            "its own (it is accepted for GET /metrics only), or unset it"
        )
    worker_token_key = _token(env, "COORDINATOR_WORKER_TOKEN_KEY")
    if worker_token_key is not None and token is None:
        raise ConfigError(
            "COORDINATOR_WORKER_TOKEN_KEY is set without COORDINATOR_TOKEN: worker tokens "
            "mean nothing while the API is open; set COORDINATOR_TOKEN too, or unset it"
        )
    metrics_open = (env.get("COORDINATOR_METRICS_OPEN") or "false").strip().lower()
    if metrics_open not in ("true", "false"):
        raise ConfigError(
            f"COORDINATOR_METRICS_OPEN={env.get('COORDINATOR_METRICS_OPEN')!r} is not true or "
            "false: true lets anyone read /metrics, false (the default) asks for a token"
        )
    return {"token": token, "metrics_token": metrics_token,
            "worker_token_key": worker_token_key, "metrics_open": metrics_open == "true"}


def _log_level(env: Mapping[str, str]) -> str:
    log_level = (env.get("COORDINATOR_LOG_LEVEL") or DEFAULT.log_level).strip().upper()
    if log_level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL") or \
            not isinstance(logging.getLevelName(log_level), int):
        raise ConfigError(
            f"COORDINATOR_LOG_LEVEL={env.get('COORDINATOR_LOG_LEVEL')!r} is not a log level: "
            "use debug, info, warning, error or critical"
        )
    return log_level


def _tls(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """COORDINATOR_TLS_CERT and COORDINATOR_TLS_KEY: both or neither."""
    tls_cert = (env.get("COORDINATOR_TLS_CERT") or "").strip() or None
    tls_key = (env.get("COORDINATOR_TLS_KEY") or "").strip() or None
    if (tls_cert is None) != (tls_key is None):
        given, missing = (("COORDINATOR_TLS_CERT", "COORDINATOR_TLS_KEY") if tls_cert
                          else ("COORDINATOR_TLS_KEY", "COORDINATOR_TLS_CERT"))
        raise ConfigError(f"{given} is set without {missing}: HTTPS needs both the "
                          "certificate and its key; set both, or neither for plain HTTP")
    return tls_cert, tls_key


def _notify(env: Mapping[str, str]) -> tuple[str | None, str]:
    """COORDINATOR_NOTIFY_URL (an http or https URL, or unset) and COORDINATOR_NOTIFY_FORMAT.
    A message never quotes the URL: it holds the receiver's secret."""
    url = (env.get("COORDINATOR_NOTIFY_URL") or "").strip() or None
    if url is not None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("COORDINATOR_NOTIFY_URL is not an http:// or https:// URL with "
                              "a host: set the receiver's URL (ntfy topic, webhook), or unset it")
    fmt = (env.get("COORDINATOR_NOTIFY_FORMAT") or DEFAULT.notify_format).strip().lower()
    if fmt not in NOTIFY_FORMATS:
        raise ConfigError(f"COORDINATOR_NOTIFY_FORMAT={env.get('COORDINATOR_NOTIFY_FORMAT')!r} "
                          f"is not a format: use {', '.join(NOTIFY_FORMATS)}")
    return url, fmt


def load_config(env: Mapping[str, str]) -> Config:
    """Build the configuration from ``env`` (usually ``os.environ``)."""
    dsn, redis_host = _backends(env)
    bind = _addresses(env, "COORDINATOR_BIND", DEFAULT.bind, "127.0.0.1,192.168.0.40")
    virtual_address = _addresses(env, "COORDINATOR_VIRTUAL_ADDRESS", "", "192.168.0.50")
    tokens = _tokens(env)
    log_level = _log_level(env)
    tls_cert, tls_key = _tls(env)
    notify_url, notify_format = _notify(env)
    d = DEFAULT
    ttl = _number(env, "COORDINATOR_HEARTBEAT_TTL", d.heartbeat_ttl, integer=False,
                  minimum=0.3, unit="seconds")
    return Config(
        pg_dsn=dsn,
        redis_host=redis_host,
        redis_port=_port(env, "REDIS_PORT", d.redis_port),
        redis_password=env.get("REDIS_PASSWORD") or None,
        redis_username=(env.get("REDIS_USERNAME") or "").strip() or None,
        redis_ca_file=(env.get(REDIS_CA_FILE_ENV) or "").strip() or None,
        bind=bind,
        virtual_address=virtual_address or None,
        port=_port(env, "COORDINATOR_PORT", d.port),
        tls_cert=tls_cert,
        tls_key=tls_key,
        **tokens,
        heartbeat_ttl=ttl,
        web_task_deadline=_number(env, "COORDINATOR_WEB_TASK_DEADLINE", d.web_task_deadline,
                                  integer=False, minimum=0, unit="seconds"),
        max_attempts=int(_number(env, "COORDINATOR_MAX_ATTEMPTS", d.max_attempts, integer=True,
                                 minimum=1, unit="attempts")),
        task_timeout=_number(env, "COORDINATOR_TASK_TIMEOUT", d.task_timeout, integer=False,
                             minimum=0.1, unit="seconds"),
        max_prompt_bytes=int(_number(env, "COORDINATOR_MAX_PROMPT_BYTES", d.max_prompt_bytes,
                                     integer=True, minimum=1, unit="bytes")),
        repush_grace=_number(env, "COORDINATOR_REPUSH_GRACE", d.repush_grace, integer=False,
                             minimum=0, unit="seconds"),
        pg_pool_size=int(_number(env, "COORDINATOR_PG_POOL_SIZE", d.pg_pool_size, integer=True,
                                 minimum=2, unit="connections")),
        timeline_retention_days=_number(env, "COORDINATOR_TIMELINE_RETENTION_DAYS",
                                        d.timeline_retention_days, integer=False, minimum=0,
                                        unit="days"),
        probe_interval=_number(env, "COORDINATOR_PROBE_INTERVAL", d.probe_interval,
                               integer=False, minimum=0, unit="seconds"),
        probe_timeout=_number(env, "COORDINATOR_PROBE_TIMEOUT", d.probe_timeout,
                              integer=False, minimum=0.1, unit="seconds"),
        notify_url=notify_url,
        notify_format=notify_format,
        notify_gap=_number(env, "COORDINATOR_NOTIFY_GAP", d.notify_gap, integer=False,
                           minimum=0, unit="seconds"),
        log_level=log_level,
    )
