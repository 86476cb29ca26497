"""Check mode tells the truth, on the lab of conftest.py as the first converge left it (the
web worker on lab-worker-slow):

1. on the converged cluster, `--check --diff` of migrate-web.yml, drain.yml and
   upgrade-model.yml fails nothing and reports changed=0 on every host (drain.yml asked to
   drain says it would, and drains nothing); site.yml's is the drift run of 3;
2. a move checked (web_workers edited) says what a run would do, in one line where a step
   cannot be known without acting, rolls nothing back and changes nothing;
3. drift made by hand (a pg_hba.conf line removed, an environment file and a unit edited, the
   TLS key and the Redis users' file made world-readable, a worker stopped, a model removed
   from Ollama):
   `site.yml --check --diff` reports each as
   changed, with the diff of each file, its secrets masked, and nothing else on any host,
   and leaves all of it as it is; site.yml then repairs it.

That a no-op run after a repair changes nothing is proven by test_readme.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import coordinator_contract as contract
import pytest
import requests
import yaml

from lab import drive
from lab import prometheus as lab_prometheus
from lab.standins.ollama import DEFAULT_MODEL
from lab.throwaway import wait_until
from tests.filter_kit import cluster as cluster_filters

OLD, NEW = "lab-worker-slow", "lab-macbookair"
DB_HOST = "lab-ai-core"
CHECK = ("--check", "--diff")
UPGRADE = ("-e", "upgrade_model_tasks=6")
# Said only where something was undone or did not start: never by a run that changed nothing.
UNTRUE = ("rolled back", "did not come up", "Roll back -")
WORKER_SERVICES = "worker : Set each worker's service state"
WORKER_RESTART = "worker : Restart the workers whose files or virtualenv changed"
# What site.yml --check reports changed after the drift test's edits, per host: the pg_hba.conf
# line and its reload, the TLS key's mode, the inference worker's environment file and unit
# and so its restart (the database host); the model's pull and the stopped web worker's start
# (the web host).
DRIFT_TASKS = {
    DB_HOST: {"postgresql_access : Configure | one pg_hba.conf line per worker host "
              "(managed block)",
              "postgresql_access : Reload postgresql",
              "cluster_tls : Host | server key",
              "redis : Configure | the ACL users (password hashes only), readable by redis alone",
              "worker : Write the workers' environment files (hold secrets)",
              "worker : Install the workers' systemd units",
              WORKER_RESTART},
    OLD: {"ollama : Pull the models Ollama does not have yet", WORKER_SERVICES},
}


# The alert that no web worker is alive (files/prometheus/coordinator.rules.yml).
NO_WEB_WORKER = "CoordinatorNoWebWorker"
# What a busy 2-core machine adds to the alert's own delays (a scrape, an evaluation, its
# `for:`): Prometheus evaluates late when the suites beside it take the CPU (6.2 s against a
# bound of 6 s with no margin, once, 2026-12-07); the seconds it took are printed.
PROMETHEUS_LATE = 10


@pytest.fixture
def prometheus(cluster) -> Iterator[lab_prometheus.Prometheus]:
    """A real Prometheus scraping the lab Coordinator (lab/prometheus.py)."""
    with lab_prometheus.scraping(cluster.coordinator.url) as server:
        yield server


def assert_no_change_and_true(run, hosts: list[str]) -> None:
    assert run.returncode == 0, run.output[-6000:]
    assert run.changed() == dict.fromkeys(hosts, 0), run.changed()
    assert not [line for line in UNTRUE if line in run.output], run.output[-6000:]


def hba_file(cluster) -> str:
    return cluster.nodes[DB_HOST].sh("sh", "-c", "ls /etc/postgresql/*/main/pg_hba.conf",
                                     check=True).stdout.strip()


def read(node, path: str) -> str:
    return node.sh("cat", path, check=True).stdout


def tls_key(node) -> str:
    """The node's TLS key, where cluster_tls keeps it."""
    return cluster_filters.cluster_tls_files(node.cluster_tls_dir)["key"]


def key_mode(node) -> str:
    return node.sh("stat", "-c", "%U:%G %a", tls_key(node), check=True).stdout.strip()


# The Redis users' file, where the redis role's defaults place it (the lab keeps them).
ACL_FILE = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles" / "redis" / "defaults"
                           / "main.yml").read_text())["redis_aclfile_path"]


def acl_mode(node) -> str:
    return node.sh("stat", "-c", "%U:%G %a", ACL_FILE, check=True).stdout.strip()


def ollama_models(cluster, host: str) -> list[str]:
    answer = requests.get(f"http://{cluster.nodes[host].address}:11434/api/tags", timeout=10)
    answer.raise_for_status()
    return [model["name"] for model in answer.json()["models"]]


@pytest.mark.timeout(1800)
def test_check_mode_of_each_playbook_on_the_converged_cluster_changes_nothing(cluster) -> None:
    assert cluster.web_host() == OLD
    inventory, hosts = cluster.inventory(OLD), list(cluster.nodes)
    # site.yml's check on the converged cluster is the drift test's run: every task it
    # reports changed is one of the drift made by hand.

    migrate = cluster.playbooks.run("migrate-web.yml", inventory, *CHECK)
    assert_no_change_and_true(migrate, hosts)
    summary = migrate.fact("migrate_web_summary")
    assert summary["probe"].startswith(
        f"check mode: would route a web_search task through {cluster.coordinator.url} "
        "and require it done in PostgreSQL"), summary
    assert summary["registry"].startswith(
        f"the Coordinator's registry lists 1 alive web worker serving tasks:web: "
        f"web-worker-{OLD} on {OLD}"), summary

    undrain = cluster.playbooks.run("drain.yml", inventory, *CHECK, "-e", f"drain_hosts={NEW}",
                                    "-e", "drain_state=undrained")
    # drain.yml's first play runs once, on the inventory's first host (lab-ai-core).
    assert_no_change_and_true(undrain, ["lab-ai-core", NEW])
    # Asked to drain, it says it would, for every worker of the host, and drains nothing.
    address = cluster.nodes[NEW].address
    drain = cluster.playbooks.run("drain.yml", inventory, *CHECK, "-e", f"drain_hosts={NEW}")
    assert drain.returncode == 0, drain.output[-6000:]
    assert drain.changed() == {"lab-ai-core": 0, NEW: 1}
    on_the_host = {w["worker_id"]: w for w in cluster.coordinator.workers().values()
                   if w["host"] == address and w["alive"]}
    assert on_the_host
    for worker_id, worker in on_the_host.items():
        assert f"{worker_id} on {address} (alive, 0 in flight): would be drained now" in (
            drain.unfolded())
        assert (worker["state"], worker["drain_requested_at"]) == ("alive", None)

    upgrade = cluster.playbooks.run("upgrade-model.yml", inventory, *CHECK, *UPGRADE)
    assert_no_change_and_true(upgrade, hosts)
    text = upgrade.unfolded()
    assert text.count("| already on it") == 3
    assert "check mode: would route a chat task to worker" in text
    cluster.assert_one_web_worker(OLD)


@pytest.mark.timeout(1800)
def test_a_move_checked_says_what_a_run_would_do_and_changes_nothing(cluster) -> None:
    old_node, db = cluster.nodes[OLD], cluster.nodes[DB_HOST]
    hba_before = read(db, hba_file(cluster))
    acl_before = read(db, "/etc/redis/users.acl")
    checked = cluster.playbooks.run("migrate-web.yml", cluster.inventory(NEW), *CHECK)
    assert checked.returncode == 0, checked.output[-6000:]
    assert not [line for line in UNTRUE if line in checked.output], checked.output[-6000:]
    text = checked.unfolded()
    # What a run does first (its Redis user and grant for tasks:web) is not done: the check
    # that needs it says so instead of failing.
    assert re.search(rf"check mode: a start-up check fails on {NEW} now, on what a real run "
                     r"writes before it checks again .*: Redis check FAILED", text)
    assert (f"check mode: a real run would (re)start the web worker web-worker-{NEW} on {NEW} "
            "and wait until the Coordinator lists it alive") in text
    assert f"web-worker-{OLD} on {old_node.address} (alive, 0 in flight): would be drained now" in (
        text)
    assert (f"check mode: nothing was started or stopped; a real run would require the web "
            f"worker running on {NEW}") in text
    summary = checked.fact("migrate_web_summary")
    assert re.match(rf"check mode: would route a web_search task through \S+ and require it "
                    rf"done in PostgreSQL \(.*\) within \d+s, on {cluster.nodes[NEW].address}, "
                    rf"claimed by {NEW}'s own login {contract.worker_db_role(NEW)}",
                    summary["probe"]), summary
    assert (summary["check_mode"], summary["after"], summary["task_id"]) == (True, [NEW], None)
    # The old host's line would go (its only worker is the web worker): shown, not done.
    assert re.search(rf"^-host\S*\s.*{re.escape(old_node.address)}/32", checked.output, re.M)
    assert checked.changed()[NEW] > 0 and checked.changed()[DB_HOST] > 0

    # Nothing changed: the old worker serves, undrained, enabled; the new host has no web
    # worker; PostgreSQL's and Redis' grants are as they were.
    cluster.assert_one_web_worker(OLD)
    assert old_node.worker_enabled()
    assert cluster.coordinator.workers()[f"web-worker-{OLD}"]["drain_requested_at"] is None
    new_node = cluster.nodes[NEW]
    assert not new_node.worker_installed()
    assert read(db, hba_file(cluster)) == hba_before
    assert read(db, "/etc/redis/users.acl") == acl_before


@pytest.mark.timeout(1800)
def test_drift_is_reported_by_check_mode_with_its_diff_left_alone_then_repaired(
        cluster, prometheus: lab_prometheus.Prometheus) -> None:
    db, old_node = cluster.nodes[DB_HOST], cluster.nodes[OLD]
    hba, env_file = hba_file(cluster), "/etc/coordinator-worker/inference-worker.env"
    unit_file = db.worker_service_file("inference-worker")
    env_before, unit_before = read(db, env_file), read(db, unit_file)
    shutdown = next(line for line in env_before.splitlines()
                    if line.startswith("SHUTDOWN_TIMEOUT="))
    assert "RestartSec=3\n" in unit_before

    # A real Prometheus watches the whole test: the web worker stopped fires the alert that
    # no web worker is alive, within its `for:`, a scrape and an evaluation (what a busy
    # machine delays aside, PROMETHEUS_LATE); its start by the repairing run resolves it.
    assert not prometheus.firing(NO_WEB_WORKER)

    # The drift, by hand: the web host's pg_hba.conf line, the database host's inference
    # worker's environment file and unit, its TLS key's mode and the Redis users' file's mode
    # (same text: the redis role's read must still send it to template), the web worker
    # stopped, its host's model deleted.
    acl_before = acl_mode(db)
    assert acl_before == "redis:redis 600"
    db.sh("sed", "-i", f"/{old_node.address}\\/32/d", hba, check=True)
    db.sh("pg_ctlcluster", "15", "main", "reload", check=True)
    db.sh("chmod", "0644", tls_key(db), check=True)
    db.sh("chmod", "0644", ACL_FILE, check=True)
    db.sh("sed", "-i", 's/^SHUTDOWN_TIMEOUT=.*/SHUTDOWN_TIMEOUT="77"/', env_file, check=True)
    db.sh("sed", "-i", "s/^RestartSec=3$/RestartSec=9/", unit_file, check=True)
    url, stopped = drive.notify_url(db), time.time()
    old_node.sh("systemctl", "stop", "web-worker.service", check=True)
    fired = prometheus.wait(NO_WEB_WORKER, firing=True,
                            within=prometheus.hold + 2 * prometheus.interval + PROMETHEUS_LATE)
    # Without Prometheus too: the Coordinator's own notification, as the lab's ntfy receiver
    # holds it for a subscriber.
    problem = wait_until(lambda: drive.notifications(url, stopped, contract.WEB_QUEUE,
                                                     "Cluster problem"), 30,
                         "the notification that no worker consumes tasks:web")
    requests.delete(f"http://{old_node.address}:11434/api/delete",
                    json={"model": DEFAULT_MODEL}, timeout=10).raise_for_status()
    assert not contract.has_model(ollama_models(cluster, OLD), DEFAULT_MODEL)
    drifted = {"hba": read(db, hba), "env": read(db, env_file), "unit": read(db, unit_file),
               "key": key_mode(db), "acl": acl_mode(db)}
    infer_pids = db.processes("worker_infer.py")

    checked = cluster.playbooks.run("site.yml", cluster.inventory(OLD), *CHECK)
    assert checked.returncode == 0, checked.output[-6000:]
    out = checked.output
    # Every task it reports changed is one a drift made, on the host of that drift: the
    # rest of the converged cluster (the Mac whole) reports nothing, and its workers are
    # verified as they run, as a real run does.
    assert checked.changed_tasks() == DRIFT_TASKS, checked.changed_tasks()
    assert "TASK [worker : Wait until the Coordinator lists every worker alive" in out
    # Each drift, with the diff of its file: the line that would come back, the values that
    # would be written again (the file's secrets masked, never shown).
    assert re.search(rf"^\+host\S*\s.*{re.escape(old_node.address)}/32", out, re.M), out[-6000:]
    assert re.search(r'^-SHUTDOWN_TIMEOUT="77"$', out, re.M)
    assert re.search(rf"^\+{re.escape(shutdown)}$", out, re.M)
    assert re.search(r"^-RestartSec=9$", out, re.M) and re.search(r"^\+RestartSec=3$", out, re.M)
    for name in ("REDIS_PASSWORD", "COORDINATOR_TOKEN"):
        value = next(line.split("=", 1)[1].strip('"') for line in env_before.splitlines()
                     if line.startswith(f"{name}="))
        assert value not in out, f"{name} of {env_file} is in the output"
    assert f"would pull {DEFAULT_MODEL} (check mode)" in checked.unfolded()
    assert re.search(r"changed: \[lab-worker-slow\] => \(item=web-worker\.service\)", out), (
        out[-6000:])

    # Left as it is.
    assert {"hba": read(db, hba), "env": read(db, env_file), "unit": read(db, unit_file),
            "key": key_mode(db), "acl": acl_mode(db)} == drifted
    assert not old_node.worker_active()
    assert not contract.has_model(ollama_models(cluster, OLD), DEFAULT_MODEL)
    assert db.processes("worker_infer.py") == infer_pids

    repaired = cluster.playbooks.run("site.yml", cluster.inventory(OLD))
    assert repaired.returncode == 0, repaired.output[-6000:]
    assert repaired.changed()[DB_HOST] > 0 and repaired.changed()[OLD] > 0
    assert re.search(rf"\s{re.escape(old_node.address)}/32\s", read(db, hba))
    assert (read(db, env_file), read(db, unit_file)) == (env_before, unit_before)
    assert key_mode(db) == "root:ssl-cert 640"
    assert acl_mode(db) == acl_before
    assert contract.has_model(ollama_models(cluster, OLD), DEFAULT_MODEL)
    # The inference worker restarted with its files; the web worker serves again.
    assert db.processes("worker_infer.py") != infer_pids
    cluster.assert_one_web_worker(OLD)
    resolved = prometheus.wait(NO_WEB_WORKER, firing=False,
                               within=2 * prometheus.interval + PROMETHEUS_LATE)
    recovered = wait_until(lambda: drive.notifications(url, stopped, contract.WEB_QUEUE,
                                                       "Cluster recovered"), 30,
                           "the notification that tasks:web has a consumer again")
    assert problem[0]["message"].startswith(f"no alive worker consumes {contract.WEB_QUEUE}")
    assert recovered[0]["message"].startswith(
        f"recovered: no alive worker consumes {contract.WEB_QUEUE}")
    print(f"{NO_WEB_WORKER}: firing {fired:.1f} s after the stop (for: {prometheus.hold:g} s),"
          f" resolved {resolved:.1f} s after the repairing run")
    task = cluster.coordinator.search()
    assert (task["status"], task["worker_host"]) == ("done", old_node.address), task
