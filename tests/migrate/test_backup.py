"""The Coordinator's database backed up as the postgresql_access role schedules it, on the
lab's database host: the timer waits for its next run, its service sandboxed; a run (the
service the timer starts) writes one whole dump that only postgres reads, records it (the
Coordinator's metric shows it), keeps the newest postgresql_access_backup_keep and removes
older ones and any dump left half written; that
dump, restored into a fresh PostgreSQL, holds every task the live database had, as it had
it; restored in place as docs/operating.md says (the Coordinator stopped, one transaction),
the cluster serves again and site.yml finds nothing to change in the database."""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import requests
import yaml

from lab import drive
from lab.drive import REPO
from lab.throwaway import ThrowawayPostgres, wait_for_port, wait_until

from .test_hardening import BOUNDS, EXPOSURE

DEFAULTS = yaml.safe_load((REPO / "roles/postgresql_access/defaults/main.yml").read_text())
DIRECTORY = DEFAULTS["postgresql_access_backup_dir"]
KEEP = DEFAULTS["postgresql_access_backup_keep"]
DATABASE = DEFAULTS["postgresql_access_database"]
UNIT = "coordinator-backup"
# Each task as id|hash of the whole row (a result may hold newlines).
ROWS = "SELECT id, md5(tasks::text) FROM tasks ORDER BY id"
# Dumps of an earlier January, named as the script names them: the oldest goes once a new
# one makes KEEP + 1.
OLD = [f"{DATABASE}-202001{day:02d}T033000Z.dump" for day in range(1, KEEP + 1)]
HALF_WRITTEN = f"{DATABASE}-20191231T033000Z.dump.partial"


def live_rows(node: drive.Node) -> list[str]:
    return node.sh("psql", "-X", "-A", "-t", "-d", DATABASE, "-c", ROWS, user="postgres",
                   check=True).stdout.splitlines()


@contextlib.contextmanager
def scheduled_runs_held(node: drive.Node) -> Iterator[None]:
    """The backup timer stopped, and a run it started finished, for the time of the block:
    its daily run (03:30 UTC and up to 15 min more, the role's defaults) falls within the
    suite at some hours and would race the run a test starts (2026-12-07 03:44: two dumps).
    Started again after."""
    node.sh("systemctl", "stop", f"{UNIT}.timer", check=True)
    try:
        wait_until(lambda: node.sh("systemctl", "is-active", f"{UNIT}.service").stdout.strip()
                   != "activating", 300, "the timer's run of the backup finished")
        yield
    finally:
        node.sh("systemctl", "start", f"{UNIT}.timer", check=True)


def test_a_scheduled_dump_keeps_the_newest_and_restores_every_task_into_a_fresh_postgresql(
        cluster, tmp_path) -> None:
    node = cluster.nodes["lab-ai-core"]
    shown = node.sh("systemctl", "show", f"{UNIT}.timer", "--property=ActiveState",
                    "--property=UnitFileState", "--property=NextElapseUSecRealtime",
                    check=True).stdout
    timer = dict(line.split("=", 1) for line in shown.splitlines())
    assert (timer["ActiveState"], timer["UnitFileState"]) == ("active", "enabled"), timer
    assert timer["NextElapseUSecRealtime"], timer  # a next run is scheduled
    # Sandboxed as the Coordinator's own service is (systemd-analyze scores a unit not running).
    report = node.sh("systemd-analyze", "security", "--no-pager", f"{UNIT}.service",
                     check=True).stdout
    assert float(EXPOSURE.search(report).group(2)) <= BOUNDS["coordinator.service"], report
    with scheduled_runs_held(node):
        # The directory holds the dumps laid down here only (one the timer made earlier in
        # the lab's life would be the newest kept).
        node.sh("find", DIRECTORY, "-mindepth", "1", "-delete", check=True)
        for name in [*OLD, HALF_WRITTEN]:
            node.sh("install", "-o", "postgres", "-g", "postgres", "-m", "0600", "/dev/null",
                    f"{DIRECTORY}/{name}", check=True)

        before = live_rows(node)
        assert before, "the lab's earlier tests routed tasks"
        node.sh("systemctl", "start", f"{UNIT}.service", check=True)  # oneshot: returns when done
        after = live_rows(node)

        found = dict(line.split(" ", 1) for line in node.sh(
            "find", DIRECTORY, "-mindepth", "1", "-printf", r"%f %u:%g %m\n", check=True
        ).stdout.splitlines())
        journal = node.sh("journalctl", "--unit", f"{UNIT}.service", "--output=cat",
                          "--no-pager", check=True).stdout
    made = sorted(set(found) - set(OLD))
    assert len(made) == 1 and re.fullmatch(rf"{DATABASE}-\d{{8}}T\d{{6}}Z\.dump", made[0]), found
    assert sorted(found) == sorted([*OLD[1:], *made]), found
    assert set(found.values()) == {"postgres:postgres 600"}, found
    assert node.sh("stat", "--format=%U:%G %a", DIRECTORY, check=True).stdout.split() == [
        "postgres:postgres", "700"]
    assert f"dumped {DATABASE} to {DIRECTORY}/{made[0]} (" in journal, journal
    assert f"removed {OLD[0]} (the newest {KEEP} are kept)" in journal, journal

    # Recorded: the Coordinator's metric is the dump's end (its scrape caches 2 s).
    def last_backup() -> float | None:
        scrape = requests.get(f"{cluster.coordinator.url}/metrics", timeout=10,
                              headers=cluster.coordinator.headers,
                              verify=cluster.coordinator.verify)
        scrape.raise_for_status()
        found = re.search(r"^coordinator_backup_last_success_timestamp_seconds (\S+)$",
                          scrape.text, re.M)
        return float(found.group(1)) or None
    assert time.time() - 120 < wait_until(last_backup, 10, "the dump in the metrics") <= time.time()

    dump = subprocess.run(["podman", "exec", node.container, "cat", f"{DIRECTORY}/{made[0]}"],
                          env=drive.env(), capture_output=True, check=True).stdout
    with ThrowawayPostgres() as fresh:
        restored = fresh.restore(dump, "restored")
        assert restored.returncode == 0, restored.stderr
        rows = fresh.psql(ROWS, db="restored").splitlines()
    # Every task the live database had when the dump began and none it did not have once it
    # ended; each row as it was where it did not change meanwhile.
    ids = [{row.split("|", 1)[0] for row in taken} for taken in (before, rows, after)]
    assert ids[0] <= ids[1] <= ids[2], [len(each) for each in ids]
    assert set(before) & set(after) <= set(rows)

    # Back on the database host, as docs/operating.md says, with the cluster's roles.
    node.sh("systemctl", "stop", "coordinator.service", check=True)
    try:
        put_back = node.sh("pg_restore", "--clean", "--if-exists", "--single-transaction",
                           "--exit-on-error", "-d", DATABASE, f"{DIRECTORY}/{made[0]}",
                           user="postgres")
    finally:
        node.sh("systemctl", "start", "coordinator.service", check=True)
    assert put_back.returncode == 0, put_back.stderr
    assert set(before) & set(after) <= set(live_rows(node))
    api = urlsplit(cluster.coordinator.url)
    wait_for_port(api.port, 60, "the Coordinator", host=api.hostname)
    task = cluster.coordinator.finished(cluster.coordinator.route(), time.monotonic() + 120)
    assert task["status"] == "done", task
    # The database as site.yml makes it: its roles, grants and schema owners came back
    # whole. (The rest of the cluster is as the earlier tests left it: another model, say.)
    # The registry is the dump's until each worker's next heartbeat after the Coordinator
    # answers again (docs/operating.md); site.yml's registry check waits for it too, but the
    # web worker's host must be known before (2026-12-06 23:58: none alive yet).
    web = wait_until(lambda: cluster.coordinator.alive_web_workers(), 60,
                     "the web worker alive again after the restore")
    again = cluster.playbooks.run("site.yml", cluster.inventory(cluster.node_of(web[0]["host"])))
    assert again.returncode == 0, again.output[-5000:]
    assert {task for tasks in again.changed_tasks().values() for task in tasks
            if task.startswith("postgresql_access :")} == set(), again.changed_tasks()
