"""Throwaway PostgreSQL and Redis servers in temporary directories, for tests and benchmarks.

They run Debian's own binaries (``initdb``/``pg_ctl`` from the postgresql package,
``redis-server``) on free loopback ports, never touch a server already running on the
machine, and delete everything on ``destroy()``; as context managers they start on entry and
are destroyed on exit. PostgreSQL refuses to run as root, so when the
caller is root the cluster runs as the ``postgres`` system user the package creates.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from coordinator_contract import WORKER_DB_GROUP

REPO = Path(__file__).resolve().parent.parent

DB_NAME = "coordinator"
DB_USER = "coordinator"


def ship_worker_programs(dest: Path) -> None:
    """Copy into ``dest`` what the worker role ships to a node (its default worker_files),
    so a test starts a worker the way a node runs it."""
    import yaml

    defaults = yaml.safe_load((REPO / "roles" / "worker" / "defaults" / "main.yml").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    for name in defaults["worker_files"]:
        shutil.copy(REPO / "files" / name, dest / name)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pg_bindir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if not candidates:
        raise RuntimeError(
            "PostgreSQL server binaries not found: run 'apt-get install postgresql' first"
        )
    return Path(candidates[0]).parent


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str = "condition", interval: float = 0.1
) -> Any:
    """Poll ``predicate`` until it returns something truthy and return that; after ``timeout``
    seconds raise TimeoutError naming ``what``. Shared by the test suites and benchmarks."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def wait_for_port(port: int, timeout: float, what: str, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout:.0f}s")


class _Throwaway:
    """Start on ``with``, destroy at its end."""

    def start(self) -> Self:
        raise NotImplementedError

    def destroy(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.destroy()
            raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.destroy()


class ThrowawayPostgres(_Throwaway):
    """A PostgreSQL cluster with a ``coordinator`` database and login role.

    ``fast=True`` turns off fsync for tests; benchmarks keep the durable defaults.
    """

    def __init__(self, password: str = "coordinator-test-password", fast: bool = True) -> None:
        self.password = password
        self.fast = fast
        self.port = free_port()
        self.bindir = _pg_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="throwaway-pg-"))
        self.datadir = self.root / "data"
        self.sockdir = self.root / "sock"
        self._run_as = None if os.geteuid() != 0 else pwd.getpwnam("postgres")

    # -- addresses -------------------------------------------------------------------------
    @property
    def dsn(self) -> str:
        """libpq DSN of the ``coordinator`` role over TCP, as a worker would use it."""
        return (
            f"host=127.0.0.1 port={self.port} dbname={DB_NAME} user={DB_USER} "
            f"password={self.password}"
        )

    @property
    def admin_dsn(self) -> str:
        """Superuser DSN over the private Unix socket."""
        return f"host={self.sockdir} port={self.port} dbname={DB_NAME} user=postgres"

    # -- lifecycle -------------------------------------------------------------------------
    def _as_owner(self) -> dict[str, int]:
        """subprocess.run's user and group for the server's own account (postgres, when
        the tests run as root)."""
        if self._run_as is None:
            return {}
        return {"user": self._run_as.pw_uid, "group": self._run_as.pw_gid}

    def _cmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), check=check, capture_output=True, text=True, cwd="/", **self._as_owner()
        )

    def start(self) -> ThrowawayPostgres:
        if not self.datadir.exists():
            self._init()
        self._cmd(
            str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l",
            str(self.root / "server.log"), "-w", "-t", "60", "start",
        )
        wait_for_port(self.port, 30, "PostgreSQL")
        return self

    def _init(self) -> None:
        self.sockdir.mkdir(parents=True, exist_ok=True)
        if self._run_as is not None:
            os.chown(self.root, self._run_as.pw_uid, self._run_as.pw_gid)
            os.chown(self.sockdir, self._run_as.pw_uid, self._run_as.pw_gid)
        pwfile = self.root / "pwfile"
        pwfile.write_text("postgres-admin\n")
        pwfile.chmod(0o600)
        if self._run_as is not None:
            os.chown(pwfile, self._run_as.pw_uid, self._run_as.pw_gid)
        self._cmd(
            str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", "postgres",
            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
            "--locale=C.UTF-8", f"--pwfile={pwfile}",
        )
        settings = [
            f"port = {self.port}",
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.sockdir}'",
            "max_connections = 300",
            "password_encryption = 'scram-sha-256'",
        ]
        if self.fast:
            settings += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with open(self.datadir / "postgresql.conf", "a") as conf:
            conf.write("\n".join(settings) + "\n")
        self.write_hba(["host all all 127.0.0.1/32 scram-sha-256"])
        self._cmd(
            str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l",
            str(self.root / "server.log"), "-w", "start",
        )
        self.psql(f"CREATE ROLE {DB_USER} LOGIN PASSWORD '{self.password}'", db="postgres")
        self.psql(f"CREATE DATABASE {DB_NAME} OWNER {DB_USER}", db="postgres")
        # The workers' group role, which the schema grants to (the postgresql_access role
        # makes it on a real cluster).
        self.psql(f"CREATE ROLE {WORKER_DB_GROUP} NOLOGIN", db="postgres")
        self._cmd(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-w", "stop")

    def write_hba(self, network_lines: list[str]) -> None:
        """Replace pg_hba.conf: local superuser access plus the given network lines."""
        text = "local all postgres trust\n" + "\n".join(network_lines) + "\n"
        hba = self.datadir / "pg_hba.conf"
        hba.write_text(text)
        if self._run_as is not None:
            os.chown(hba, self._run_as.pw_uid, self._run_as.pw_gid)

    def reload(self) -> None:
        self._cmd(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "reload")

    def stop(self, mode: str = "fast") -> None:
        self._cmd(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", mode,
                  "-w", "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        self.stop(mode="immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def database(self, name: str) -> str:
        """(Re)create database ``name``, empty and owned by the coordinator role; its DSN."""
        self.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", db="postgres")
        self.psql(f"CREATE DATABASE {name} OWNER {DB_USER}", db="postgres")
        return self.dsn.replace(f"dbname={DB_NAME} ", f"dbname={name} ")

    def restore(self, dump: bytes, db: str) -> subprocess.CompletedProcess[str]:
        """pg_restore of a custom-format ``dump`` (read from stdin) into the new database
        ``db``, as the superuser, without the dump's owners and grants (roles of another
        cluster); its output, with the error count pg_restore ends with, is returned."""
        self.psql(f'CREATE DATABASE "{db}"', db="postgres")
        done = subprocess.run(
            [str(self.bindir / "pg_restore"), "--no-owner", "--no-privileges", "--exit-on-error",
             "-h", str(self.sockdir), "-p", str(self.port), "-U", "postgres", "-d", db],
            input=dump, capture_output=True, check=False, cwd="/", **self._as_owner())
        return subprocess.CompletedProcess(done.args, done.returncode,
                                           done.stdout.decode(), done.stderr.decode())

    def psql(self, sql: str, db: str = DB_NAME) -> str:
        """Run SQL as the superuser; return psql's unaligned output."""
        out = self._cmd(
            str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
            "-h", str(self.sockdir), "-p", str(self.port), "-U", "postgres", "-d", db,
            "-c", sql,
        )
        return out.stdout.strip()


@dataclass(frozen=True)
class Certificates:
    """A CA and a server certificate from it, as cluster_tls makes them for a host."""
    ca: Path
    cert: Path
    key: Path


def make_certificates(directory: Path, ca_name: str = "throwaway CA",
                      address: str = "127.0.0.1") -> Certificates:
    """With openssl: a CA in ``directory`` and a server certificate from it naming
    ``address`` (IP SAN), each key P-256, valid one day."""
    directory.mkdir(parents=True, exist_ok=True)
    found = Certificates(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    ca_key = directory / "ca.key"

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(ca_key), "-out", str(found.ca), "-days", "1", "-subj", f"/CN={ca_name}")
    csr = directory / "server.csr"
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(found.key), "-out", str(csr), "-subj", f"/CN={address}")
    extensions = directory / "server.ext"
    extensions.write_text(f"subjectAltName=IP:{address}\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(found.ca), "-CAkey", str(ca_key),
            "-out", str(found.cert), "-days", "1", "-extfile", str(extensions))
    return found


class ThrowawayRedis(_Throwaway):
    """A redis-server on a free loopback port with a password and a temporary directory.

    With ``acl_lines`` (the redis role's ACL file lines) it has those users, in an aclfile as
    the role writes it, instead of ``requirepass``; ``password`` is then nobody's. With
    ``tls`` it serves TLS only on its port with that certificate, as the role configures it."""

    def __init__(self, password: str = "redis-test-password",
                 acl_lines: Sequence[str] | None = None, tls: Certificates | None = None) -> None:
        self.password = password
        self.acl_lines = list(acl_lines) if acl_lines is not None else None
        self.tls = tls
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="throwaway-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server not found: run 'apt-get install redis-server' first")

    def start(self) -> ThrowawayRedis:
        conf = self.root / "redis.conf"
        users = f"requirepass {self.password}\n"
        if self.acl_lines is not None:
            aclfile = self.root / "users.acl"
            aclfile.write_text("".join(f"{line}\n" for line in self.acl_lines))
            aclfile.chmod(0o600)
            users = f"aclfile {aclfile}\n"
        listen = f"port {self.port}\n"
        if self.tls is not None:
            listen = (f"port 0\ntls-port {self.port}\ntls-cert-file {self.tls.cert}\n"
                      f"tls-key-file {self.tls.key}\ntls-auth-clients no\n")
        conf.write_text(
            f"{listen}bind 127.0.0.1\nprotected-mode yes\n"
            f"{users}dir {self.root}\nsave \"\"\nappendonly no\n"
            f"logfile {self.root / 'redis.log'}\n"
        )
        conf.chmod(0o600)
        self.proc = subprocess.Popen(["redis-server", str(conf)], stdout=subprocess.DEVNULL)
        wait_for_port(self.port, 15, "Redis")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def restart_wiped(self) -> None:
        """Stop, forget every key (nothing is persisted), start again on the same port."""
        self.stop()
        self.start()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
