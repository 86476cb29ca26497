"""The PostgreSQL driver the ``coordinator_task`` probe reads the task row with.

The module runs on a target host: the database host has python3-psycopg2 from the PostgreSQL
role, a worker's virtualenv may only have psycopg (3). Take psycopg2 when importable, else
psycopg, behind the few calls the probe needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

NO_DRIVER_MESSAGE = (
    "neither psycopg2 nor psycopg (3) is importable by {python} on this host: install "
    "python3-psycopg2 (Debian) or 'pip install psycopg2-binary' for that interpreter, or set "
    "ansible_python_interpreter to a Python that has one"
)


@dataclass(frozen=True)
class Driver:
    name: str
    module: ModuleType

    @property
    def error(self) -> type[Exception]:
        return self.module.Error

    def parse(self, conninfo: str) -> dict[str, Any]:
        """Connection parameters of a libpq string or URI (to name the target in messages)."""
        if self.name == "psycopg2":
            from psycopg2.extensions import parse_dsn

            return parse_dsn(conninfo)
        from psycopg.conninfo import conninfo_to_dict

        return conninfo_to_dict(conninfo)

    def connect(self, conninfo: str, connect_timeout: int, application_name: str) -> Any:
        """An autocommit connection: each poll sees the rows committed since the last one."""
        conn = self.module.connect(
            conninfo, connect_timeout=connect_timeout, application_name=application_name
        )
        conn.autocommit = True
        return conn


def load_driver() -> Driver | None:
    try:
        import psycopg2

        return Driver("psycopg2", psycopg2)
    except ImportError:
        pass
    try:
        import psycopg

        return Driver("psycopg", psycopg)
    except ImportError:
        return None
