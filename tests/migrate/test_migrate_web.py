"""migrate-web.yml on the three-node lab, as a user runs it (the lab of conftest.py).

The lab starts converged by site.yml with pipelining off, the web worker on
lab-worker-slow; each test edits a copy of the lab inventory the way a user edits theirs:

1. the first converge worked without pipelining (a fresh node, no acl package), and every
   worker it started passed the Coordinator's first probe of it, taken from its own queue
   and written from its host with its own logins;
2. the new host's PostgreSQL login is refused: the play stops in preflight, the old worker is
   untouched and still serves, and the message says so (the registry's line);
3. the new worker does not come up: it is stopped again, the old one still serves, and the
   message says so;
4. the move itself, with a pg_hba.conf line missing by hand and tasks routed all along: the line
   is found, named and added, the test task is done by the new host in PostgreSQL, none of the
   routed tasks is lost or failed, exactly one worker_web.py runs, on the new host, and the
   registry lists exactly that one alive;
5. the converged cluster runs what the inventory declares (verify_converged.yml: one process
   and one unit per declared worker, routed tasks done by the right hosts in PostgreSQL, a
   pg_hba.conf line per worker host naming its own login);
6. site.yml with the web worker moved in the inventory refuses, names both hosts and the safe
   way, and changes nothing;
7. site.yml --limit <a worker host being added>, with or without the database host, refuses
   before any change, naming the hosts the run needs and the --limit to use, and says the
   web worker of a host it leaves out is declared there, never to kill it.

That a second run of migrate-web.yml and of site.yml changes nothing is test_readme.py's
last step, on the inventory a user makes from inventory/home.
"""

from __future__ import annotations

import re
import time

import coordinator_contract as contract
import pytest
import yaml

from lab.throwaway import wait_until

OLD, NEW = "lab-worker-slow", "lab-macbookair"
DB_HOST = "lab-ai-core"


def assert_old_side_serving(cluster) -> None:
    assert cluster.nodes[OLD].worker_active()
    assert not cluster.nodes[NEW].worker_active()
    task = cluster.coordinator.search()
    old_address = cluster.nodes[OLD].address
    assert (task["status"], task["worker_host"], task["fallback"]) == ("done", old_address, False)
    assert [w["host"] for w in cluster.coordinator.alive_web_workers()] == [old_address]


def serving_now(cluster, host: str) -> str:
    """The end of a failure message when only ``host``'s web worker serves, as the registry
    names it (up to its heartbeat's age): what is true at that moment."""
    (worker,) = cluster.coordinator.alive_web_workers()
    assert worker["worker_id"] == f"web-worker-{host}", worker
    return (f"Now the Coordinator's registry lists 1 alive web worker serving tasks:web: "
            f"web-worker-{host} on {host} ({cluster.nodes[host].address}), pid "
            f"{cluster.nodes[host].processes()[0]}, v{worker['version']}, heartbeat ")


def test_first_converge_without_pipelining_became_postgres(cluster) -> None:
    run = cluster.first_converge
    # Without pipelining every module travels as a file, and one for postgres (not the login
    # user) is handed over with setfacl: what failed before the role installed acl.
    module = r"AnsiballZ_coordinator_database\.py"
    assert re.search(r"PUT .*" + module, run.output)
    assert re.search(r"setfacl -m u:postgres:r-[xX] .*" + module, run.output)
    # The node image has no acl; the role installed it before becoming postgres.
    assert cluster.nodes[DB_HOST].sh("dpkg-query", "-W", "-f=${Status}", "acl").stdout == (
        "install ok installed")
    assert run.recap[DB_HOST]["failed"] == 0
    assert cluster.web_host() == OLD


def test_every_worker_passes_its_first_probe(cluster) -> None:
    # The Coordinator probes a worker as soon as it registers (docs/coordinator.md,
    # "Probes"): no playbook, only the wait for the verdicts.
    def verdicts() -> list[dict] | None:
        probed = [w for w in cluster.coordinator.workers().values()
                  if w["alive"] and w["kind"] in contract.PROBED_KINDS]
        return probed if probed and all(w["probe_ok"] is not None for w in probed) else None

    probed = wait_until(verdicts, 120, "a probe verdict on every alive worker")
    assert {w["worker_id"]: (w["probe_ok"], w["probe_error"]) for w in probed} == {
        w["worker_id"]: (True, None) for w in probed}
    assert {w["kind"] for w in probed} == set(contract.PROBED_KINDS)


@pytest.mark.timeout(1800)
def test_refused_login_stops_in_preflight(cluster) -> None:
    inventory = cluster.inventory(NEW, "refused", {NEW: {"worker_db_password_key": "not-the-key"}})
    done = cluster.playbooks.run("migrate-web.yml", inventory)
    assert done.returncode != 0
    assert (f"preflight on {NEW} failed, the running web worker was not touched: "
            "PostgreSQL check FAILED at") in done.unfolded()
    # What it left is said, and is all it changed: the grants for the new host's checks, on
    # the database and Redis host; nothing on either worker host.
    assert (f"Left from this run for its checks: {NEW}'s Redis user may take from tasks:web; "
            f"{NEW}'s PostgreSQL login may claim from it, on its own pg_hba.conf line; harmless "
            f"while no web worker runs on {NEW} (none was started): the next migrate-web.yml "
            "uses them, and site.yml with the inventory as it was before the move takes the "
            "grants back") in done.unfolded()
    assert_only_grants_changed(done)
    # What is true now: the old worker, untouched, serves.
    assert serving_now(cluster, OLD) in done.unfolded()
    login = contract.worker_db_role(NEW)  # the new host's own login, with a wrong password
    assert f'password authentication failed for user \\"{login}\\"' in done.output \
        or f'password authentication failed for user "{login}"' in done.output
    # It stopped before the switch-over play: nothing was stopped or started.
    assert "Switch over and prove it" not in done.output
    assert_old_side_serving(cluster)


def assert_only_grants_changed(run) -> None:
    """A move stopped in its preflight changed the new host's grants (Redis ACL users,
    pg_hba.conf and the grants table, and their reloads) on the database host, nothing else."""
    assert {host: n for host, n in run.changed().items() if n} == {
        DB_HOST: run.changed()[DB_HOST]}, run.recap
    grants = re.compile(r"ACL users|Redis users|pg_hba\.conf|Reload postgresql|grant", re.I)
    assert [t for t in run.changed_tasks()[DB_HOST] if not grants.search(t)] == []


@pytest.mark.timeout(1800)
def test_new_worker_that_does_not_come_up_is_stopped(cluster) -> None:
    # Passes every preflight check (they do not talk to the Coordinator), then cannot register.
    inventory = cluster.inventory(NEW, "no-register", {NEW: {
        "worker_token_key": "not-the-key", "worker_register_retries": 5}})
    done = cluster.playbooks.run("migrate-web.yml", inventory)
    assert done.returncode != 0
    assert (f"the new web worker on {NEW} did not come up, so it was stopped and the old one "
            "was left serving") in done.unfolded()
    # The worker role's own verdict, with the worker's log lines, not some earlier failure.
    assert "is not registered alive with the Coordinator" in done.unfolded()
    # What is true now: the old worker alone serves (the new one never registered).
    assert serving_now(cluster, OLD) in done.unfolded()
    assert not cluster.nodes[NEW].worker_enabled()
    assert_old_side_serving(cluster)


@pytest.mark.timeout(1800)
def test_move_with_tasks_routed_throughout(cluster) -> None:
    # Drift: the new host's pg_hba.conf line removed by hand; preflight must find and add it.
    db, new_address = cluster.nodes[DB_HOST], cluster.nodes[NEW].address
    hba = db.sh("sh", "-c", "ls /etc/postgresql/*/main/pg_hba.conf").stdout.strip()
    db.sh("sed", "-i", f"/{new_address}\\/32/d", hba, check=True)
    db.sh("pg_ctlcluster", "15", "main", "reload", check=True)

    with cluster.traffic() as traffic:
        done = cluster.migrate(NEW)
    assert done.returncode == 0, done.output[-6000:]
    found = re.search(r"found in preflight and fixed by the postgresql_access role: "
                      r"PostgreSQL check FAILED.{0,400}", done.unfolded())
    assert found, f"no pg_hba.conf finding reported; see {done.log}"
    assert "no pg_hba.conf entry for host" in found.group(0)
    assert new_address in found.group(0)
    summary = cluster.assert_proven(done, NEW)
    assert summary["registry"].startswith(
        f"the Coordinator's registry lists 1 alive web worker serving tasks:web: "
        f"web-worker-{NEW} on {NEW} ({new_address})"), summary

    outcome = traffic.outcome()
    assert outcome.routed >= 5 and outcome.refused == 0
    cluster.assert_settled(outcome, NEW)
    assert new_address in outcome.hosts()
    # A prompt no URL in front of SearXNG lets through (the lab's stand-in drops a request
    # head over uWSGI's 8192 bytes, unanswered): the new host's worker POSTs it.
    long = cluster.coordinator.search("東京の天気は？" * 1000)
    assert (long["status"], long["fallback"], long["worker_host"]) == (
        "done", False, new_address), long
    # The old worker was drained before its stop: it stopped holding nothing.
    old = cluster.coordinator.workers()[f"web-worker-{OLD}"]
    assert (old["state"], old["drain_requested_at"] is not None) == ("stopped", True)
    assert not cluster.nodes[OLD].worker_enabled()
    assert not cluster.nodes[OLD].worker_installed()


def test_the_converged_cluster_runs_what_the_inventory_declares(cluster) -> None:
    verified = cluster.playbooks.run("tests/migrate/verify_converged.yml", cluster.inventory(NEW))
    assert verified.returncode == 0, verified.output[-6000:]
    assert verified.changed() == {DB_HOST: 0, OLD: 0, NEW: 0}


def test_site_refuses_to_move_the_web_worker_behind_migrate_webs_back(cluster) -> None:
    refused = cluster.playbooks.run("site.yml", cluster.inventory(OLD))
    assert refused.returncode != 0, refused.output[-6000:]
    assert (f"the web worker runs on {NEW} but the inventory says {OLD}: run migrate-web.yml "
            "to move it safely") in refused.unfolded()
    assert refused.changed() == {DB_HOST: 0, OLD: 0, NEW: 0}
    cluster.assert_one_web_worker(NEW)


def test_site_limited_to_a_node_being_added_names_the_hosts_it_needs(cluster) -> None:
    web = cluster.web_host()
    added = next(h for h in (OLD, NEW) if h != web)
    # The node being added: an inference worker on the host that runs none.
    inventory = cluster.inventory(web, "limit-new-node")
    hosts_file = inventory / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    hosts["all"]["children"]["inference_workers"]["hosts"][added] = None
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    (pid,) = cluster.nodes[web].processes()
    grants = ("the grants written on the database and Redis hosts are derived from the "
              "workers of every worker host")
    for limit, left_out in [
            (added, f"{DB_HOST} (the database and Redis host, where {added}'s pg_hba.conf "
                    f"line, login, grant and Redis user are written); {web} ({grants})"),
            (f"{added},{DB_HOST}", f"{web} ({grants})")]:
        run = cluster.playbooks.run("site.yml", inventory, "--limit", limit)
        assert run.returncode != 0, run.output[-6000:]
        text = run.unfolded()
        now = serving_now(cluster, web).removeprefix("Now ")
        assert (f"--limit leaves out hosts this run needs: {left_out}. Nothing was changed, "
                f"and {now}") in text, text[-3000:]
        assert re.search(
            r"heartbeat [0-9.]+ s ago \(declared in web_workers, left out of this run by "
            rf"--limit\): run again with --limit {DB_HOST},{OLD},{NEW}, which is every host: "
            "the same as no --limit", text), text[-3000:]
        assert f"kill {pid}" not in text
        assert "PLAY [The cluster CA" not in run.output
        assert set(run.changed().values()) == {0}
    cluster.assert_one_web_worker(web)


def test_drain_playbook_sends_a_hosts_tasks_elsewhere_until_undrained(cluster) -> None:
    inventory, address = cluster.inventory(NEW), cluster.nodes[NEW].address

    def on_the_host() -> dict[str, str]:
        return {w["worker_id"]: w["state"] for w in cluster.coordinator.workers().values()
                if w["host"] == address and w["alive"]}

    before = on_the_host()
    assert "inference" in {w["kind"] for w in cluster.coordinator.workers().values()
                           if w["worker_id"] in before}
    drained = cluster.playbooks.run("drain.yml", inventory, "-e", f"drain_hosts={NEW}")
    assert drained.returncode == 0, drained.output[-6000:]
    # Every worker of the host finished what it held and takes nothing.
    assert on_the_host() == dict.fromkeys(before, "drained")
    chats = [cluster.coordinator.route("こんにちは", "chat") for _ in range(4)]
    served = {cluster.coordinator.finished(t, time.monotonic() + 120)["worker_host"]
              for t in chats}
    assert served == {cluster.nodes[DB_HOST].address}
    again = cluster.playbooks.run("drain.yml", inventory, "-e", f"drain_hosts={NEW}")
    assert again.returncode == 0 and set(again.changed().values()) == {0}, again.output[-3000:]
    back = cluster.playbooks.run("drain.yml", inventory, "-e", f"drain_hosts={NEW}",
                                 "-e", "drain_state=undrained")
    assert back.returncode == 0, back.output[-6000:]
    assert on_the_host() == dict.fromkeys(before, "alive")
    served = {cluster.coordinator.finished(t, time.monotonic() + 120)["worker_host"]
              for t in [cluster.coordinator.route("こんにちは", "chat") for _ in range(4)]}
    assert address in served
    missing = cluster.playbooks.run("drain.yml", inventory)
    assert missing.returncode != 0
    assert ("set drain_hosts to the hosts whose workers to drain, e.g. -e "
            "drain_hosts=macbookair") in missing.unfolded()
