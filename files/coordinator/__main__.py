"""``python -m coordinator`` (run from ``files/``): check the configuration and backends,
create or upgrade the schema, then serve the API with uvicorn (uvloop, httptools).

``python -m coordinator status`` shows a running Coordinator's workers, queues and latest
failures instead (``status_cli``)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import resource
import socket
import ssl
import sys

import uvicorn

from . import __version__, status_cli
from .app import create_app
from .config import Config, ConfigError, load_config
from .errors import StartupError
from .service import preflight


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit; return the soft limit now.

    Every connection holds a file descriptor, and a long-poll holds its connection for up to
    a minute. systemd (and most shells) start programs with a soft limit of 1024 below a
    far higher hard limit, which programs that need more are meant to raise themselves; at
    the soft limit the event loop accepts and closes new connections at once, so clients
    would see resets instead of answers."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft
    return hard


def main() -> int:
    if sys.argv[1:2] == ["status"]:
        return status_cli.main(sys.argv[2:], os.environ)
    try:
        cfg = load_config(os.environ)
    except ConfigError as exc:
        print(f"coordinator: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=cfg.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(preflight(cfg))
    except StartupError as exc:
        print(f"coordinator: {exc}", file=sys.stderr)
        return 1
    try:
        check_tls_files(cfg)
        sockets = [listening_socket(address, cfg.port) for address in cfg.bind_addresses]
        sockets += [listening_socket(address, cfg.port, held_or_not=True)
                    for address in cfg.virtual_addresses]
    except (OSError, StartupError) as exc:
        print(f"coordinator: {exc}", file=sys.stderr)
        return 1
    logging.getLogger("coordinator").info(
        "coordinator %s listening on %s, %s (open-file limit %d)", __version__,
        ", ".join(f"{a}:{cfg.port}" if ":" not in a else f"[{a}]:{cfg.port}"
                  for a in cfg.bind_addresses + cfg.virtual_addresses),
        "HTTPS" if cfg.tls_cert else "plain HTTP", raise_open_file_limit())
    server = uvicorn.Server(uvicorn.Config(
        create_app(cfg), loop="uvloop", http="httptools", access_log=False,
        server_header=False, log_config=None, backlog=4096, timeout_keep_alive=30,
        proxy_headers=False, ssl_certfile=cfg.tls_cert, ssl_keyfile=cfg.tls_key,
    ))
    server.run(sockets=sockets)
    return 0


def check_tls_files(cfg: Config) -> None:
    """Load the HTTPS certificate and key as uvicorn will, so a missing or unreadable file
    or a key of another certificate is one line naming the file, not a traceback."""
    if cfg.tls_cert is None or cfg.tls_key is None:
        return
    for name, path in (("COORDINATOR_TLS_CERT", cfg.tls_cert),
                       ("COORDINATOR_TLS_KEY", cfg.tls_key)):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise StartupError(f"{name} {path}: cannot read it ({exc.strerror}): run site.yml, "
                          "which puts the cluster's certificate and key there, and check "
                          "that the service's user is in the group ssl-cert") from None
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            cfg.tls_cert, cfg.tls_key)
    except ssl.SSLError as exc:
        raise StartupError(f"COORDINATOR_TLS_CERT {cfg.tls_cert} and COORDINATOR_TLS_KEY "
                           f"{cfg.tls_key} do not load together ({exc.reason or exc}): "
                           "they must be one certificate and its own key") from None


# Linux's IP_FREEBIND (linux/in.h; the socket module names it from Python 3.12 only).
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


def listening_socket(address: str, port: int, held_or_not: bool = False) -> socket.socket:
    """A TCP socket bound to ``address``:``port``; with ``held_or_not``, also while this host
    does not hold the address (IP_FREEBIND: a virtual address, answered here once it comes);
    OSError says which one failed and why."""
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        # "::" next to "0.0.0.0" in the list: each family its own socket.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    if held_or_not:
        sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        setting = "COORDINATOR_VIRTUAL_ADDRESS" if held_or_not else (
            "COORDINATOR_BIND (an address of this host)")
        raise OSError(f"cannot listen on {address} port {port} ({exc.strerror}): check "
                      f"{setting} and COORDINATOR_PORT (not in use)") from None
    return sock


if __name__ == "__main__":
    sys.exit(main())
