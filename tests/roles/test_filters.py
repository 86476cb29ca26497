"""The filter plugins: the worker role's (records, service manager states), the redis role's
(the ACL users) and the playbooks' (hosts that cannot be used, the workers the service
managers run). No Ansible run needed."""

from __future__ import annotations

import hashlib
import re

import coordinator_contract as contract
import jinja2
import psycopg2
import pytest
import yaml
from ansible.module_utils.common.parameters import remove_values

from module_utils import host_state
from tests.filter_kit import REPO, cluster, load, redis_role, worker

SETTINGS = {
    "node_name": "macbookair", "node_address": "192.168.0.43",
    "base_env": {"REDIS_HOST": "192.168.0.40", "REDIS_PORT": 6379, "SHUTDOWN_TIMEOUT": 30},
    "worker_env": {"OLLAMA_TIMEOUT": 120},
    "db": {"host": "192.168.0.40", "port": 5432, "name": "coordinator", "user": "coordinator",
           "password": "it's a \\ secret"},
    "scripts": {"web": "worker_web.py", "inference": "worker_infer.py"},
    "default_device": "cpu", "label_prefix": "jp.mapleharp.coordinator-",
    "config_dir": "/etc/coordinator-worker", "launchd_dir": "/Users/m/Library/LaunchAgents",
    "log_dir": "/Users/m/Library/Logs/coordinator",
}


def test_records_fill_in_every_default_and_keep_the_environment_apart():
    resolved = worker.worker_records(
        [{"name": "web-worker", "kind": "web"},
         {"name": "inference-worker", "kind": "inference", "state": "absent",
          "env": {"OLLAMA_MODEL": "llama3.2:3b"}}], **SETTINGS)
    web, infer = resolved["records"]
    assert web == {
        "name": "web-worker", "kind": "web", "state": "present",
        "worker_id": "web-worker-macbookair", "host": "192.168.0.43", "queues": ["tasks:web"],
        "label": "jp.mapleharp.coordinator-web-worker", "script": "worker_web.py",
        "unit": "web-worker.service", "env_file": "/etc/coordinator-worker/web-worker.env",
        "plist": "/Users/m/Library/LaunchAgents/jp.mapleharp.coordinator-web-worker.plist",
        "log": "/Users/m/Library/Logs/coordinator/web-worker.log",
    }
    assert (infer["worker_id"], infer["state"], infer["queues"]) == (
        "macbookair", "absent", ["tasks:cpu:macbookair"])
    # No record carries a secret: tasks loop over them, and -vvv prints loop items.
    assert "secret" not in repr(resolved["records"])
    env = resolved["envs"]["inference-worker"]
    assert env["PG_DSN"] == ("host=192.168.0.40 port=5432 dbname=coordinator user=coordinator "
                             "password='it\\'s a \\\\ secret'")
    assert (env["WORKER_DEVICE"], env["OLLAMA_MODEL"], env["OLLAMA_TIMEOUT"]) == (
        "cpu", "llama3.2:3b", "120")
    assert "WORKER_DEVICE" not in resolved["envs"]["web-worker"]
    assert all(isinstance(value, str) for value in env.values())


def test_with_a_token_key_each_worker_gets_its_own_token():
    resolved = worker.worker_records(
        [{"name": "web-worker", "kind": "web"}, {"name": "inference-worker",
                                                  "kind": "inference"}],
        **SETTINGS | {"base_env": SETTINGS["base_env"] | {"COORDINATOR_TOKEN": "operator"}},
        token_key="the-key")
    tokens = {name: env["COORDINATOR_TOKEN"] for name, env in resolved["envs"].items()}
    # The Coordinator's own check accepts each for its worker id, and for no other.
    assert contract.token_worker("the-key", tokens["web-worker"]) == "web-worker-macbookair"
    assert contract.token_worker("the-key", tokens["inference-worker"]) == "macbookair"
    assert "operator" not in tokens.values()
    assert "the-key" not in repr(resolved)
    without = worker.worker_records([{"name": "web-worker", "kind": "web"}], **SETTINGS)
    assert "COORDINATOR_TOKEN" not in without["envs"]["web-worker"]


def test_the_secrets_are_named_as_the_environment_file_spells_them():
    resolved = worker.worker_records(
        [{"name": "web-worker", "kind": "web"}], **SETTINGS
        | {"redis": {"user": "u", "password": 'r3dis "canary"'}}, token_key="the-key")
    env = resolved["envs"]["web-worker"]
    # What worker.env.j2 writes, and what sync_tree's diff then shows of it.
    text = "".join(f'{name}="{worker.worker_env_quote(value)}"\n'
                   for name, value in sorted(env.items()))
    assert "secret" in text and "canary" in text and "worker.web-worker" in text
    masked = remove_values(text, resolved["secrets"])
    assert "secret" not in masked and "canary" not in masked and "worker.web-worker" not in masked
    assert 'REDIS_PASSWORD="********"' in masked and 'COORDINATOR_TOKEN="********"' in masked
    assert "user=coordinator password='********'" in masked
    # The role reads a value back (worker_env_value) as the template quoted it.
    line = next(line for line in text.splitlines() if line.startswith("PG_DSN="))
    assert worker.worker_env_value({"rc": 0, "stdout": line}, "PG_DSN") == env["PG_DSN"]


def units_of(show: str) -> dict:
    """host_state's read of the units of a `systemctl show` (its Id lines name them)."""
    names = re.findall(r"^Id=(.+)$", show, re.M)
    return {"units": host_state.parse_units(names, show), "launchd_domain": None}


SHOW = """\
Id=inference-worker.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled
MainPID=812

Id=web-worker.service
LoadState=loaded
ActiveState=inactive
UnitFileState=enabled
MainPID=0
"""


def records_envs() -> dict:
    return worker.worker_records([{"name": "web-worker", "kind": "web"}], **SETTINGS)["envs"][
        "web-worker"]


def records(*names: str) -> list[dict]:
    return worker.worker_records([{"name": n, "kind": "web" if n.startswith("web") else
                                   "inference"} for n in names], **SETTINGS)["records"]


def test_systemd_states_say_installed_enabled_running_and_pid():
    states = {s["name"]: s for s in worker.worker_states(
        records("inference-worker", "web-worker"), units_of(SHOW))}
    assert {k: states["inference-worker"][k] for k in ("installed", "enabled", "running",
                                                       "pid")} == {
        "installed": True, "enabled": True, "running": True, "pid": 812}
    # Stopped but still enabled: it would start again at boot.
    assert {k: states["web-worker"][k] for k in ("installed", "enabled", "running", "pid")} == {
        "installed": True, "enabled": True, "running": False, "pid": 0}


def test_only_units_not_yet_as_asked_are_given_to_systemd_service():
    infer, web = records("inference-worker", "web-worker")
    # inference-worker active and enabled, web-worker inactive and enabled
    units = units_of(SHOW)["units"]
    assert cluster.units_not_as_asked(units, "started", True) == [web["unit"]]
    assert cluster.units_not_as_asked(units, "stopped", True) == [infer["unit"]]
    assert cluster.units_not_as_asked(units, "started", False) == [infer["unit"], web["unit"]]
    # A unit systemd did not answer for, or does not know, is always given to it.
    assert cluster.units_not_as_asked({infer["unit"]: None}, "started", True) == [infer["unit"]]
    failed = {**units[infer["unit"]], "ActiveState": "failed"}
    assert cluster.units_not_as_asked({infer["unit"]: failed}, "started", True) == [
        infer["unit"]]


def test_a_unit_systemd_does_not_know_is_not_installed():
    show = "Id=web-worker.service\nLoadState=not-found\nActiveState=inactive\nMainPID=0\n"
    [state] = worker.worker_states(records("web-worker"), units_of(show))
    assert (state["installed"], state["enabled"], state["running"]) == (False, False, False)


def test_launchd_states_from_host_states_read_of_the_agents_and_plists():
    web, infer = records("web-worker", "inference-worker")
    read = {"launchd_domain": "gui/501",
            "agents": {web["label"]: {"loaded": True, "running": True, "pid": 4242,
                                      "enabled": True},
                       infer["label"]: {"loaded": False, "running": False, "pid": 0,
                                        "enabled": False}},
            "files": {web["plist"]: {"type": "file", "mode": "0600"},
                      infer["plist"]: {"type": "file", "mode": "0600"}},
            "units": {}}
    states = {s["name"]: s for s in worker.worker_states([web, infer], read)}
    assert {k: states["web-worker"][k] for k in ("installed", "enabled", "running", "pid")} == {
        "installed": True, "enabled": True, "running": True, "pid": 4242}
    assert {k: states["inference-worker"][k] for k in ("installed", "enabled", "running",
                                                       "pid")} == {
        "installed": True, "enabled": False, "running": False, "pid": 0}
    # No plist: not installed, so not enabled either, whatever launchd says of the label.
    [gone] = worker.worker_states([web], {**read, "files": {web["plist"]: None}})
    assert (gone["installed"], gone["enabled"], gone["running"]) == (False, False, True)


def test_only_agents_not_yet_as_asked_are_given_to_launchd_agent():
    running = {"loaded": True, "running": True, "pid": 812, "enabled": True}
    agents = {"a": running, "b": {**running, "running": False, "pid": 0},
              "c": {"loaded": False, "running": False, "pid": 0, "enabled": False},
              "d": None}
    assert cluster.agents_not_as_asked(agents, "started", True) == ["b", "c", "d"]
    assert cluster.agents_not_as_asked(agents, "stopped", False) == ["a", "b", "d"]
    assert cluster.agents_not_as_asked(agents, "stopped", True) == ["a", "b", "c", "d"]
    # Enabled or not, as launchd_agent leaves it when not asked.
    assert cluster.agents_not_as_asked(agents, "stopped") == ["a", "b", "d"]


def test_only_directories_not_yet_in_place_are_given_to_file():
    files = {"/a": {"type": "directory", "mode": "0755"}, "/b": {"type": "directory",
                                                                  "mode": "0700"},
             "/c": {"type": "file", "mode": "0755"}, "/d": None}
    assert cluster.directories_not_in_place(["/a", "/b", "/c", "/d", "/e"], files, "0755") == [
        "/b", "/c", "/d", "/e"]
    assert cluster.paths_found(files) == ["/a", "/b", "/c"]
    # With an owner and group: a directory of another's is given to file too.
    owned = {"/a": {"type": "directory", "mode": "0700", "owner": "postgres", "group": "postgres"},
             "/b": {"type": "directory", "mode": "0700", "owner": "root", "group": "postgres"},
             "/c": {"type": "directory", "mode": "0700", "owner": "postgres", "group": "root"}}
    assert cluster.directories_not_in_place(["/a", "/b", "/c"], owned, "0700", "postgres",
                                            "postgres") == ["/b", "/c"]
    assert cluster.directories_not_in_place(["/a", "/b", "/c"], owned, "0700") == []


# -- the registration check (tasks/verify.yml) -------------------------------------------------

def expected_of(show: str = SHOW) -> list[dict]:
    return worker.expected_registrations(
        worker.worker_states(records("inference-worker", "web-worker"), units_of(show)),
        versions={"worker_infer.py": "1.0", "worker_web.py": "2.1"},
        envs={"inference-worker": {"COORDINATOR_URL": "https://10.0.0.1:8000/"},
              "web-worker": {"COORDINATOR_URL": "https://10.0.0.1:8000"}})


def test_the_versions_expected_are_the_ones_in_the_programs_shipped():
    import worker_infer
    import worker_web

    versions = worker.worker_versions(str(REPO / "files"), ["worker_web.py", "worker_infer.py",
                                                            "worker_web.py"])
    assert versions == {"worker_web.py": worker_web.VERSION,
                        "worker_infer.py": worker_infer.VERSION}


def test_the_build_follows_every_shipped_file_and_nothing_else(tmp_path):
    (tmp_path / "worker_web.py").write_text("VERSION = '1'\n")
    (tmp_path / "requirements-worker.txt").write_text("redis==5.0\n")
    (tmp_path / "notes.txt").write_text("not shipped\n")
    shipped = ["worker_web.py", "requirements-worker.txt"]
    first = worker.worker_build(str(tmp_path), shipped)
    assert first == worker.worker_build(str(tmp_path), list(reversed(shipped)))
    (tmp_path / "notes.txt").write_text("changed, still not shipped\n")
    assert worker.worker_build(str(tmp_path), shipped) == first
    (tmp_path / "requirements-worker.txt").write_text("redis==5.1\n")
    assert worker.worker_build(str(tmp_path), shipped) != first
    # Content moved from one file to the other is another code.
    (tmp_path / "requirements-worker.txt").write_text("redis==5.0\n")
    assert worker.worker_build(str(tmp_path), shipped) == first
    (tmp_path / "worker_web.py").write_text("VERSION = '1'\nredis==5.0\n")
    (tmp_path / "requirements-worker.txt").write_text("")
    assert worker.worker_build(str(tmp_path), shipped) != first
    with pytest.raises(Exception, match=r"cannot read .*worker_x.py to take the code's digest"):
        worker.worker_build(str(tmp_path), ["worker_x.py"])


def test_each_workers_environment_carries_the_build_when_given():
    given = worker.worker_records([{"name": "web-worker", "kind": "web"}],
                                  **{**SETTINGS, "build": "ab12"})
    assert given["envs"]["web-worker"][contract.WORKER_BUILD_ENV] == "ab12"
    assert contract.WORKER_BUILD_ENV not in records_envs()


def test_the_workers_written_are_those_one_of_whose_files_was_written():
    records = worker.worker_records([{"name": "web-worker", "kind": "web"},
                                     {"name": "infer", "kind": "inference"}], **SETTINGS)["records"]
    web, infer = records
    # sync_tree's updated names are relative to the directory it wrote; templates give paths.
    assert worker.workers_written(records, ["web-worker.service"]) == [web]
    assert worker.workers_written(records, [infer["env_file"]]) == [infer]
    assert worker.workers_written(records, [web["plist"], "infer.env"]) == records
    assert worker.workers_written(records, []) == []
    assert worker.workers_written(records, ["other.service", "web-worker.log"]) == []


def test_a_program_without_a_version_says_which_file(tmp_path):
    (tmp_path / "worker_x.py").write_text('NAME = "x"\nVERSION = compute()\n')
    with pytest.raises(Exception, match=r'worker_x.py has no top-level VERSION = "..."'):
        worker.worker_versions(str(tmp_path), ["worker_x.py"])
    with pytest.raises(Exception, match=r"cannot read the version of .*worker_y.py"):
        worker.worker_versions(str(tmp_path), ["worker_y.py"])


def test_expected_registrations_hold_the_shipped_version_systemds_pid_and_the_url():
    infer, web = expected_of()
    assert infer == {"name": "inference-worker", "unit": "inference-worker.service",
                     "log": "/Users/m/Library/Logs/coordinator/inference-worker.log",
                     "url": "https://10.0.0.1:8000", "worker_id": "macbookair",
                     "host": "192.168.0.43", "version": "1.0", "pid": 812}
    # Stopped: no process, pid 0.
    assert (web["version"], web["pid"]) == ("2.1", 0)


def test_with_several_coordinators_the_registry_is_read_from_the_first():
    infer, _ = worker.expected_registrations(
        worker.worker_states(records("inference-worker", "web-worker"), units_of(SHOW)),
        versions={"worker_infer.py": "1.0", "worker_web.py": "2.1"},
        envs={name: {"COORDINATOR_URL": "https://10.0.0.1:8000/, https://10.0.0.2:8000"}
              for name in ("inference-worker", "web-worker")})
    assert infer["url"] == "https://10.0.0.1:8000"


ALIVE = {"worker_id": "macbookair", "host": "192.168.0.43", "version": "1.0", "pid": 812,
         "alive": True}


@pytest.mark.parametrize(("listed", "missing"), [
    ([ALIVE], False),
    ({"workers": [ALIVE]}, False),
    ([ALIVE | {"pid": 813}], True),  # another process: a restart the Coordinator has not seen
    ([ALIVE | {"version": "0.9"}], True),  # the old code still runs
    ([ALIVE | {"host": "192.168.0.99"}], True),
    ([ALIVE | {"alive": False}], True),
    ([], True),
    (None, True),  # no answer
])
def test_a_registration_is_missing_unless_listed_alive_with_host_version_and_pid(listed,
                                                                                 missing):
    infer, _ = expected_of()
    assert worker.missing_registrations([infer], [listed]) == ([infer] if missing else [])


def test_a_worker_no_process_runs_is_always_missing():
    _, web = expected_of()
    listed = [{"worker_id": "web-worker-macbookair", "host": "192.168.0.43", "version": "2.1",
               "pid": 0, "alive": True}]
    assert worker.missing_registrations([web], [listed]) == [web]


def test_registered_workers_is_what_the_role_publishes():
    infer, _ = expected_of()
    assert worker.registered_workers([infer]) == {"inference-worker": {
        "worker_id": "macbookair", "host": "192.168.0.43", "version": "1.0", "pid": 812}}


def test_the_report_says_what_was_expected_what_the_coordinator_says_and_the_log():
    infer, web = expected_of()
    registry = [{"item": "https://10.0.0.1:8000", "status": 200,
                 "json": {"workers": [ALIVE | {"version": "0.9"}]}}]
    logs = [{"item": infer, "stdout_lines": ["starting (v0.9)", "registered"]},
            {"item": web, "stdout_lines": ["Traceback: boom"]}]
    report = worker.registration_report([infer, web], hostname="mac", registry=registry,
                                        logs=logs)
    first, second = report.split("; its last log lines: starting (v0.9) | registered; ")
    assert first == (
        "inference-worker (macbookair) on mac is not registered alive with the Coordinator at "
        "https://10.0.0.1:8000 as host 192.168.0.43, version 1.0, pid 812 (Coordinator says: "
        f"{ALIVE | {'version': '0.9'}})")
    assert second == (
        "web-worker (web-worker-macbookair) on mac is not registered alive with the "
        "Coordinator at https://10.0.0.1:8000 as host 192.168.0.43, version 2.1, pid ? (no "
        "process runs it) (Coordinator says: not registered); its last log lines: "
        "Traceback: boom")


def test_the_report_without_a_list_gives_the_error_and_without_a_check_question_marks():
    infer, _ = expected_of()
    failed = [{"item": "https://10.0.0.1:8000", "status": -1,
               "msg": "Status code was -1: Connection refused"}]
    assert "(Coordinator says: Status code was -1: Connection refused)" in (
        worker.registration_report([infer], hostname="mac", registry=failed))
    refused = [{"item": "https://10.0.0.1:8000", "status": 401, "json": {"detail": "bad token"},
                "msg": "Status code was 401 and not [200]: HTTP Error 401: Unauthorized"}]
    assert ("(Coordinator says: Status code was 401 and not [200]: HTTP Error 401: "
            "Unauthorized bad token)") in (
        worker.registration_report([infer], hostname="mac", registry=refused))
    # Stopped before the service manager was read: the bare record, nothing known of it.
    [record] = records("web-worker")
    assert worker.registration_report([record], hostname="mac") == (
        "web-worker (web-worker-macbookair) on mac is not registered alive with the "
        "Coordinator at ? as host 192.168.0.43, version ?, pid ? (Coordinator says: no "
        "answer); its last log lines: ")


def test_a_mac_whose_workers_get_no_route_to_the_lan_is_told_to_allow_its_interpreter():
    infer, _ = expected_of()
    logs = [{"item": infer, "stdout_lines": [
        "Redis check FAILED at 192.168.0.40:6379: Error 65 connecting to 192.168.0.40:6379. "
        "No route to host."]}]
    mac = {"interpreter": "/opt/homebrew/Cellar/python@3.12/3.12.8/bin/python3.12",
           "settings": "System Settings > Privacy & Security > Local Network"}
    report = worker.registration_report([infer], hostname="mac", logs=logs, local_network=mac)
    assert report.endswith(
        "; mac is a Mac whose workers, started by launchd, get EHOSTUNREACH (No route to host) "
        "on the LAN: macOS's Local Network privacy denies "
        "/opt/homebrew/Cellar/python@3.12/3.12.8/bin/python3.12 until it is allowed in System "
        "Settings > Privacy & Security > Local Network; allow it there (logged in at the "
        "console), then run again")
    # Linux (no local_network), or a Mac whose workers failed otherwise: no such line.
    assert "Local Network" not in worker.registration_report([infer], hostname="h", logs=logs)
    other = [{"item": infer, "stdout_lines": ["Connection refused"]}]
    assert "Local Network" not in worker.registration_report(
        [infer], hostname="mac", logs=other, local_network=mac)


@pytest.mark.parametrize(("result", "problem"), [
    ({"unreachable": True, "msg": 'Task failed: Data could not be sent to remote host '
      '"10.89.20.42". Make sure this host can be reached over ssh: ssh: connect to host '
      '10.89.20.42 port 22: Connection refused'},
     "lab-2 is unreachable (ssh: connect to host 10.89.20.42 port 22: Connection refused): "
     "bring it back (its network, sshd) or take it out of the inventory"),
    ({"failed": True, "msg": "Task failed: Missing sudo password"},
     "lab-2: sudo asks for a password and none was given: run with -K (--ask-become-pass) "
     "or set ansible_become_password (in the vault)"),
    ({"failed": True, "msg": "Task failed: Incorrect sudo password"},
     "lab-2: sudo refused the password given (-K or ansible_become_password): correct it"),
])
def test_a_host_that_cannot_be_used_is_named_with_what_to_do(result, problem):
    hostvars = {"lab-1": {"cluster_reach": {"changed": False}}, "lab-2": {"cluster_reach": result}}
    assert cluster.reach_problems(["lab-1", "lab-2"], hostvars) == [problem]


def test_hosts_with_the_same_problem_are_named_together():
    missing = {"failed": True, "msg": "Task failed: Missing sudo password"}
    hostvars = {name: {"cluster_reach": missing} for name in ("a", "b")}
    [line] = cluster.reach_problems(["a", "b"], hostvars)
    assert line.startswith("a, b: sudo asks for a password")


def test_an_unreachable_host_is_passed_over_only_if_allowed_and_a_coordinator_answered():
    down = {"unreachable": True, "msg": "ssh: connect to host 10.0.0.2 port 22: No route to host"}
    hosts = ["core", "second", "worker"]
    hostvars = {"core": {"cluster_reach": {"changed": False}}, "second": {"cluster_reach": down},
                "worker": {"cluster_reach": down}}
    unreached = cluster.unreached_hosts(hosts, hostvars)
    assert unreached == ["second", "worker"]
    # Of the unreachable hosts, only the ones allowed, while another Coordinator answered.
    assert cluster.passed_over(hosts, unreached, ["second"], ["core", "second"]) == ["second"]
    assert cluster.passed_over(hosts, unreached, [], ["core", "second"]) == []
    # Every Coordinator host down: nothing to go on through.
    assert cluster.passed_over(hosts, unreached, ["second"], ["second"]) == []
    # A Coordinator host outside the run (a --limit) does not answer for it either.
    assert cluster.passed_over(["second", "worker"], unreached, ["second"],
                               ["core", "second"]) == []


def test_the_outcome_of_reaching_the_hosts_says_who_is_passed_over_unusable_and_the_registry():
    down = {"unreachable": True, "msg": 'Task failed: Data could not be sent to remote host '
            '"10.0.0.2". Make sure this host can be reached over ssh: ssh: connect to host '
            '10.0.0.2 port 22: No route to host'}
    up = {"changed": False}
    # Only a Mac is asked about its console; the others' results say it was skipped.
    not_asked = {"cluster_console": {"changed": False, "skipped": True}}
    groups = {"coordinator": ["core", "second"], "database": ["core"], "redis": ["core"],
              "web_workers": ["worker"], "inference_workers": ["core", "worker"]}
    # "second" runs a Coordinator and nothing else; "core" runs the stores too.
    assert cluster.coordinator_only_hosts(groups) == ["second"]
    hosts = ["core", "second", "worker"]
    hostvars = {"core": {"cluster_reach": down, **not_asked},
                "second": {"cluster_reach": up, **not_asked},
                "worker": {"cluster_reach": up, **not_asked}}
    # The first Coordinator host down: the registry is read from the second; core is not a
    # host the run may go without, whatever it allows.
    outcome = cluster.reach_outcome(hosts, hostvars, groups, pass_over_coordinators=True)
    assert (outcome["passed_over"], outcome["registry_host"]) == ([], "second")
    assert outcome["unusable"] == ["core is unreachable (ssh: connect to host 10.0.0.2 port 22: No "
                                   "route to host): bring it back (its network, sshd) or take "
                                   "it out of the inventory"]
    hostvars = {"core": {"cluster_reach": up, **not_asked},
                "second": {"cluster_reach": down, **not_asked},
                "worker": {"cluster_reach": up, "cluster_console": {
                    "failed": True, "msg": "nobody is logged in at the console of worker"}}}
    outcome = cluster.reach_outcome(hosts, hostvars, groups, pass_over_coordinators=True)
    assert (outcome["passed_over"], outcome["registry_host"]) == (["second"], "core")
    # A Mac nobody is logged in at is unusable even when its facts answered.
    assert outcome["unusable"] == ["worker: nobody is logged in at the console of worker"]
    # site.yml converges every host: none is passed over.
    outcome = cluster.reach_outcome(hosts, hostvars, groups)
    assert outcome["passed_over"] == []
    assert outcome["unusable"][0].startswith("second is unreachable (ssh: connect to host")
    # No Coordinator in the inventory: no registry to read.
    assert cluster.reach_outcome(["worker"], hostvars, {})["registry_host"] is None


def test_worker_groups_adds_the_groups_a_run_made_for_a_leaving_web_worker():
    assert cluster.worker_groups({"web_workers": []}) == ["web_workers", "inference_workers"]
    assert cluster.worker_groups({"migrate_web_old": ["a"]}, "migrate_web_old") == [
        "web_workers", "inference_workers", "migrate_web_old"]
    assert cluster.worker_groups({}, "site_web_worker_leaving") == [
        "web_workers", "inference_workers"]


def test_running_workers_and_their_addresses_for_the_registry():
    inference, web = worker.worker_states(records("inference-worker", "web-worker"),
                                          units_of(SHOW))
    hostvars = {"macbookair": {"worker_status": [inference, web]}, "other": {}}
    assert cluster.running_workers(["macbookair", "other"], hostvars, "inference") == [
        {"host": "192.168.0.43", "pid": 812}]
    assert cluster.running_workers(["macbookair"], hostvars, "web") == []
    assert cluster.worker_addresses(["macbookair", "other"], hostvars) == {
        "192.168.0.43": "macbookair"}


# The lab with lab-worker-slow added to inference_workers (a node being added), and a host in
# no group.
LAB_GROUPS = {
    "all": ["lab-ai-core", "lab-worker-slow", "lab-macbookair", "lab-outsider"],
    "coordinator": ["lab-ai-core"], "database": ["lab-ai-core"], "redis": ["lab-ai-core"],
    "inference_workers": ["lab-ai-core", "lab-macbookair", "lab-worker-slow"],
    "web_workers": ["lab-macbookair"]}
WORKER_GROUPS = ["web_workers", "inference_workers"]
GRANTS_FROM_EVERY_HOST = ("the grants written on the database and Redis hosts are derived from "
                          "the workers of every worker host")


def test_left_out_hosts_are_every_inventory_host_outside_the_run_with_its_address():
    hostvars = {"lab-ai-core": {"node_address": "10.89.20.40"},
                "lab-worker-slow": {"node_address": "10.89.20.42"},
                # The address its workers register with, when the inventory sets another.
                "lab-macbookair": {"node_address": "10.89.20.43",
                                   "worker_node_address": "192.168.7.43"},
                "lab-outsider": {}}
    assert cluster.left_out_hosts(["lab-worker-slow"], LAB_GROUPS, hostvars, "web_workers") == [
        {"host": "10.89.20.40", "name": "lab-ai-core", "declared_in": None},
        {"host": "192.168.7.43", "name": "lab-macbookair", "declared_in": "web_workers"}]
    assert cluster.left_out_hosts(LAB_GROUPS["all"], LAB_GROUPS, hostvars, "web_workers") == []


@pytest.mark.parametrize(("run", "left_out"), [
    # The new worker host alone: the database and Redis host, which then needs every worker
    # host, whose grants it writes.
    (["lab-worker-slow"], {
        "lab-ai-core": "the database and Redis host, where lab-worker-slow's pg_hba.conf "
                       "line, login, grant and Redis user are written",
        "lab-macbookair": GRANTS_FROM_EVERY_HOST}),
    (["lab-worker-slow", "lab-ai-core"], {"lab-macbookair": GRANTS_FROM_EVERY_HOST}),
    (["lab-ai-core"], {"lab-worker-slow": GRANTS_FROM_EVERY_HOST,
                       "lab-macbookair": GRANTS_FROM_EVERY_HOST}),
    # Every worker, database and Redis host: a host in no group is needed by none.
    (["lab-ai-core", "lab-worker-slow", "lab-macbookair"], {}),
    (["lab-outsider"], {}),
])
def test_site_left_out_follows_what_each_host_of_the_run_needs(run, left_out):
    assert cluster.site_left_out(run, LAB_GROUPS, WORKER_GROUPS) == left_out


def test_site_left_out_names_each_store_and_every_worker_host_for_a_store_alone():
    groups = {**LAB_GROUPS, "redis": ["lab-redis"], "all": [*LAB_GROUPS["all"], "lab-redis"]}
    assert cluster.site_left_out(["lab-redis"], groups, WORKER_GROUPS) == {
        **dict.fromkeys(["lab-ai-core", "lab-macbookair", "lab-worker-slow"],
                        GRANTS_FROM_EVERY_HOST)}
    assert cluster.site_left_out(["lab-worker-slow"], groups, WORKER_GROUPS) == {
        "lab-ai-core": "the database host, where lab-worker-slow's pg_hba.conf line, login "
                       "and grant are written",
        "lab-redis": "the Redis host, where lab-worker-slow's Redis user is written",
        "lab-macbookair": GRANTS_FROM_EVERY_HOST}


def test_limit_refusal_names_the_hosts_why_what_is_true_and_the_exact_limit():
    hosts = ["lab-ai-core", "lab-worker-slow", "lab-macbookair"]
    both = {"lab-macbookair": "why b", "lab-ai-core": "why a"}
    assert cluster.limit_refusal(both, ["lab-worker-slow"], hosts, "Nothing was changed") == (
        "--limit leaves out hosts this run needs: lab-ai-core (why a); lab-macbookair (why b). "
        "Nothing was changed: run again with --limit lab-ai-core,lab-worker-slow,"
        "lab-macbookair, which is every host: the same as no --limit")
    same = {"lab-macbookair": "why", "lab-ai-core": "why"}
    assert cluster.limit_refusal(same, [], [*hosts, "lab-outsider"], "Now") == (
        "--limit leaves out hosts this run needs: lab-ai-core, lab-macbookair (why). Now: run "
        "again with --limit lab-ai-core,lab-macbookair")


def test_process_counts_name_each_host_that_differs():
    # `pgrep -f` prints one pid a line and exits 1 when nothing matches.
    results = [
        {"item": "new", "rc": 0, "stdout": "4242"}, {"item": "old", "rc": 0, "stdout": "812"},
        {"item": "core", "rc": 1, "stdout": ""},
        {"item": "gone", "unreachable": True, "msg": "Task failed: Data could not be sent to "
         "remote host. Make sure this host can be reached over ssh: ssh: connect to host "
         "10.0.0.9 port 22: No route to host"}]
    assert cluster.process_problems(results, {"new": 1}, "worker_web.py") == [
        "old runs 1 worker_web.py processes, expected 0: two copies race for their queue; "
        "stop the one its service manager does not own",
        "gone does not answer (ssh: connect to host 10.0.0.9 port 22: No route to host)"]
    assert cluster.process_problems([{"item": "new", "rc": 1, "stdout": ""}], {"new": None},
                                    "worker_web.py") == ["new runs no worker_web.py"]
    assert cluster.process_problems([{"item": "new", "rc": 0, "stdout": "4242\n4343\n"}],
                                    {"new": None}, "worker_web.py") == []


def test_process_count_is_the_number_of_pid_lines():
    two = [{"item": "new", "rc": 0, "stdout": "4242\n4343"}]
    assert cluster.process_problems(two, {"new": 1}, "worker_web.py") == [
        "new runs 2 worker_web.py processes, expected 1: two copies race for their queue; "
        "stop the one its service manager does not own"]
    assert cluster.process_problems(two, {"new": 2}, "worker_web.py") == []


def test_a_pgrep_that_refuses_its_options_is_named_not_read_as_no_process():
    # macOS's pgrep refuses a GNU long option with its usage and exit 2 (STATUS_BADUSAGE):
    # that is no answer about the worker, and a move must not roll back on it as "runs none".
    usage = ("pgrep: illegal option -- -\nusage: pgrep [-Lfilnoqvx] [-d delim] [-F pidfile] "
             "[-G gid]\n             [-P ppid] [-U uid] [-g pgrp] [-t tty] [-u euid] pattern ...")
    refused = [{"item": "macbookair", "rc": 2, "stdout": "", "stderr": usage}]
    assert cluster.process_problems(refused, {"macbookair": None}, "worker_web.py") == [
        "macbookair cannot count its worker_web.py processes: pgrep exited 2 (pgrep: illegal "
        "option -- - usage: pgrep [-Lfilnoqvx] [-d delim] [-F pidfile] [-G gid] [-P ppid] "
        "[-U uid] [-g pgrp] [-t tty] [-u euid] pattern ...)"]


def test_no_two_filter_plugins_share_a_filter_name():
    # Ansible loads the playbook's and every role's filter_plugins into one namespace: two
    # filters of one name make the template call whichever was loaded last.
    owners: dict[str, list[str]] = {}
    for path in sorted(REPO.glob("filter_plugins/*.py")) + sorted(
            REPO.glob("roles/*/filter_plugins/*.py")):
        for name in load(path).FilterModule().filters():
            owners.setdefault(name, []).append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in owners.items() if len(paths) > 1} == {}


def models(**by_host: tuple[str, str | None, str]) -> dict[str, dict]:
    return {host: {"worker_model": {"name": name, "digest": digest, "error": error}}
            for host, (name, digest, error) in by_host.items()}


def test_model_digest_problems_name_both_digests_and_what_to_do():
    same, other = "a" * 64, "b" * 64
    ok = models(new=("m:q4", same, ""), old=("m:q4", same, ""))
    assert cluster.model_digest_problems(["new"], ["old"], ok) == []
    moved = models(new=("m:q4", other, ""), old=("m:q4", same, ""))
    assert cluster.model_digest_problems(["new"], ["old"], moved) == [
        f"same model name, other weights: new has m:q4 {other[:12]}, old serves {same[:12]}: "
        f"pull {same} on new or pin it, or pass -e migrate_web_allow_other_weights=true"]
    renamed = models(new=("n:q8", other, ""), old=("m:q4", same, ""))
    assert cluster.model_digest_problems(["new"], ["old"], renamed) == [
        CHANGE.format(old="old", served="m:q4", digest=same[:12], wanted="n:q8", new="new")]


# What a move that would also change the model says: what the old web worker serves, what
# the inventory asks, and where a model is changed.
CHANGE = ("the web worker on {old} serves {served} (digest {digest}), the inventory names "
          "{wanted} for {new}: a move keeps the model, so name {served} in the inventory again "
          "(worker_ollama_model; cluster_model in inventory/home) for the move, then change "
          "the model with upgrade-model.yml (docs/upgrade-model.md)")


def test_registered_model_is_the_model_the_alive_worker_registered_with():
    workers = [{"worker_id": "web-worker-a", "models": ["m:q4"]},
               {"worker_id": "web-worker-b", "models": []}]
    assert cluster.registered_model(workers, "web-worker-a") == "m:q4"
    # Registered no model (a web worker from before it did), or not alive: nothing known.
    assert cluster.registered_model(workers, "web-worker-b") is None
    assert cluster.registered_model(workers, "web-worker-c") is None
    assert cluster.registered_model(None, "web-worker-a") is None


def test_model_change_problems_name_what_is_served_what_is_asked_and_where_to_change_it():
    digest = "a" * 64
    # The new host's Ollama does not have the inventory's model yet: only names count.
    changed = models(new=("n:q8", None, ""), old=("m:q4", digest, ""))
    assert cluster.model_change_problems(["new"], ["old"], changed) == [
        CHANGE.format(old="old", served="m:q4", digest=digest[:12], wanted="n:q8", new="new")]
    # Names as Ollama matches them: llama3.2 is llama3.2:latest.
    same = models(new=("llama3.2", None, ""), old=("llama3.2:latest", digest, ""))
    assert cluster.model_change_problems(["new"], ["old"], same) == []
    # An old Ollama that cannot be asked still has its worker's model named; no digest.
    down = models(new=("n:q8", None, ""), old=("m:q4", None, "Ollama not reachable at x"))
    assert cluster.model_change_problems(["new"], ["old"], down) == [
        CHANGE.format(old="old", served="m:q4", digest="none", wanted="n:q8", new="new")]
    # No old host, or one that published no model: nothing to keep.
    assert cluster.model_change_problems(["new"], [], changed) == []
    assert cluster.model_change_problems(["new"], ["gone"], {**changed, "gone": {}}) == []


def test_model_digest_problems_when_an_ollama_cannot_be_asked_or_has_no_model():
    down = models(new=("m", "a" * 64, ""), old=("m", None, "Ollama not reachable at x"))
    assert cluster.model_digest_problems(["new"], ["old"], down) == [
        "cannot tell which weights old's web worker serves (Ollama not reachable at x): start "
        "its Ollama, or pass -e migrate_web_allow_other_weights=true"]
    # No model on the old host: it serves raw results, there are no weights to keep.
    assert cluster.model_digest_problems(["new"], ["old"],
                                         models(new=("m", "a" * 64, ""), old=("m", None, ""))
                                         ) == []
    assert cluster.model_digest_problems(["new"], [], models(new=("m", "a" * 64, ""))) == []


def test_model_summary_names_each_host_its_model_and_digest():
    hostvars = models(a=("m:q4", "c" * 64, ""), b=("m:q4", None, "down"))
    assert cluster.model_summary(["a", "b"], hostvars) == (
        f"a: m:q4 (digest {'c' * 12}); b: m:q4 (digest none)")


@pytest.mark.parametrize(("result", "value"), [
    ({"rc": 0, "stdout": 'OLLAMA_MODEL="hf.co/x/y:Q4_K_M"'}, "hf.co/x/y:Q4_K_M"),
    ({"rc": 0, "stdout": 'OLLAMA_MODEL="a \\"b\\" \\\\c"'}, 'a "b" \\c'),
    ({"rc": 0, "stdout": "llama3.2:3b\n"}, "llama3.2:3b"),  # plutil -extract ... raw
    ({"rc": 1, "stdout": ""}, None),
    ({"rc": 2, "stdout": "", "stderr": "No such file"}, None),
])
def test_worker_env_value_reads_what_the_role_wrote(result, value):
    assert worker.worker_env_value(result, "OLLAMA_MODEL") == value


WEB = {"name": "web-worker", "kind": "web", "state": "present", "worker_id": "web-worker-b",
       "host": "10.0.0.2"}
INFER = {"name": "inference-worker", "kind": "inference", "state": "present",
         "worker_id": "b", "host": "10.0.0.2"}


def test_model_probes_reach_only_the_given_workers_taking_turns():
    gone = {**INFER, "worker_id": "old", "state": "absent"}
    assert cluster.model_probes([WEB, INFER, gone]) == [
        {"task_type": "web_search", "target_worker": None, "worker_host": "10.0.0.2"},
        {"task_type": "chat", "target_worker": "b", "worker_host": "10.0.0.2"}]
    turns = cluster.model_probes([WEB, INFER], 5)
    assert [probe["task_type"] for probe in turns] == ["web_search", "chat"] * 2 + ["web_search"]
    assert cluster.model_probes([], 20) == []


def done(seconds: float, fallback: bool = False) -> dict:
    return {"status": "done", "seconds": seconds, "fallback": fallback}


def test_sample_stats_count_failures_fallbacks_and_percentiles():
    results = [done(s) for s in (1, 2, 3, 4, 5, 6, 7, 8, 9)] + [done(10, True)] + [
        {"status": "failed", "error": "Ollama at x answered HTTP 500"},
        {"failed": True, "msg": "task t still 'queued' after 120s: no worker took it"}]
    stats = cluster.sample_stats(results)
    assert stats == {"count": 12, "failed": 2, "first_error": "Ollama at x answered HTTP 500",
                     "fallback_rate": 0.1, "p50": 5.0, "p95": 10.0}
    assert cluster.sample_stats([])["p95"] is None


def test_canary_gates_say_which_gate_failed_and_by_how_much():
    baseline = {"count": 20, "failed": 0, "first_error": None, "fallback_rate": 0.0,
                "p50": 0.4, "p95": 0.5}
    assert cluster.canary_gates(baseline, {**baseline, "p95": 0.6}) == []
    slow = {**baseline, "p50": 1.4, "p95": 1.6}
    assert cluster.canary_gates(baseline, slow) == [
        "gate 'p95': 1.60 s on the canary, 0.50 s before: +220%, at most +20% allowed"]
    assert cluster.canary_gates(baseline, slow, max_p95_increase=3.0) == []
    broken = {**baseline, "failed": 3, "first_error": "boom", "fallback_rate": 0.25}
    assert cluster.canary_gates(baseline, broken) == [
        "gate 'none failed': 3 of 20 tasks failed (first: boom)",
        "gate 'fallback rate': 25% on the canary, 0% before, at most 0% allowed"]


def test_hosts_to_upgrade_plan_and_summary_rows():
    hostvars = {
        "a": {"worker_model": {"name": "new"}, "upgrade_model_from": ["old"],
              "upgrade_model_row": {"model": "new", "digest": "d" * 64, "verdict": "kept",
                                    "baseline": {"p50": 0.4, "p95": 0.5},
                                    "sample": {"p50": 0.41, "p95": 0.52, "fallback_rate": 0.0}}},
        "b": {"worker_model": {"name": "new"}, "upgrade_model_from": ["new"],
              "upgrade_model_row": {"model": "new", "digest": "e" * 64,
                                    "verdict": "already on it"}},
        "c": {"worker_model": {"name": "new"}, "upgrade_model_from": []},
    }
    assert cluster.hosts_to_upgrade(["a", "b", "c"], hostvars) == ["a", "c"]
    assert cluster.upgrade_plan(["a", "b", "c"], hostvars, "a") == (
        "canary a; a: old -> new; b: new (kept); c: no worker installed -> new")
    assert cluster.upgrade_rows(["a", "b", "c"], hostvars) == [
        "host | model | digest | before p50/p95 s | after p50/p95 s | fallback | verdict",
        f"a | new | {'d' * 12} | 0.40/0.50 | 0.41/0.52 | 0% | kept",
        f"b | new | {'e' * 12} | -/- | -/- | - | already on it",
        "c | - | none | -/- | -/- | - | not reached"]


def test_upgrades_match_model_names_by_the_contracts_rule():
    # llama3.2 is llama3.2:latest (coordinator_contract.same_model): a host already serving
    # it is not upgraded again, and the plan says it is kept.
    hostvars = {
        "a": {"worker_model": {"name": "llama3.2"}, "upgrade_model_from": ["llama3.2:latest"]},
        "b": {"worker_model": {"name": "Llama3.2:latest"}, "upgrade_model_from": ["llama3.2"]},
        "c": {"worker_model": {"name": "llama3.2:3b"}, "upgrade_model_from": ["llama3.2"]},
    }
    assert cluster.has_model(["llama3.2:latest"], "llama3.2")
    assert not cluster.has_model(["llama3.2:1b"], "llama3.2")
    assert cluster.hosts_to_upgrade(["a", "b", "c"], hostvars) == ["c"]
    assert cluster.upgrade_plan(["a", "b", "c"], hostvars, "c") == (
        "canary c; a: llama3.2:latest (kept); b: llama3.2 (kept); c: llama3.2 -> llama3.2:3b")


@pytest.mark.parametrize(("wanted", "serving", "switch"), [
    ("llama3.2", ["llama3.2:latest"], False),
    ("llama3.2:latest", ["llama3.2"], False),
    ("llama3.2:3b", ["llama3.2"], True),
    ("llama3.2", [], True),
])
def test_upgrade_model_switches_only_to_another_model(wanted, serving, switch):
    # The playbook's own expression, rendered with the playbooks' filters.
    plays = yaml.safe_load((REPO / "upgrade-model.yml").read_text())
    (expression,) = {play["vars"]["upgrade_model__switch"] for play in plays
                     if "upgrade_model__switch" in play.get("vars", {})}
    env = jinja2.Environment()
    env.filters.update(cluster.FilterModule().filters())
    rendered = env.from_string(expression).render(
        worker_model={"name": wanted}, upgrade_model_from=serving)
    assert rendered == str(switch)


pg_role = load(REPO / "roles" / "postgresql_access" / "filter_plugins" / "pg_hba.py")


def test_with_a_db_key_each_host_logs_in_as_its_own_login_which_the_database_side_makes():
    db = SETTINGS["db"] | {"password_key": "db-key", "login_host": "macbookair"}
    resolved = worker.worker_records([{"name": "web-worker", "kind": "web"}],
                                     **SETTINGS | {"db": db})
    dsn = resolved["envs"]["web-worker"]["PG_DSN"]
    # What the postgresql_access role creates on the database host, from the same key.
    (login,) = pg_role.worker_db_logins(["macbookair"], "db-key")
    assert dsn == ("host=192.168.0.40 port=5432 dbname=coordinator "
                   f"user={login['name']} password='{login['password']}'")
    assert login["name"] == "worker_macbookair"
    # Neither the Coordinator's login nor its password reaches the worker host.
    assert "secret" not in dsn and "user=coordinator" not in dsn
    assert cluster.worker_db_login("macbookair", "db-key") == {
        "name": login["name"], "password": login["password"]}
    assert pg_role.worker_db_group() == contract.WORKER_DB_GROUP


def test_with_the_cluster_ca_the_dsn_requires_tls_and_a_certificate_naming_the_database():
    ca = cluster.cluster_tls_files("/Users/m/.coordinator-cluster/tls/")["ca"]
    assert ca == "/Users/m/.coordinator-cluster/tls/ca.crt"
    db = SETTINGS["db"] | {"ssl_root_cert": ca}
    dsn = worker.worker_records([{"name": "web-worker", "kind": "web"}],
                                **SETTINGS | {"db": db})["envs"]["web-worker"]["PG_DSN"]
    assert dsn.endswith(f" sslmode=verify-full sslrootcert='{ca}'")
    # libpq reads it back as the role meant it.
    parsed = psycopg2.extensions.parse_dsn(dsn)
    assert (parsed["sslmode"], parsed["sslrootcert"]) == ("verify-full", ca)
    assert "sslmode" not in worker.worker_records([{"name": "web-worker", "kind": "web"}],
                                                  **SETTINGS)["envs"]["web-worker"]["PG_DSN"]


def test_with_several_database_hosts_libpq_takes_the_one_that_accepts_writes():
    """A primary and its standbys (docs/scaling.md): libpq tries them in turn and keeps the
    first whose session is not read-only."""
    def dsn_for(host: str) -> dict:
        db = SETTINGS["db"] | {"host": host}
        dsn = worker.worker_records([{"name": "web-worker", "kind": "web"}],
                                    **SETTINGS | {"db": db})["envs"]["web-worker"]["PG_DSN"]
        return psycopg2.extensions.parse_dsn(dsn)

    several = dsn_for("10.0.0.1,10.0.0.2")
    assert (several["host"], several["target_session_attrs"]) == ("10.0.0.1,10.0.0.2",
                                                                  "read-write")
    assert "target_session_attrs" not in dsn_for("10.0.0.1")


KEY = "the-workers-key-from-the-vault"


def test_with_a_redis_key_each_host_logs_in_as_its_own_user_which_the_redis_side_makes():
    redis = {"user": "", "password": "", "password_key": KEY, "login_host": "macbookair"}
    resolved = worker.worker_records(
        [{"name": "web-worker", "kind": "web"},
         {"name": "inference-worker", "kind": "inference", "env": {"WORKER_DEVICE": "gpu"}}],
        **SETTINGS, redis=redis)
    env = resolved["envs"]["web-worker"]
    login = cluster.worker_redis_login("macbookair", KEY)
    assert (env["REDIS_USERNAME"], env["REDIS_PASSWORD"]) == (login["name"], login["password"])
    assert login["name"] == "worker_macbookair"
    # Not the database password: the same key, another label.
    assert login["password"] != cluster.worker_db_login("macbookair", KEY)["password"]
    assert [r["queues"] for r in resolved["records"]] == [["tasks:web"], ["tasks:gpu:macbookair"]]
    # The redis role's line for this host holds only the hash of that password.
    (grant,) = redis_role.redis_worker_grants(
        {"web_workers": ["macbookair"]}, {"macbookair": {"worker_status": resolved["records"]}},
        ["web_workers", "inference_workers"])
    lines = redis_role.redis_acl_lines([grant], admin_user="admin", admin_password="a" * 20,
                                       coordinator_user="coordinator",
                                       worker_password_key=KEY)
    digest = hashlib.sha256(login["password"].encode()).hexdigest()
    assert lines[-1] == (
        f"user worker_macbookair on #{digest} resetchannels ~processing:macbookair "
        "~processing:web-worker-macbookair ~tasks:gpu:macbookair ~tasks:web "
        "%R~drain:macbookair %R~drain:web-worker-macbookair "
        "-@all +ping +llen +lpos +rpush +lindex +blmove +lrem +exists")
    assert login["password"] not in "\n".join(lines)


def test_with_the_cluster_ca_the_workers_speak_tls_to_redis_and_verify_it():
    ca = cluster.cluster_tls_files("/etc/coordinator-cluster/tls")["ca"]
    redis = {"user": "", "password": "", "password_key": KEY, "login_host": "macbookair"}
    records = worker.worker_records([{"name": "web-worker", "kind": "web"}], **SETTINGS,
                                    redis=redis | {"ca_file": ca})
    assert records["envs"]["web-worker"]["REDIS_CA_FILE"] == "/etc/coordinator-cluster/tls/ca.crt"
    plain = worker.worker_records([{"name": "web-worker", "kind": "web"}], **SETTINGS,
                                  redis=redis | {"ca_file": ""})
    assert "REDIS_CA_FILE" not in plain["envs"]["web-worker"]


def test_with_the_cluster_ca_the_workers_verify_the_coordinators_https():
    ca = cluster.cluster_tls_files("/etc/coordinator-cluster/tls")["ca"]
    records = worker.worker_records([{"name": "web-worker", "kind": "web"}], **SETTINGS,
                                    coordinator_ca_file=ca)
    assert records["envs"]["web-worker"]["COORDINATOR_CA_FILE"] == (
        "/etc/coordinator-cluster/tls/ca.crt")
    plain = worker.worker_records([{"name": "web-worker", "kind": "web"}], **SETTINGS)
    assert "COORDINATOR_CA_FILE" not in plain["envs"]["web-worker"]


def status(address: str, *records: tuple[str, str, str, list[str]]) -> dict:
    return {"worker_status": [{"kind": kind, "worker_id": wid, "state": state, "queues": queues,
                               "host": address}
                              for kind, wid, state, queues in records]}


GRANT_HOSTVARS = {
    "core": status("192.168.0.40", ("inference", "core", "present", ["tasks:cpu:core"]),
                   ("web", "web-worker-core", "absent", ["tasks:web"])),
    "air": status("192.168.0.43", ("inference", "air", "present", ["tasks:cpu:air"]),
                  ("web", "web-worker-air", "present", ["tasks:web"])),
    "gone": status("192.168.0.44", ("web", "web-worker-gone", "absent", ["tasks:web"])),
}
GRANT_GROUPS = {"inference_workers": ["core", "air"], "web_workers": ["air"]}
pg_filters = pg_role.FilterModule().filters()


def test_redis_grants_follow_the_groups_and_each_hosts_present_workers():
    grants = redis_role.redis_worker_grants(GRANT_GROUPS, GRANT_HOSTVARS,
                                            ["web_workers", "inference_workers"])
    assert grants == [
        {"host": "air", "queues": ["tasks:cpu:air", "tasks:web"],
         "worker_ids": ["air", "web-worker-air"], "worker_hosts": ["192.168.0.43"]},
        {"host": "core", "queues": ["tasks:cpu:core"], "worker_ids": ["core"],
         "worker_hosts": ["192.168.0.40"]},
    ]
    # A web worker being moved away keeps its queue until it is stopped.
    kept = redis_role.redis_worker_grants(GRANT_GROUPS, GRANT_HOSTVARS, ["web_workers"], ["core"])
    assert kept[1] == {"host": "core", "queues": ["tasks:cpu:core", "tasks:web"],
                       "worker_ids": ["core", "web-worker-core"],
                       "worker_hosts": ["192.168.0.40"]}
    # A group missing from the inventory is no host.
    assert redis_role.redis_worker_grants(GRANT_GROUPS, GRANT_HOSTVARS, ["rag_workers"]) == []


def test_redis_grants_need_the_worker_records():
    with pytest.raises(ValueError) as caught:
        redis_role.redis_worker_grants({"web_workers": ["air"]}, {"air": {}}, ["web_workers"])
    assert str(caught.value) == (
        "air published no worker records (worker_status): run the worker role's `tasks_from: "
        "status` on every worker host before the redis and postgresql_access roles (site.yml "
        "and migrate-web.yml do), or set their grants (redis_workers, "
        "postgresql_access_workers)")


def test_postgresql_grants_are_the_redis_grants_under_each_hosts_own_login():
    # One derivation: the two roles' filters are the contract's (each loads its own copy).
    for derive in (pg_filters["worker_grants"],
                   redis_role.FilterModule().filters()["redis_worker_grants"]):
        assert derive.__code__.co_filename == contract.worker_grants.__code__.co_filename
        assert derive.__qualname__ == "worker_grants"
    grants = pg_filters["worker_grants"](GRANT_GROUPS, GRANT_HOSTVARS,
                                         ["web_workers", "inference_workers"], ["core"])
    # Only hosts that get a login get a row (none without the worker key).
    assert pg_filters["worker_db_grants"](grants, ["air", "core"]) == [
        {"login": "worker_air", "host": "air", "worker_hosts": ["192.168.0.43"],
         "queues": ["tasks:cpu:air", "tasks:web"], "worker_ids": ["air", "web-worker-air"]},
        {"login": "worker_core", "host": "core", "worker_hosts": ["192.168.0.40"],
         "queues": ["tasks:cpu:core", "tasks:web"], "worker_ids": ["core", "web-worker-core"]},
    ]
    assert pg_filters["worker_db_grants"](grants, ["air"])[0]["login"] == "worker_air"
    assert pg_filters["worker_db_grants"](grants, []) == []


def test_redis_acl_lines_disable_default_and_refuse_what_cannot_be_written():
    kwargs = {"admin_user": "admin", "admin_password": "p" * 20,
              "coordinator_user": "coordinator", "worker_password_key": "k" * 20}
    lines = redis_role.redis_acl_lines([], **kwargs)
    assert lines[0] == "user default off resetkeys resetchannels -@all"
    assert lines[1].startswith("user admin on #") and lines[1].endswith(" ~* &* +@all")
    assert lines[2].endswith(" resetchannels ~tasks:* ~processing:* ~drain:* -@all +ping +llen "
                             "+lpush +lrange +multi +exec +discard +client|setname +set +del")
    assert "p" * 20 not in "\n".join(lines)
    # A worker id with glob characters matches itself only.
    (line,) = redis_role.redis_acl_lines(
        [{"host": "h", "queues": [], "worker_ids": ["a*b"]}], **kwargs)[3:]
    assert " ~processing:a\\*b " in line
    with pytest.raises(redis_role.RedisAclError, match="no spaces"):
        redis_role.redis_acl_lines([{"host": "h", "queues": ["a b"], "worker_ids": []}],
                                   **kwargs)
    with pytest.raises(redis_role.RedisAclError, match="redis_worker_password_key"):
        redis_role.redis_acl_lines([{"host": "h", "queues": [], "worker_ids": []}],
                                   **kwargs | {"worker_password_key": ""})
    with pytest.raises(redis_role.RedisAclError, match="must differ"):
        redis_role.redis_acl_lines([], **kwargs | {"coordinator_user": "admin"})


def test_a_rendered_file_is_in_place_only_with_its_text_owner_group_and_mode():
    text = "user admin on #0123 ~* &* +@all\n"
    found = {"type": "file", "owner": "redis", "group": "redis", "mode": "0600",
             "checksum": hashlib.sha1(text.encode()).hexdigest()}
    asked = {"src": "users.acl.j2", "owner": "redis", "group": "redis", "mode": "0600"}
    assert cluster.rendered_in_place(found, text, asked)
    assert cluster.rendered_in_place(found, text, {"mode": "0600"})  # owner, group: any
    assert not cluster.rendered_in_place(found, text + "\n", asked)
    for key, other in (("owner", "root"), ("group", "root"), ("mode", "0640")):
        assert not cluster.rendered_in_place(found, text, {**asked, key: other}), key
    assert not cluster.rendered_in_place(None, text, asked)
    assert not cluster.rendered_in_place({**found, "type": "link"}, text, asked)


def test_unset_secrets_names_each_secret_missing_empty_placeholder_or_not_text() -> None:
    names = ["a", "b", "c", "d", "e"]
    assert cluster.unset_secrets(names, ["x", "", "CHANGE_ME", 5, None]).startswith(
        "b, c, d, e are not set (missing, empty or still CHANGE_ME): add them to ")
    assert cluster.unset_secrets(names[:1], [""]).startswith("a is not set (missing, empty "
                                                             "or still CHANGE_ME): add it to ")
    assert cluster.unset_secrets(names[:1], ["change_me"]) == ""


def test_models_to_pull_are_those_ollama_does_not_list_with_the_pinned_weights() -> None:
    digest = "a" * 64
    tags = {"status": 200, "json": {"models": [{"name": "llama3.2:latest", "model":
                                                "llama3.2:latest", "digest": digest}]}}
    models = ["llama3.2", "qwen3:8b"]
    # Listed (any spelling), unpinned or pinned to its digest: no pull.
    assert cluster.models_to_pull(models, tags, {}) == ["qwen3:8b"]
    assert cluster.models_to_pull(models, tags, {"llama3.2": "sha256:" + digest.upper()}) == [
        "qwen3:8b"]
    # Pinned to other weights, or a pin that is no digest: ollama_model says why.
    assert cluster.models_to_pull(models, tags, {"llama3.2": "b" * 64}) == models
    assert cluster.models_to_pull(models, tags, {"llama3.2": "latest"}) == models
    # Ollama did not answer, or not 200, or not its list: every model goes to ollama_model.
    for answer in (None, {"status": 500, "json": None}, {"status": 200, "json": ["x"]}):
        assert cluster.models_to_pull(models, answer, {}) == models
