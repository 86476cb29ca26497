"""apt_present: the decision of its action plugin, its documentation, and real runs on this
(Debian) machine: packages that are installed need no apt run after the first read, a package
apt does not know fails with apt's own message."""

from __future__ import annotations

import json
import subprocess

import pytest

from action_plugins import apt_present as action

from ..library_kit import REPO, VENV_BIN, assert_options_documented, module_doc, module_env

INSTALLED = {"bash": [{"version": "5.2"}], "python3-apt": [{"version": "2.6.0"}]}


@pytest.mark.parametrize(("names", "missing"), [
    (["bash", "python3-apt"], []),
    (["bash", "acl"], ["acl"]),
    # Only apt can tell whether a version, a release or an architecture is there.
    (["bash=5.2", "bash:amd64", "bash/bookworm", "bash*"],
     ["bash=5.2", "bash:amd64", "bash/bookworm", "bash*"]),
])
def test_a_package_is_missing_unless_the_facts_list_its_bare_name(names, missing):
    assert action.missing_packages(names, INSTALLED) == missing


def test_only_packages_dpkg_calls_installed_are_installed():
    dpkg = ("bash\t5.2.15-2+b7\tamd64\tii \n"
            "libc6\t2.36-9\tamd64\tii \n"
            "libc6\t2.36-9\ti386\thi \n"
            "redis-server\t5:7.0.15-1\tamd64\trc \n"   # removed, its configuration kept
            "acl\t2.3.1-3\tamd64\tiU \n"               # unpacked, not configured
            "nginx\t1.22.1-9\tamd64\tiF \n"            # half-configured
            "garbage line\n")
    installed = action.installed_packages(dpkg)
    assert sorted(installed) == ["bash", "libc6"]
    assert installed["libc6"] == [
        {"name": "libc6", "version": "2.36-9", "arch": "amd64", "source": "apt"},
        {"name": "libc6", "version": "2.36-9", "arch": "i386", "source": "apt"}]
    assert action.missing_packages(["bash", "redis-server", "acl", "nginx"], installed) == [
        "redis-server", "acl", "nginx"]


def test_documentation_matches_the_argument_spec():
    doc = module_doc("apt_present")
    assert_options_documented(doc, action.ARGUMENT_SPEC)
    assert sorted(doc["return"]) == ["ansible_facts", "missing"]


PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first
      apt_present:
        name: [bash, python3-apt]
      register: first
    - name: second
      apt_present:
        name: [bash]
      register: second
    - name: unknown
      apt_present:
        name: [bash, no-such-package-of-the-apt-present-test]
        update_cache: false
      register: unknown
      ignore_errors: true
"""


def test_the_first_task_reads_the_packages_the_next_ones_need_no_module_run(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    env = module_env(tmp_path, ANSIBLE_ACTION_PLUGINS=str(REPO / "action_plugins"))
    # Check mode: a package apt knows would be installed, nothing is; the system's python,
    # which has python3-apt.
    run = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check",
         "-e", "ansible_python_interpreter=/usr/bin/python3", str(playbook)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180, check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    first, second, unknown = (task["hosts"]["localhost"] for task in tasks)
    assert (first["changed"], first["missing"]) == (False, [])
    assert "bash" in first["ansible_facts"]["packages"]
    # The second read the facts the first returned: no dpkg-query, no apt.
    assert (second["changed"], second["missing"]) == (False, [])
    assert "ansible_facts" not in second
    # apt asked about the missing one only, and its message is the one the user sees.
    assert unknown["failed"] is True
    assert unknown["missing"] == ["no-such-package-of-the-apt-present-test"]
    assert "No package matching 'no-such-package-of-the-apt-present-test' is available" in (
        unknown["msg"])


def test_a_host_where_dpkg_cannot_answer_is_named_with_what_dpkg_said(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK.split("    - name: second")[0])
    fake = tmp_path / "bin" / "dpkg-query"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'dpkg-query: error: parsing file /var/lib/dpkg/status' >&2\n"
                    "exit 2\n")
    fake.chmod(0o755)
    env = module_env(tmp_path, ANSIBLE_ACTION_PLUGINS=str(REPO / "action_plugins"))
    env["PATH"] = f"{fake.parent}:{env.get('PATH', '/usr/bin:/bin')}"
    run = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check",
         "-e", "ansible_python_interpreter=/usr/bin/python3", str(playbook)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180, check=False)
    assert run.returncode == 2, (run.stdout + run.stderr)[-3000:]
    (task,) = json.loads(run.stdout)["plays"][0]["tasks"]
    assert task["hosts"]["localhost"]["msg"] == (
        "apt_present: cannot read the installed packages with dpkg-query (rc 2): dpkg-query: "
        "error: parsing file /var/lib/dpkg/status; the module needs a Debian host")
