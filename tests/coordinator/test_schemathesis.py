"""The OpenAPI schema tells the truth: schemathesis (pinned in requirements-dev.txt) runs
every check it has (--checks all: status codes, content types, response bodies against
their schemas, schema-valid requests accepted, invalid ones refused, 405 for methods no
endpoint takes, the bearer scheme) over every operation, the stateful phase following the
schema's links, against a real Coordinator process on throwaway PostgreSQL and Redis, with
a fixed seed and a bounded number of examples. It must find nothing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lab.drive import VENV_BIN
from lab.processes import CoordinatorProcess
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis

HERE = Path(__file__).resolve().parent
TOKEN = "schemathesis-token"
#: How long one schemathesis run may take; the test, also starting a Coordinator, a minute
#: more (pytest's default timeout, 300 s in pyproject.toml, would cut it short).
RUN_TIMEOUT = 900

#: The COORDINATOR_* settings (without the prefix) of each run. "production": every token a
#: deployed Coordinator has (roles/coordinator sets all three), so the schema it serves
#: documents the 403s of the metrics token and of the workers' tokens too.
SETTINGS = {
    "with-token": {"token": TOKEN},
    "open": {},
    "production": {"token": TOKEN, "metrics_token": "schemathesis-metrics-token",
                   "worker_token_key": "schemathesis-worker-token-key"},
}


@pytest.mark.timeout(RUN_TIMEOUT + 60)
@pytest.mark.parametrize("name", list(SETTINGS))
def test_schemathesis_finds_nothing(pg: ThrowawayPostgres, coord_redis: ThrowawayRedis,
                                    tmp_path: Path, name: str) -> None:
    settings = SETTINGS[name]
    token = settings.get("token")
    dsn = pg.database("schemathesis")
    with CoordinatorProcess(dsn, coord_redis, tmp_path / "coordinator.log",
                            **settings) as coordinator:
        command = [str(VENV_BIN / "schemathesis"), "run", f"{coordinator.url}/openapi.json",
                   "--checks", "all", "--max-examples", "60", "--seed", "1",
                   "--no-color", "--generation-database", "none"]
        if token:
            command += ["-H", f"Authorization: Bearer {token}"]
        result = subprocess.run(command, cwd=HERE, capture_output=True, text=True,
                                timeout=RUN_TIMEOUT,
                                env={**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert " passed" in output and "failure" not in output, output[-4000:]
    assert "Stateful" in output, output[-4000:]  # the links were followed
