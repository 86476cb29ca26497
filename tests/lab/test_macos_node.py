"""The Mac-shaped lab node (docs/lab.md, "The Mac-shaped node"), checked over SSH as its user.

One node, `molmac-macbookair`, on its own network (coordinator-mol-mac, 10.89.28.0/24), made
with `python -m lab.lab up ... NAME=ADDRESS:macos` as the lab makes it, under the Molecule
lock like the other suites with containers of their own. It is reached as the home
inventory's `macbookair`: its user, no become, /usr/bin/python3. Every property the product
relies on is asserted here through the way the product meets it (Ansible's fact gathering,
community.general.homebrew, launchctl, pgrep, lsof), never by reading the image's files.
"""

from __future__ import annotations

import errno
import json
import plistlib
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lab import drive, lab
from lab.macos import launchd_protocol, node

NETWORK, SUBNET = "coordinator-mol-mac", "10.89.28.0/24"
NAME, ADDRESS = "molmac-macbookair", "10.89.28.43"
GUI = f"gui/{node.UID}"
MAC_IMAGE = lab.kinds()["macos"].image
# The image build (~1 min per image when nothing is cached) happens in the first test.
pytestmark = pytest.mark.timeout(900)


def ssh(command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``command`` run over SSH as the node's user: a non-interactive session, as Ansible's."""
    return subprocess.run(
        ["ssh", "-i", str(lab.SSH_KEY), "-o", f"UserKnownHostsFile={lab.KNOWN_HOSTS}",
         "-o", "BatchMode=yes", f"{node.USER}@{ADDRESS}", command],
        capture_output=True, text=True, check=False, timeout=timeout)


def ok(command: str) -> str:
    result = ssh(command)
    assert result.returncode == 0, (command, result.returncode, result.stderr)
    return result.stdout


def as_root(command: str) -> subprocess.CompletedProcess:
    return lab.podman("exec", NAME, "sh", "-c", command, check=False, capture=True)


@pytest.fixture(scope="module")
def mac(podman_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The running node; yields an inventory that reaches it as the home inventory's
    macbookair is reached (its host vars, with the lab's address and key)."""
    home_vars = yaml.safe_load(node.HOME_MAC.read_text())
    host = {key: value for key, value in home_vars.items() if key.startswith("ansible_")}
    host.update(ansible_host=ADDRESS, ansible_ssh_private_key_file=str(lab.SSH_KEY),
                ansible_ssh_common_args=f"-o UserKnownHostsFile={lab.KNOWN_HOSTS}")
    inventory = tmp_path_factory.mktemp("mac") / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {NAME: host}}}))
    with lab.exclusive(lab.MOLECULE_LOCK):
        lab.down(NETWORK, [NAME])
        try:
            lab.up(NETWORK, SUBNET, lab.load_lab().image, {NAME: ADDRESS}, {NAME: "macos"})
            yield inventory
        finally:
            lab.down(NETWORK, [NAME])


def ansible(inventory: Path, module: str, args: str) -> dict:
    """One ad-hoc module run on the node, its JSON result."""
    env = {key: value for key, value in drive.env().items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
    result = subprocess.run([str(drive.VENV_BIN / "ansible"), "-i", str(inventory), NAME,
                             "-m", module, "-a", args], cwd=lab.REPO, env=env,
                            capture_output=True, text=True, check=False, timeout=300)
    output = json.loads(result.stdout)
    return output["plays"][0]["tasks"][0]["hosts"][NAME]


def test_image_is_the_lab_node_image_plus_the_mac(mac):
    layers = "{{ json .RootFS.Layers }}"
    base = json.loads(lab.podman("image", "inspect", "--format", layers,
                                 lab.load_lab().image, capture=True).stdout)
    mine = json.loads(lab.podman("image", "inspect", "--format", layers, MAC_IMAGE,
                                 capture=True).stdout)
    assert mine[:len(base)] == base and len(mine) > len(base)
    # Cached: a second build finds its inputs unchanged.
    again = subprocess.run([str(lab.kinds()["macos"].build)], capture_output=True, text=True,
                           check=True, timeout=300)
    assert f"image {MAC_IMAGE} is up to date" in again.stderr
    # systemd is PID 1 under it, sshd its service, as on every lab node.
    assert as_root("cat /proc/1/comm").stdout == "systemd\n"
    assert as_root("systemctl is-active ssh.service").stdout == "active\n"


def test_ansible_gathers_macos_facts(mac):
    facts = ansible(mac, "ansible.builtin.setup", "gather_subset=min")["ansible_facts"]
    assert {key: facts[f"ansible_{key}"] for key in (
        "os_family", "system", "distribution", "distribution_major_version", "service_mgr",
        "user_dir", "user_uid", "user_gid", "machine", "pkg_mgr")} == {
        "os_family": "Darwin", "system": "Darwin", "distribution": "MacOSX",
        "distribution_major_version": "15", "service_mgr": "launchd",
        "user_dir": node.HOME, "user_uid": node.UID, "user_gid": node.GID,
        "machine": "arm64", "pkg_mgr": "homebrew"}
    assert facts["ansible_python_version"].startswith("3.9.")


def test_user_is_a_mac_user_without_sudo(mac):
    assert ok("id") == f"uid={node.UID}({node.USER}) gid={node.GID}({node.GROUP}) " \
                       f"groups={node.GID}({node.GROUP})\n"
    assert ok("echo $HOME $SHELL") == f"{node.HOME} /bin/zsh\n"
    assert ok("getent group 0") == "wheel:x:0:\n"
    assert ssh("getent group root").returncode == 2
    denied = ssh("sudo -n true")
    assert (denied.returncode, denied.stderr) == (1, "sudo: a password is required\n")


def test_root_ownership_fails_as_on_a_mac(mac):
    # Without become, a file owned by root is EPERM, and there is no group root at all:
    # what cluster_tls's owner/group root met on the Mac (issue 30).
    owned = ansible(mac, "ansible.builtin.file", "path=/tmp/lab-owned state=touch owner=root")
    assert (owned.get("failed"), owned["msg"]) == (True, "chown failed")
    grouped = ansible(mac, "ansible.builtin.file", "path=/tmp/lab-owned state=touch group=root")
    assert (grouped.get("failed"), grouped["msg"]) == (
        True, "chgrp failed: failed to look up group root")


def test_ssh_command_path_is_macos_default(mac):
    # macOS's sshd gives /usr/bin:/bin:/usr/sbin:/sbin; zsh reads no profile for a command.
    assert ok("echo $PATH") == f"{launchd_protocol.STD_PATH}\n"
    assert ssh("command -v brew").returncode == 1
    # A login shell reads ~/.zprofile, where Homebrew's setup lives.
    assert ok("zsh -lc 'command -v brew'") == "/opt/homebrew/bin/brew\n"


def test_python3_is_the_command_line_tools_python_39(mac):
    assert ok("command -v python3") == "/usr/bin/python3\n"
    assert ok("python3 -c 'import os, sys; print(sys.version_info[:2], os.path.realpath("
              "sys.executable))'") == f"(3, 9) {node.CLT_PYTHON}/bin/python3.9\n"
    assert ok("readlink /usr/bin/python3") == f"{node.CLT}/usr/bin/python3\n"
    # What only a real Mac shows: the platform the interpreter was built for.
    assert ok("python3 -c 'import sys; print(sys.platform)'") == "linux\n"


def test_sw_vers(mac):
    version = ok("sw_vers -productVersion").strip()
    assert version.split(".")[0] == "15"
    assert ok("sw_vers") == ("ProductName:\t\tmacOS\nProductVersion:\t\t" + version
                             + "\nBuildVersion:\t\t" + ok("sw_vers -buildVersion"))


def test_brew_refuses_root_and_unknown_formulae(mac):
    as_root_run = as_root("/opt/homebrew/bin/brew install ollama")
    assert (as_root_run.returncode, as_root_run.stderr) == (1, (
        "Error: Running Homebrew as root is extremely dangerous and no longer supported.\n"
        "As Homebrew does not drop privileges on installation you would be giving all\n"
        "build scripts full access to your system.\n"))
    assert as_root("/opt/homebrew/bin/brew --prefix").stdout == "/opt/homebrew\n"
    unknown = ssh("/opt/homebrew/bin/brew install nosuchformula")
    assert (unknown.returncode, unknown.stderr) == (1, (
        'Warning: No available formula or cask with the name "nosuchformula".\n'
        "Error: No formulae or casks found for nosuchformula.\n"))
    info = ssh("/opt/homebrew/bin/brew info --json=v2 --formula nosuchformula")
    assert (info.returncode, info.stderr) == (
        1, 'Error: No available formula with the name "nosuchformula".\n')


def test_homebrew_module_installs_python_and_ollama(mac):
    # A fresh Mac has neither.
    assert json.loads(ok("/opt/homebrew/bin/brew info --json=v2 python@3.12 ollama"))[
        "formulae"][0]["installed"] == []
    for formula in ("python@3.12", "ollama"):
        args = f"name={formula} state=present path=/opt/homebrew/bin"
        first = ansible(mac, "community.general.homebrew", args)
        assert (first.get("failed"), first["changed"]) == (None, True), first
        second = ansible(mac, "community.general.homebrew", args)
        assert (second.get("failed"), second["changed"]) == (None, False), second
    python = "/opt/homebrew/opt/python@3.12/bin/python3.12"
    assert ok(f"{python} -c 'import sys; print(sys.version_info[:2])'") == "(3, 12)\n"
    assert ok(f"readlink -f {python}").startswith("/opt/homebrew/Cellar/python@3.12/3.12.")
    assert ok("ls /opt/homebrew/bin").split() == sorted(
        ["brew", "ollama", "2to3-3.12", "idle3.12", "pip3.12", "pydoc3.12", "python3.12",
         "python3.12-config"])
    # A virtualenv from it, as the worker role makes one.
    assert ok(f"{python} -m venv /tmp/venv && /tmp/venv/bin/python -c "
              "'import sys; print(sys.prefix)'") == "/tmp/venv\n"
    assert ok("/opt/homebrew/bin/ollama --version").startswith("ollama version is ")
    # `ollama serve` listens where OLLAMA_HOST says, as the role's agent will run it.
    ok("OLLAMA_HOST=127.0.0.1:11500 nohup /opt/homebrew/bin/ollama serve >/dev/null 2>&1 &"
       " echo")
    try:
        deadline = time.monotonic() + 30
        while ssh("lsof -nP -iTCP:11500 -sTCP:LISTEN -t").returncode != 0:
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert ok("ls ~/.ollama/models") == "standin-state.json\n"
    finally:
        ok("pkill -f 'ollama serve'; echo")


def test_pgrep_and_pkill_are_bsd(mac):
    usage = ("usage: pgrep [-Lfilnoqvx] [-d delim] [-F pidfile] [-G gid]\n"
             "             [-P ppid] [-U uid] [-g pgrp] [-t tty] [-u euid]\n"
             "             pattern ...\n")
    refused = ssh("pgrep --count --full worker_web.py")
    assert (refused.returncode, refused.stderr) == (2, "pgrep: illegal option -- -\n" + usage)
    ok("nohup sleep 4242 >/dev/null 2>&1 & echo")
    pid = ok("pgrep -f 'sleep 4242'").strip()
    assert ok("pgrep -lf 'sleep 4242'") == f"{pid} sleep 4242\n"
    assert ok("pgrep -d, -x sleep") == f"{pid}\n"
    # pgrep never selects itself, nor the shell that runs it (its command line matches).
    assert ok("pgrep -f 'pgrep -f'; echo $?") == "1\n"
    assert ok("pkill -l -f 'sleep 4242'") == f"kill -15 {pid}\n"
    assert ssh("pkill -f 'sleep 4242'").returncode == 1
    missing = ssh("pkill -l -f 'sleep 4242'")
    assert (missing.returncode, missing.stderr) == (
        1, "No matching processes belonging to you were found\n")


def test_ollama_app_holds_the_port_as_lsof_and_pgrep_show(mac):
    node.ollama_app_start(NAME)
    try:
        deadline = time.monotonic() + 30
        while ssh("lsof -nP -iTCP:11434 -sTCP:LISTEN -t").returncode != 0:
            assert time.monotonic() < deadline, ok(f"cat {node.OLLAMA_APP_LOG}")
            time.sleep(0.5)
        pid = ok("lsof -nP -iTCP:11434 -sTCP:LISTEN -t").strip()
        header, line = ok("lsof -nP -iTCP:11434 -sTCP:LISTEN").splitlines()
        assert header.split() == ["COMMAND", "PID", "USER", "FD", "TYPE", "DEVICE",
                                  "SIZE/OFF", "NODE", "NAME"]
        fields = line.split()
        assert (fields[0], fields[1], fields[2], fields[-2:]) == (
            "ollama", pid, node.USER, [node.OLLAMA_APP_HOST, "(LISTEN)"])
        assert ok(f"pgrep -f '{node.OLLAMA_APP_BINARY} serve'") == f"{pid}\n"
        # Field output: the pid, then each file's descriptor, always; the asked fields.
        # (the role's own call: the field list as a separate argument)
        fields = ok("lsof -nP -iTCP:11434 -sTCP:LISTEN -F pcn").split()
        assert (fields[:2], fields[2][0], fields[3]) == (
            [f"p{pid}", "collama"], "f", f"n{node.OLLAMA_APP_HOST}")
        version = ok("/usr/bin/python3 -c 'import urllib.request; print(urllib.request."
                     "urlopen(\"http://127.0.0.1:11434/api/version\").read().decode())'")
        assert json.loads(version)["version"]
    finally:
        node.ollama_app_stop(NAME)
    deadline = time.monotonic() + 10
    while ssh("lsof -nP -iTCP:11434 -sTCP:LISTEN -t").returncode == 0:
        assert time.monotonic() < deadline
        time.sleep(0.3)


def write_agent(label: str, arguments: list[str], **keys: object) -> str:
    """A LaunchAgent plist for ``label`` written to ~/Library/LaunchAgents; its path."""
    plist = {"Label": label, "ProgramArguments": arguments, "RunAtLoad": True, **keys}
    path = f"{node.HOME}/Library/LaunchAgents/{label}.plist"
    written = subprocess.run(
        ["ssh", "-i", str(lab.SSH_KEY), "-o", f"UserKnownHostsFile={lab.KNOWN_HOSTS}",
         "-o", "BatchMode=yes", f"{node.USER}@{ADDRESS}", f"cat > {shlex.quote(path)}"],
        input=plistlib.dumps(plist), capture_output=True, check=False, timeout=60)
    assert written.returncode == 0, written.stderr
    return path


def job_pid(label: str, timeout: float = 15) -> str:
    """The pid `launchctl print` reports for the running job."""
    deadline = time.monotonic() + timeout
    while True:
        printed = ssh(f"launchctl print {GUI}/{label}")
        pids = [line.split("=")[1].strip() for line in printed.stdout.splitlines()
                if line.strip().startswith("pid = ")]
        if printed.returncode == 0 and "state = running" in printed.stdout and pids:
            return pids[0]
        assert time.monotonic() < deadline, printed.stdout + printed.stderr
        time.sleep(0.3)


def test_agent_runs_under_launchd_and_logout_login(mac):
    label = "lab.test.greeter"
    log = f"{node.HOME}/Library/Logs/{label}.log"
    path = write_agent(label, ["/bin/sh", "-c", 'echo "$GREETING from $PWD"; exec sleep 600'],
                       EnvironmentVariables={"GREETING": "hello"}, WorkingDirectory="/tmp",
                       StandardOutPath=log)
    # plutil reads the agent's plist as the worker role reads its model from it.
    assert ok(f"plutil -extract EnvironmentVariables.GREETING raw {path}") == "hello\n"
    missing = ssh(f"plutil -extract EnvironmentVariables.NOSUCH raw {path}")
    assert (missing.returncode, missing.stderr) == (1, f"{path}: Could not extract value, "
                                                    "error: No value at that key path or "
                                                    "invalid key path: "
                                                    "EnvironmentVariables.NOSUCH\n")
    ok(f"launchctl bootstrap {GUI} {path}")
    pid = job_pid(label)
    launchd_pid = ok(f"pgrep -f '{node.LAUNCHD_SOCKET}'").strip()
    assert ok(f"ps -o ppid= -p {pid}").strip() == launchd_pid
    assert ok(f"cat {log}") == "hello from /tmp\n"
    environment = ok(f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()
    assert "GREETING=hello" in environment
    assert f"PATH={launchd_protocol.STD_PATH}" in environment

    node.logout(NAME)
    gone = ssh(f"launchctl print {GUI}/{label}")
    code = launchd_protocol.ENOTSUPPORTED_DOMAIN
    assert (gone.returncode, gone.stderr) == (code, launchd_protocol.STRERROR[code] + "\n")
    refused = ssh(f"launchctl bootstrap {GUI} {path}")
    assert (refused.returncode, refused.stderr) == (
        code, launchd_protocol.NO_SESSION_WORDS["bootstrap"])
    assert ssh(f"ps -p {pid}").returncode == 1

    node.login(NAME)
    assert job_pid(label) != pid
    ok(f"launchctl bootout {GUI}/{label} && rm {path}")


def connect_probe(target: str) -> list[str]:
    """A Python one-liner that connects to ``target``:22 and prints the errno's name."""
    return ["/usr/bin/python3", "-c",
            "import errno, socket\n"
            "try:\n"
            f"    socket.create_connection(({target!r}, 22), timeout=5).close()\n"
            "    print('connected')\n"
            "except OSError as error:\n"
            "    print(errno.errorcode.get(error.errno, error.errno))\n"]


def run_probe(target: str) -> str:
    """What connect_probe printed when launchd ran it as an agent."""
    label = f"lab.test.probe-{target.replace('.', '-')}"
    log = f"{node.HOME}/Library/Logs/{label}.log"
    path = write_agent(label, connect_probe(target), StandardOutPath=log)
    ok(f"rm -f {log}; launchctl bootstrap {GUI} {path}")
    deadline = time.monotonic() + 15
    while ssh(f"test -s {log}").returncode != 0:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    printed = ok(f"cat {log}").strip()
    ok(f"launchctl bootout {GUI}/{label}; rm {path}")
    return printed


def test_local_network_privacy_denies_launchd_jobs_only(mac):
    node.localnet_deny(NAME)
    try:
        assert run_probe(ADDRESS) == errno.errorcode[errno.EHOSTUNREACH]
        assert run_probe("127.0.0.1") == "connected"
        # The same connect from the SSH session is not affected.
        probe = connect_probe(ADDRESS)
        assert ok(" ".join(map(shlex.quote, probe))) == "connected\n"
        # A grant follows the interpreter's resolved binary: the next job connects.
        node.localnet_grant(NAME, "/usr/bin/python3")
        assert run_probe(ADDRESS) == "connected"
    finally:
        node.localnet_allow(NAME)
        as_root(f"rm -f {node.LOCALNET_GRANTED}")
