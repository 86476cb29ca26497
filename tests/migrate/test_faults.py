"""The move and the converge under faults, on the shared lab (conftest.py).

Each case starts from a converged lab with one web worker (wherever the case before left
it), routes a web task every 2 s through the whole run, and ends with every routed task
done (or failed with a reason a user can act on, counted), none lost, and exactly one alive
web worker in the Coordinator's registry, with one worker_web.py process, on its host:

- site.yml with one host down stops, naming it, and changes nothing;
- site.yml without the sudo password, and with a wrong one: stops, naming the hosts and
  what to do, and changes nothing;
- the old host unreachable before the move (its worker still serving): stops before any
  change, the old worker serving;
- other weights under the model's name on the new host (another digest): stops in preflight,
  naming both digests, unless -e migrate_web_allow_other_weights=true, which moves; a move
  whose inventory also names another model stops before any change, naming the model the
  old worker registered with and its digest, whatever that option says;
- a worker_web.py started by hand on a host outside web_workers: named and refused before
  any change, by migrate-web.yml and by site.yml's guard alike;
- the new host gone from the network after its worker started: rolled back, the old worker
  serving; once the host is back, migrate-web.yml run again stops the leftover;
- the old worker stuck in a task: drained for at most migrate_web_drain_timeout, then
  stopped within its shutdown timeout, and said;
- the old worker ignoring SIGTERM (SIG_IGN): systemd kills it after TimeoutStopSec, and the
  playbook says so with that bound;
- ansible-playbook interrupted (Ctrl-C) at a play boundary, or cut by Ctrl-C or a lost
  controller as a task of the switch-over play or of its rollback starts, then run again:
  converges (one boundary and one task a run, others each day; every one with LAB_CUTS=all,
  a part of them with LAB_CUTS=FIRST-LAST);
- PostgreSQL restarted as the new worker starts, and the Coordinator as the test task is
  routed, in one move.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import time
from collections.abc import Callable

import coordinator_contract as contract
import pytest
import requests
import yaml

from lab import drive, lab
from lab.standins.ollama import DEFAULT_MODEL
from lab.throwaway import wait_until

from .conftest import STANDIN_LATENCY

CORE = "lab-ai-core"
# A model the inventory may name that no Ollama here has: a move refuses it before any pull.
OTHER_MODEL = "other-model:1b"


def test_site_with_a_host_down_names_it_and_changes_nothing(cluster) -> None:
    web = cluster.web_host()
    down = cluster.other(web)
    with cluster.traffic() as traffic, drive.sshd_stopped(cluster.nodes[down]):
        run = cluster.playbooks.run("site.yml", cluster.inventory(web))
    assert run.returncode != 0
    text = run.unfolded()
    assert (f"{down} is unreachable (ssh: connect to host {cluster.nodes[down].address} port "
            "22: Connection refused): bring it back (its network, sshd) or take it out of the "
            "inventory. Nothing was changed, and the Coordinator's registry lists 1 alive web "
            "worker serving tasks:web: ") in text
    assert set(run.changed().values()) == {0}
    cluster.assert_settled(traffic.outcome(), web)


def test_site_without_the_sudo_password_or_with_a_wrong_one_stops_and_changes_nothing(
        cluster) -> None:
    web = cluster.web_host()
    (pid,) = cluster.nodes[web].processes()
    # The hosts Ansible uses sudo on: not the Mac, which runs without become.
    hosts = [host for host in yaml.safe_load((lab.INVENTORY / "hosts.yml").read_text())
             ["all"]["children"]["lab_nodes"]["hosts"] if cluster.nodes[host].kind == "linux"]
    # The inventory as a user's without the password: the lab's line taken out.
    no_password = cluster.inventory(web, "no-sudo-password")
    connection = no_password / "group_vars" / "lab_nodes" / "connection.yml"
    lines = connection.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith("ansible_become_password:")]
    assert len(kept) == len(lines) - 1
    connection.write_text("".join(kept))
    wrong = cluster.inventory(web, "wrong-sudo-password", {
        host: {"ansible_become_password": "not-admins-password"} for host in hosts})
    with cluster.traffic() as traffic:
        missing = cluster.playbooks.run("site.yml", no_password)
        refused = cluster.playbooks.run("site.yml", wrong)
    (worker,) = cluster.coordinator.alive_web_workers()
    now = (f"Nothing was changed, and the Coordinator's registry lists 1 alive web worker "
           f"serving tasks:web: web-worker-{web} on {cluster.nodes[web].address}, pid {pid}, "
           f"v{worker['version']}, heartbeat ")
    for run, problem in [
            (missing, "sudo asks for a password and none was given: run with -K "
                      "(--ask-become-pass) or set ansible_become_password (in the vault)"),
            (refused, "sudo refused the password given (-K or ansible_become_password): "
                      "correct it")]:
        assert run.returncode != 0
        assert f"{', '.join(hosts)}: {problem}. {now}" in run.unfolded(), run.output[-3000:]
        assert "PLAY [PostgreSQL]" not in run.output
        assert set(run.changed().values()) == {0}
    assert cluster.nodes[web].processes() == [pid]
    cluster.assert_settled(traffic.outcome(), web)


def test_old_host_unreachable_stops_the_move_before_any_change(cluster) -> None:
    old = cluster.web_host()
    new = cluster.other(old)
    with cluster.traffic() as traffic, drive.sshd_stopped(cluster.nodes[old]):
        run = cluster.migrate(new)
    assert run.returncode != 0
    text = run.unfolded()
    assert f"{old} is unreachable (ssh: connect to host {cluster.nodes[old].address}" in text
    # What is true now: the old worker, which keeps serving.
    assert re.search(rf"Nothing was changed, and the Coordinator's registry lists 1 alive web "
                     rf"worker serving tasks:web: web-worker-{old} on {cluster.nodes[old].address}",
                     text)
    assert "PLAY [Preflight 1/3" not in run.output
    assert set(run.changed().values()) == {0}
    outcome = traffic.outcome()
    cluster.assert_settled(outcome, old)
    assert outcome.hosts() == {cluster.nodes[old].address}


def model_digest(address: str) -> str:
    models = requests.get(f"http://{address}:11434/api/tags", timeout=10).json()["models"]
    return next(model["digest"] for model in models if model["name"] == DEFAULT_MODEL)


def test_other_weights_under_the_same_name_stop_the_move_in_preflight(cluster) -> None:
    old = cluster.web_host()
    new = cluster.other(old)
    standin = f"http://{cluster.nodes[new].address}:11434/_standin/config"
    requests.post(standin, json={"weights": {DEFAULT_MODEL: "retrained"}},
                  timeout=10).raise_for_status()
    try:
        serving, moved = model_digest(cluster.nodes[old].address), model_digest(
            cluster.nodes[new].address)
        assert serving != moved
        pids = cluster.nodes[old].processes()
        # The same edit names another model too: the old host is asked about the model its
        # worker registered with, not the inventory's, and the move stops before any change,
        # the override of other weights notwithstanding.
        changed_model = cluster.inventory(new, "model-changed", {
            host: {"cluster_model": OTHER_MODEL} for host in cluster.nodes})
        with cluster.traffic() as traffic:
            refused = cluster.playbooks.run("migrate-web.yml", changed_model, "-e",
                                            "migrate_web_allow_other_weights=true")
            run = cluster.migrate(new)
        assert refused.returncode != 0
        assert (f"the web worker on {old} serves {DEFAULT_MODEL} (digest {serving[:12]}), the "
                f"inventory names {OTHER_MODEL} for {new}: a move keeps the model, so name "
                f"{DEFAULT_MODEL} in the inventory again (worker_ollama_model; cluster_model in "
                "inventory/home) for the move, then change the model with upgrade-model.yml "
                "(docs/upgrade-model.md). Nothing was changed, and the Coordinator's registry "
                f"lists 1 alive web worker serving tasks:web: web-worker-{old} on {old} "
                f"({cluster.nodes[old].address}), pid {pids[0]}") in refused.unfolded()
        assert "PLAY [Redis users" not in refused.output
        assert set(refused.changed().values()) == {0}
        assert run.returncode != 0
        assert (f"preflight on {new} stopped, the running web worker was not touched: "
                f"same model name, other weights: {new} has {DEFAULT_MODEL} {moved[:12]}, "
                f"{old} serves {serving[:12]}: pull {serving} on {new} or pin it, or pass -e "
                f"migrate_web_allow_other_weights=true. Left from this run for its checks: "
                f"{new}'s Redis user may take from tasks:web; harmless while no web worker runs "
                f"on {new} (none was started)") in run.unfolded()
        # That grant (the ACL file and its load, on the Redis host) is all the run changed.
        assert {h: n for h, n in run.changed().items() if n} == {CORE: 2}, run.recap
        assert run.changed_tasks()[CORE] == {
            "redis : Configure | the ACL users (password hashes only), readable by redis alone",
            "redis : Load the Redis users"}
        assert "PLAY [Preflight 2/3" not in run.output
        assert cluster.nodes[old].processes() == pids
        outcome = traffic.outcome()
        cluster.assert_settled(outcome, old)
        assert outcome.hosts() == {cluster.nodes[old].address}

        with cluster.traffic() as traffic:
            run = cluster.playbooks.run("migrate-web.yml", cluster.inventory(new), "-e",
                                        "migrate_web_allow_other_weights=true")
        assert run.returncode == 0, run.output[-3000:]
        assert f"{new}: {DEFAULT_MODEL} (digest {moved[:12]})" in (
            run.fact("migrate_web_summary")["model"])
        cluster.assert_settled(traffic.outcome(), new)
    finally:
        requests.post(standin, json={"weights": {}}, timeout=10).raise_for_status()


def test_a_worker_started_by_hand_elsewhere_is_named_and_refused(cluster) -> None:
    web = cluster.web_host()
    new = cluster.other(web)
    core = cluster.nodes[CORE]
    # The web worker's own environment, with another id, run by hand on the core host (in
    # no web_workers group), outside systemd: the copy that raced for tasks:web on esxi.
    environment = cluster.nodes[web].worker_env()
    environment = re.sub(r'(?m)^WORKER_ID=.*$', 'WORKER_ID="web-worker-by-hand"', environment)
    environment = re.sub(r'(?m)^WORKER_HOST=.*$', f'WORKER_HOST="{core.address}"', environment)
    # The core host's own path to the cluster CA's certificate (a Mac keeps it in its home).
    environment = environment.replace(cluster.nodes[web].cluster_ca_file, core.cluster_ca_file)
    start = ("set -a; . /root/by-hand.env; set +a; cd /opt/coordinator-worker/app &&"
             " /opt/coordinator-worker/venv/bin/python worker_web.py")
    core.sh("sh", "-c", "cat > /root/by-hand.env", input_text=environment, check=True)
    # The web host's Redis user may use that host's workers' keys only: the copy, under
    # another id, is refused by Redis before anything else.
    refused = core.sh("sh", "-c", start, check=False)
    assert refused.returncode != 0
    redis_at = "{}:{}".format(*(re.search(rf'(?m)^{key}="?([^"\n]+)', environment).group(1)
                                for key in ("REDIS_HOST", "REDIS_PORT")))
    assert (f"Redis check FAILED at {redis_at}: user '{contract.worker_redis_user(web)}' may "
            "not use its keys: ") in refused.stdout + refused.stderr
    # With the Redis admin's login (someone who has it), the web host's database login
    # works from the web host's address only: refused by PostgreSQL, naming login and address.
    admin_password = (lab.SECRETS_DIR / "redis_password").read_text().split()[0]
    environment = re.sub(r'(?m)^REDIS_USERNAME=.*$',
                         lambda _: f'REDIS_USERNAME="{lab.REDIS_ADMIN_USER}"', environment)
    environment = re.sub(r'(?m)^REDIS_PASSWORD=.*$',
                         lambda _: f'REDIS_PASSWORD="{admin_password}"', environment)
    core.sh("sh", "-c", "cat > /root/by-hand.env", input_text=environment, check=True)
    refused = core.sh("sh", "-c", start, check=False)
    assert refused.returncode != 0
    assert (f'no pg_hba.conf entry for host "{core.address}", user '
            f'"{contract.worker_db_role(web)}"') in refused.stdout + refused.stderr
    # With the core host's own login (its inference worker's), that worker's own token
    # registers that worker only: the copy is refused, saying so.
    core_env = core.sh("cat", "/etc/coordinator-worker/inference-worker.env",
                       check=True).stdout
    core_dsn = next(line for line in core_env.splitlines() if line.startswith("PG_DSN="))
    environment = re.sub(r'(?m)^PG_DSN=.*$', lambda _: core_dsn, environment)
    core.sh("sh", "-c", "cat > /root/by-hand.env", input_text=environment, check=True)
    refused = core.sh("sh", "-c", start, check=False)
    assert refused.returncode != 0
    assert (f"HTTP 403 the token of worker 'web-worker-{web}' cannot register worker "
            "'web-worker-by-hand'") in refused.stdout + refused.stderr
    # With the operator's token (someone who has it), the copy runs.
    operator = cluster.coordinator.headers["Authorization"].split()[1]
    environment = re.sub(r'(?m)^COORDINATOR_TOKEN=.*$', f'COORDINATOR_TOKEN="{operator}"',
                         environment)
    core.sh("sh", "-c", "cat > /root/by-hand.env", input_text=environment, check=True)
    core.sh("sh", "-c", f"nohup sh -c '{start}' > /root/by-hand.log 2>&1 &", check=True)
    try:
        rogue = wait_until(lambda: next(
            (w for w in cluster.coordinator.alive_web_workers()
             if w["worker_id"] == "web-worker-by-hand"), None), 30, "the copy registered")
        named = (f"the Coordinator's registry lists a web worker that serves tasks:web beside "
                 f"the managed ones: web-worker-by-hand on {CORE} ({core.address}), pid "
                 f"{rogue['pid']}, v2.1, heartbeat ")
        how_to_stop = (f"no service manager runs it there (a copy started by hand, outside "
                       f"systemd/launchd, or one its service manager lost); stop it: `kill "
                       f"{rogue['pid']}` on {CORE} ({core.address}). Nothing was changed")
        with cluster.traffic() as traffic:
            run = cluster.migrate(new)
            # site.yml's web worker guard asks the registry the same way: refused too, with
            # the inventory unchanged (no move asked), before any role's play.
            site = cluster.playbooks.run("site.yml", cluster.inventory(web))
        assert run.returncode != 0
        assert named in run.unfolded()
        assert how_to_stop in run.unfolded()
        assert "PLAY [Preflight 1/3" not in run.output
        assert site.returncode != 0
        assert named in site.unfolded()
        assert how_to_stop in site.unfolded()
        assert "PLAY [PostgreSQL]" not in site.output
        assert set(site.changed().values()) == {0}
    finally:
        core.sh("pkill", "-f", "by-hand.env|worker_web.py")
        core.sh("rm", "-f", "/root/by-hand.env", "/root/by-hand.log")
    # Shared tasks:web: the copy took some of them and did them; none is lost.
    cluster.assert_settled(traffic.outcome(), web)


def test_new_host_gone_after_its_worker_started_rolls_back(cluster) -> None:
    old = cluster.web_host()
    new = cluster.other(old)
    with cluster.traffic() as traffic:
        # The new worker is up and verified; the host leaves the network before the switch.
        run = cluster.migrate(new, on=[(r"^PLAY \[Switch over",
                                        lambda _: cluster.nodes[new].disconnect())])
    try:
        assert run.returncode != 0
        text = run.unfolded()
        assert (f"migration rolled back: 5. Stop unless each new host answered, with its web "
                f"worker running failed: {new} does not answer (") in text
        assert re.search(rf"Now the Coordinator's registry lists [12] alive web workers? serving "
                         rf"tasks:web: .*web-worker-{old} on {old} ", text)
        assert (f"{new} could not be reached, so its web worker may still run: once it "
                "answers, run migrate-web.yml again (it stops it)") in text
        assert cluster.nodes[old].worker_active()
        assert cluster.nodes[old].worker_enabled()
    finally:
        cluster.nodes[new].connect()
    # As the message says: once the host is back, the same playbook with the old host in
    # web_workers stops the leftover on the new one.
    again = cluster.migrate(old)
    assert again.returncode == 0, again.output[-6000:]
    cluster.assert_settled(traffic.outcome(), old, failed_ok=1)


# Before the cut test: its runs (the web worker moved to the Linux host first, then back)
# and the rollback's above name the tasks the cut test cuts at, in the direction it moves
# (tasks_printed), which otherwise moves the web worker there and back first to learn them.
@pytest.mark.timeout(1800)
def test_a_stuck_old_worker_is_stopped_within_the_bound_and_said(cluster) -> None:
    # What the playbook says of the stop is read from systemd (the Mac's launchd: a gap).
    old = cluster.linux_web_host()
    new = cluster.other(old)
    standin = f"http://{cluster.nodes[old].address}:11434/_standin/config"
    # Its Ollama hangs: the old worker is stuck in a task when SIGTERM comes.
    requests.post(standin, json={"latency": 600}, timeout=10).raise_for_status()
    try:
        # The stuck task first, then the traffic: a traffic task routed before it would be
        # the one the old worker sticks in, and this one would wait in the queue behind it.
        stuck = cluster.coordinator.route("stuck")
        wait_until(lambda: cluster.coordinator.task(stuck)["status"] == "running",
                   30, "the old worker on the stuck task")
        with cluster.traffic() as traffic:
            # Drained, it does not finish within 5 s: it is stopped anyway.
            run = cluster.playbooks.run("migrate-web.yml", cluster.inventory(new),
                                        "-e", "migrate_web_drain_timeout=5")
    finally:
        requests.post(standin, json={"latency": STANDIN_LATENCY}, timeout=10).raise_for_status()
    assert run.returncode == 0, run.output[-6000:]
    text = run.unfolded()
    assert (f"the old web worker on {old} still held a task after 5 s of draining "
            "(migrate_web_drain_timeout): stopped anyway, within the bound of its stop") in text
    # Then SIGTERM gives it its shutdown timeout: it gives the task up (the Reaper fails it,
    # naming the worker), unless its own Ollama timeout ends the call first (the search
    # results are the answer). Either way the task ends, and none is lost.
    task = cluster.coordinator.finished(stuck, time.monotonic() + 300)
    if task["status"] == "failed":
        assert f"web-worker-{old}" in task["error"], task
        assert (f"the web worker on {old} did not finish its task within its shutdown timeout "
                "after SIGTERM and gave it up; the Reaper fails that task, the new worker "
                "serves the queued ones") in text
    else:
        assert (task["status"], task["fallback"]) == ("done", True), task
    cluster.assert_settled(traffic.outcome(), new)


SWITCH_OVER = "Switch over and prove it with a routed task"
# Ctrl-C as a terminal sends it, and a controller lost with its whole process group.
CUTS = {"Ctrl-C": drive.interrupt, "a lost controller": drive.kill_group}


def cut_at(task: str, how: str) -> tuple[str, Callable[[object], None]]:
    return f"^TASK \\[{re.escape(task)}\\]", CUTS[how]


def assert_cut(run: drive.Run, how: str) -> None:
    assert run.returncode != 0, f"not cut ({how}): {run.output[-3000:]}"
    if how == "Ctrl-C":
        assert run.interrupted, run.output[-3000:]
    else:
        assert run.returncode == -signal.SIGKILL, run.returncode


def tasks_printed(cluster, target: str, rolled_back: bool) -> list[str]:
    """The switch-over play's tasks, as this session's runs moving the web worker to
    ``target`` printed them: with ``rolled_back``, the rollback's (from its first task on)
    of the latest run the rollback ended; otherwise those of a whole move. What a run
    prints can be cut. A session that made no such run (this test run alone, for a part of
    a sweep) makes it first, and the web worker is back where it was."""
    try:
        return runs_printed(cluster, target, rolled_back)
    except LookupError:
        start = cluster.web_host()
        if rolled_back:
            try:
                cluster.migrate(target, on=[(r"^PLAY \[Switch over",
                                             lambda _: cluster.nodes[target].disconnect())])
            finally:
                cluster.nodes[target].connect()
            back = cluster.migrate(start)
            assert back.returncode == 0, back.output[-6000:]
        else:
            cluster.web_on(target)
            cluster.web_on(start)
        return runs_printed(cluster, target, rolled_back)


def runs_printed(cluster, target: str, rolled_back: bool) -> list[str]:
    """tasks_printed's answer from the runs made so far; LookupError when none fits."""
    printed = [(run, run.tasks_of(SWITCH_OVER)) for run in cluster.playbooks.runs
               if run.name == "migrate-web.yml" and run.inventory.endswith(f"web-on-{target}")
               and "--check" not in run.args]
    if rolled_back:
        for run, tasks in reversed(printed):
            rollback = [t for t in tasks if t.startswith("Roll back")]
            if run.returncode != 0 and rollback:
                return tasks[tasks.index(rollback[0]):]
    else:
        # The tasks every whole move printed (one cut short and run again skips some; one
        # test's fault adds some).
        moves = [tasks for run, tasks in printed if run.returncode == 0
                 and any(t.startswith("6. Stop the old web worker") for t in tasks)]
        if moves:
            return [t for t in moves[0] if all(t in tasks for tasks in moves)]
    raise LookupError(f"no run of this session moved the web worker to {target} "
                      f"{'and rolled back' if rolled_back else 'to the end'}")


def cut_cases(count: int) -> list[int]:
    """Which of ``count`` cases this run takes: every one under LAB_CUTS=all, cases FIRST to
    LAST (from 0) under LAB_CUTS=FIRST-LAST, so that a sweep can be run in parts; otherwise
    one, another each day, so that every case is cut in turn across runs."""
    chosen = os.environ.get("LAB_CUTS", "")
    if chosen == "all":
        return list(range(count))
    if chosen:
        first, _, last = chosen.partition("-")
        assert first.isdigit() and (last or first).isdigit(), (
            f"LAB_CUTS={chosen}: give all, a case number or FIRST-LAST (cases 0 to {count - 1})")
        cases = list(range(int(first), min(int(last or first) + 1, count)))
        assert cases, f"LAB_CUTS={chosen}: there are {count} cases, 0 to {count - 1}"
        return cases
    return [datetime.date.today().toordinal() % count]


@pytest.mark.timeout(14400)
def test_cut_at_a_task_of_the_switch_over_or_its_rollback_then_run_again_converges(
        cluster) -> None:
    # Each case: the move cut by Ctrl-C (SIGINT to the whole process group, ssh included)
    # or a lost controller (SIGKILL to it) as a task of the switch-over play or of its
    # rollback starts, then run again: every routed task done or failed with a reason, none
    # lost, one alive web worker; how long tasks:web went unserved is in the figures.
    # A rollback case starts from the new host leaving the network as the switch-over
    # starts (as test_new_host_gone_after_its_worker_started_rolls_back, whose run names
    # the rollback's tasks) and, back, it is the one the run again moves to. Every case
    # moves the web worker from where this test found it to the other host (taking several
    # cases, it is moved back between them); under LAB_CUTS, from the Linux host to the Mac,
    # the seed's move, so that the parts of a sweep number the same cases.
    start = cluster.linux_web_host() if os.environ.get("LAB_CUTS") else cluster.web_host()
    new = cluster.other(start)
    cases = [(task, how, rolled_back) for rolled_back in (True, False)
             for task in tasks_printed(cluster, new, rolled_back) for how in CUTS]
    for number, case in enumerate(cut_cases(len(cases))):
        if number:
            cluster.web_on(start)
        task, how, rolled_back = cases[case]
        leave = [(r"^PLAY \[Switch over", lambda _: cluster.nodes[new].disconnect())]
        with cluster.traffic() as traffic:
            for attempt in range(3):
                if attempt:
                    # The press was swallowed and the run ended as it would uncut. Back to
                    # where the case starts (a leftover on the new host stopped), cut again.
                    back = cluster.migrate(start)
                    assert back.returncode == 0, back.output[-6000:]
                try:
                    cut = cluster.migrate(new, on=[*(leave if rolled_back else []),
                                                   cut_at(task, how)])
                finally:
                    if rolled_back:
                        cluster.nodes[new].connect()
                if not (how == "Ctrl-C" and cut.interrupt_swallowed):
                    break
            assert_cut(cut, how)
            again = cluster.migrate(new)
        assert again.returncode == 0, (task, how, again.output[-6000:])
        outcome = traffic.outcome()
        cluster.assert_settled(outcome, new, failed_ok=outcome.routed)


@pytest.mark.timeout(3600)
def test_interrupted_at_a_play_boundary_then_run_again_converges(cluster) -> None:
    # The move cut by Ctrl-C as a play starts, then run again to the end. One boundary a
    # run, another each day (cut_cases); under LAB_CUTS=all one move is cut at the first
    # boundary, run again and cut at the next, and so on: each run starts from where the cut
    # before left the cluster (the Redis grant given, the new worker started beside the old,
    # the old one stopped, its files gone) and must get past that point to the next cut.
    plays = re.findall(r"^- name: (.+)$", (drive.REPO / "migrate-web.yml").read_text(), re.M)
    target = cluster.other(cluster.web_host())
    with cluster.traffic() as traffic:
        for boundary in [1 + case for case in cut_cases(len(plays) - 1)]:
            banner = re.escape(f"PLAY [{plays[boundary].strip(chr(34))}]")
            cut = cluster.migrate(target, on=[(f"^{banner}", drive.interrupt)])
            assert_cut(cut, "Ctrl-C")
        finish = cluster.migrate(target)
        assert finish.returncode == 0, finish.output[-6000:]
    cluster.assert_settled(traffic.outcome(), target)


def test_postgresql_and_the_coordinator_restarting_in_the_middle_of_the_move(cluster) -> None:
    # Two restarts in one move, each where it hurts: PostgreSQL as the new worker starts
    # (it registers and claims through it), the Coordinator as the test task is routed. Each
    # hook must fire (drive.Playbooks fails a run whose hook line never appeared).
    old = cluster.web_host()
    new = cluster.other(old)

    def restart(unit: str) -> Callable[[object], None]:
        return lambda _: cluster.nodes[CORE].sh("systemctl", "restart", unit, check=True)

    with cluster.traffic() as traffic:
        run = cluster.migrate(new, on=[
            (r"^PLAY \[Start the web worker", restart("postgresql.service")),
            (r"^TASK \[7\. Route a test task", restart("coordinator.service"))])
    assert run.returncode == 0, f"PostgreSQL and the Coordinator restarted: {run.output[-6000:]}"
    cluster.assert_settled(traffic.outcome(), new)


# One line of a .pth file in the worker's virtualenv: every Python started from it sets
# SIGTERM to SIG_IGN, and a handler asked for later (the worker's own) is not installed.
# (site.py runs the line with exec in a function: the lambda gets all it uses as defaults.)
IGNORE_SIGTERM = ("import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "signal.signal = lambda signum, handler, real=signal.signal, "
                  "term=signal.SIGTERM, ign=signal.SIG_IGN: "
                  "ign if signum == term else real(signum, handler)\n")
VENV_PYTHON = "/opt/coordinator-worker/venv/bin/python"
WEB_UNIT = "/etc/systemd/system/web-worker.service"


@pytest.mark.timeout(1800)
def test_an_old_worker_that_ignores_sigterm_is_killed_by_systemd_within_the_bound(
        cluster) -> None:
    old = cluster.linux_web_host()
    new = cluster.other(old)
    node = cluster.nodes[old]
    # SIGSTOP would not do: systemd sends SIGCONT right after SIGTERM, and the worker's
    # handler then runs. A process whose SIGTERM disposition is SIG_IGN never sees it.
    purelib = node.sh(VENV_PYTHON, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                      check=True).stdout.strip()
    pth = f"{purelib}/zz_lab_ignore_sigterm.pth"
    bound = re.search(r"^TimeoutStopSec=(\d+)$", node.sh("cat", WEB_UNIT, check=True).stdout,
                      re.M).group(1)
    try:
        node.sh("sh", "-c", f"cat > {pth}", input_text=IGNORE_SIGTERM, check=True)
        node.sh("systemctl", "restart", "web-worker.service", check=True)
        (pid,) = wait_until(lambda: (lambda p: p if len(p) == 1 else None)(node.processes()),
                            30, "the web worker started again")
        wait_until(lambda: [w["pid"] for w in cluster.coordinator.alive_web_workers()] == [pid],
                   60, "the restarted web worker registered alone")
        ignored = re.search(r"^SigIgn:\s*([0-9a-f]+)$",
                            node.sh("cat", f"/proc/{pid}/status", check=True).stdout, re.M)
        assert int(ignored.group(1), 16) & (1 << (signal.SIGTERM - 1)), "SIGTERM not ignored"
        since = node.sh("date", "+%s", check=True).stdout.strip()
        with cluster.traffic() as traffic:
            run = cluster.migrate(new)
    finally:
        node.sh("rm", "-f", pth)
    assert run.returncode == 0, run.output[-6000:]
    # The stop waited TimeoutStopSec, then systemd killed it, and the playbook says so.
    assert (f"the web worker on {old} did not exit within {bound}s of SIGTERM: systemd killed "
            "it; the Reaper fails that task, the new worker serves the queued ones") in (
                run.unfolded())
    journal = node.sh("journalctl", "--unit=web-worker.service", f"--since=@{since}",
                      "--no-pager", "--output=cat", check=True).stdout
    assert "State 'stop-sigterm' timed out. Killing." in journal, journal[-3000:]
    assert pid not in node.processes()
    # Drained first, it held no task when killed: none lost, none failed.
    cluster.assert_settled(traffic.outcome(), new)
