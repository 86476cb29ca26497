"""What the Coordinator says when a backend fails: one line each, naming what to check."""

from __future__ import annotations

import psycopg
import psycopg_pool
from coordinator_contract import first_line, redis_tls_problem
from redis.exceptions import AuthenticationError, NoPermissionError, RedisError

from .config import Config


class StartupError(Exception):
    """A backend refused us at start; the message is one line saying what to check."""


def backend_error(exc: BaseException, cfg: Config) -> str | None:
    """A one-line message when ``exc`` means a backend is down, else None."""
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError,
                        psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)):
        return (f"PostgreSQL at {cfg.pg_address} is not answering ({first_line(exc)}): "
                "retry when GET /health says ok")
    if isinstance(exc, RedisError | ConnectionError):
        return (f"Redis at {cfg.redis_address} is not answering ({first_line(exc)}): "
                "retry when GET /health says ok")
    return None


def pg_login_message(exc: BaseException, cfg: Config) -> str:
    """Explain a failed PostgreSQL connection at start."""
    text = first_line(exc)
    lowered = str(exc).lower()
    who = f"user '{cfg.pg_user}' to database '{cfg.pg_dbname}'"
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return (f"PostgreSQL at {cfg.pg_address} refused the login of {who}: {text}. Check "
                "the user and password in PG_DSN")
    if "pg_hba.conf" in lowered:
        return (f"PostgreSQL at {cfg.pg_address} refused the login of {who}: {text}. Check "
                "the server's pg_hba.conf allows this host, user and database")
    if "does not exist" in lowered:
        return (f"PostgreSQL at {cfg.pg_address} refused the login of {who}: {text}. Check "
                "the user and dbname in PG_DSN, or create them")
    if "permission denied" in lowered:
        return (f"PostgreSQL at {cfg.pg_address}: {who} may not create the schema: {text}. "
                "Make the user the owner of the database")
    return (f"cannot connect to PostgreSQL at {cfg.pg_address}: {text}. Check PG_DSN's host "
            "and port and that the server is running")


def redis_message(exc: BaseException, cfg: Config) -> str:
    text = first_line(exc).rstrip(".")
    # First: a TLS error's text can hold "auth" (certificate authority).
    tls_problem = redis_tls_problem(text, cfg.redis_ca_file)
    if tls_problem:
        return f"cannot connect to Redis at {cfg.redis_address}: {text}. {tls_problem}"
    if isinstance(exc, NoPermissionError) or "noperm" in str(exc).lower():
        return (f"Redis at {cfg.redis_address} refused a command of user '{cfg.redis_user}': "
                f"{text}. Check REDIS_USERNAME names the Coordinator's user "
                "(the redis role's redis_coordinator_user), and run site.yml so the redis "
                "role grants it")
    if isinstance(exc, AuthenticationError) or "auth" in str(exc).lower():
        return (f"Redis at {cfg.redis_address} refused the login of user "
                f"'{cfg.redis_user}': {text}. Check REDIS_USERNAME and "
                "REDIS_PASSWORD (the redis role's coordinator user and the password derived "
                "for it), or that the user is not disabled")
    return (f"cannot connect to Redis at {cfg.redis_address}: {first_line(exc)}. Check "
            "REDIS_HOST and REDIS_PORT and that the server is running")
