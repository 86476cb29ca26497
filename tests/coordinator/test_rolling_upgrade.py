"""A rolling upgrade between two versions of this repository.

The Coordinator of schema version 10 (``coordinator-schema-10.tar.gz``: ``git archive
887690ad2e83efabfc8877ba9a6a1f397aaf0db9 files/coordinator files/coordinator_contract.py
files/coordinator_sql.py``, the commit before tasks.options) serves an empty database while
tasks are routed through it without pause; this repository's Coordinator starts beside it on
the same database and Redis, migrates the schema (versions 11 and 12: a column added to the
tasks every request writes, a table) and serves too; then the old one stops, as the second
host of a rolling upgrade would. Neither fails a request because of the other, and every task
either routed is answered by a worker of this version.
"""

from __future__ import annotations

import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from coordinator.schema import LATEST_VERSION
from lab.throwaway import ThrowawayPostgres, ThrowawayRedis, free_port

from .coordkit import Backends, FakeWorker, coordinator_process, wait_for
from .test_coordinator_process import stop, wait_healthy

PREVIOUS = Path(__file__).with_name("coordinator-schema-10.tar.gz")
PREVIOUS_SCHEMA = 10
TOKEN = "rolling-token"


class Traffic:
    """POST /route every 20 ms to each Coordinator in ``urls`` in turn (a list the test
    changes as instances come and go), keeping every answer."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.answers: list[tuple[str, int, str]] = []
        self.routed: dict[str, str] = {}  # task id -> the URL that routed it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(headers=headers, timeout=30) as client:
            turn = 0
            while not self._stop.wait(0.02):
                urls = list(self.urls)
                url = urls[turn % len(urls)]
                turn += 1
                body = {"prompt": f"question {turn}", "task_type": "web_search"}
                try:
                    resp = client.post(url + "/route", json=body)
                except httpx.HTTPError as error:
                    self.answers.append((url, 0, repr(error)))
                    continue
                self.answers.append((url, resp.status_code, resp.text[:300]))
                if resp.status_code == 201:
                    self.routed[resp.json()["task_id"]] = url

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def routed_by(self, url: str) -> int:
        return sum(1 for by in self.routed.values() if by == url)

    def routed_without_failure(self) -> int:
        """How many tasks were routed; an AssertionError naming the first request that was
        not answered 201."""
        failed = [answer for answer in self.answers if answer[1] != 201]
        assert failed == [], f"{len(failed)} requests failed, the first: {failed[0]}"
        return len(self.routed)


def schema_version(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT max(version) FROM coordinator_schema").fetchone()[0]


@pytest.fixture
def previous_files(tmp_path: Path) -> Path:
    with tarfile.open(PREVIOUS) as archive:
        archive.extractall(tmp_path)  # this repository's own archive
    return tmp_path / "files"


@pytest.fixture
def rolling(pg: ThrowawayPostgres) -> Iterator[Backends]:
    """An empty database (no schema: the old Coordinator makes its own) and a Redis."""
    with ThrowawayRedis() as rds:
        yield Backends.create(pg, rds, "coordinator_rolling", schema=False)


def test_a_rolling_upgrade_migrates_while_the_old_version_serves_and_fails_no_request(
        previous_files: Path, rolling: Backends) -> None:
    ports = {"old": free_port(), "new": free_port()}
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    procs: dict[str, subprocess.Popen] = {}
    try:
        procs["old"] = coordinator_process(rolling.env(
            COORDINATOR_PORT=str(ports["old"]), COORDINATOR_TOKEN=TOKEN), files=previous_files)
        wait_healthy(urls["old"], procs["old"])
        assert schema_version(rolling.dsn) == PREVIOUS_SCHEMA
        with Traffic() as traffic:
            traffic.urls[:] = [urls["old"]]
            wait_for(lambda: traffic.routed_without_failure() >= 20, 30, 0.05,
                     "tasks routed through the old Coordinator")
            procs["new"] = coordinator_process(rolling.env(
                COORDINATOR_PORT=str(ports["new"]), COORDINATOR_TOKEN=TOKEN))
            wait_healthy(urls["new"], procs["new"])
            assert schema_version(rolling.dsn) == LATEST_VERSION
            # Both serve the migrated schema, in turn, for a while.
            traffic.urls[:] = [urls["old"], urls["new"]]
            before = len(traffic.routed)
            wait_for(lambda: traffic.routed_without_failure() >= before + 40, 30, 0.05,
                     "tasks routed through both Coordinators")
            # The old host's turn to be upgraded: stopped, the new one serves alone.
            traffic.urls[:] = [urls["new"]]
            # Two answers more: a request to the old one that was on its way has its answer.
            sent = len(traffic.answers)
            wait_for(lambda: len(traffic.answers) >= sent + 2, 30, 0.02,
                     "the requests on their way when the old Coordinator was left out")
            old_code, old_log = stop(procs.pop("old"))
            before = len(traffic.routed)
            wait_for(lambda: traffic.routed_without_failure() >= before + 20, 30, 0.05,
                     "tasks routed through the new Coordinator alone")
        # A task the new version routes carries its options, which the old schema lacked.
        with httpx.Client(base_url=urls["new"], timeout=10,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            resp = client.post("/route", json={"prompt": "with options", "task_type":
                                               "web_search", "options": {"num_predict": 8}})
            assert resp.status_code == 201, resp.text
            with_options = resp.json()["task_id"]
            assert client.get(f"/task/{with_options}").json()["options"] == {"num_predict": 8}

        traffic.routed_without_failure()
        assert min(traffic.routed_by(url) for url in urls.values()) >= 20
        assert "Traceback" not in old_log, old_log[-3000:]

        # A worker of this version answers every task either Coordinator routed.
        worker = FakeWorker(rolling, urls["new"], "web-worker-rolling", kind="web",
                            token=TOKEN).start()
        try:
            expected = {*traffic.routed, with_options}
            while task_id := worker.take(timeout=1):
                assert worker.finish(task_id, worker.claim(task_id))
        finally:
            worker.close()
        done = {row[0] for row in rolling.sql(
            "SELECT id::text FROM tasks WHERE status = 'done'")}
        assert done == expected
        assert old_code in (0, -15), old_log[-3000:]
    finally:
        for proc in procs.values():
            stop(proc)
