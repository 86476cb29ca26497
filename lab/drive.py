"""Drive the container lab the way a user does, with faults: for the lab tests and bench/.

- ``Playbooks`` runs ansible-playbook against a lab inventory, streams its output, keeps a
  log of every run in .lab/logs/<name>/ and can act when a line appears (``on``: stop sshd,
  cut the network, send SIGINT at a play boundary ...).
- ``Traffic`` routes a web search through the Coordinator every few seconds for as long as
  it runs and afterwards says what became of every task it routed (done, failed with its
  error, or lost), and the longest time `tasks:web` held a task nobody took.
- ``Node`` is one lab container: commands in it (podman exec, as root), its units, sshd
  and its network link.
- ``notifications`` reads what the lab's ntfy stand-in holds of a topic, by polling it.
- ``inventory_copy`` makes a copy of the lab inventory with the web worker on other hosts,
  as a user edits theirs.

Everything here talks only to the lab's own containers.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import plistlib
import re
import shutil
import signal
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
import requests
import yaml
from coordinator_contract import WEB_QUEUE

from lab import lab
from lab.macos import node as mac
from lab.throwaway import wait_for_port

REPO = lab.REPO
VENV_BIN = REPO / ".venv" / "bin"
PROMPT = "今日の東京の天気は？"


def env(**extra: str) -> dict[str, str]:
    """The environment of a lab command: the lab's containers.conf, the venv first on PATH."""
    result = dict(os.environ)
    result["CONTAINERS_CONF"] = str(REPO / "lab" / "containers.conf")
    result["PATH"] = f"{VENV_BIN}{os.pathsep}{result.get('PATH', '')}"
    result["ANSIBLE_NOCOLOR"] = "1"
    result["NO_COLOR"] = "1"
    result.update(extra)
    return result


def inventory_copy(name: str, web_hosts: list[str], host_vars: dict[str, dict] | None = None,
                   source: Path = lab.INVENTORY, groups: dict[str, list[str]] | None = None
                   ) -> Path:
    """A copy of the lab inventory with ``web_workers`` = ``web_hosts`` and each group of
    ``groups`` holding the hosts given (and extra host_vars files), two levels below the
    repository like inventory/lab, so its relative paths to .lab/ resolve the same way."""
    target = REPO / ".lab" / f"inventory-{name}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)  # links (cluster.yml) copied as the files they point to
    hosts_file = target / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    for group, members in {**(groups or {}), "web_workers": web_hosts}.items():
        hosts["all"]["children"][group]["hosts"] = dict.fromkeys(members)
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    for host, variables in (host_vars or {}).items():
        (target / "host_vars" / host).mkdir(parents=True, exist_ok=True)
        (target / "host_vars" / host / "test.yml").write_text(yaml.safe_dump(variables))
    return target


def printed_fact(output: str, name: str) -> dict | None:
    """The fact ``name`` as a playbook last printed it (``ansible.builtin.debug: var: name``,
    the YAML result format of ansible.cfg), or None when it printed none: the key line under
    ``ok: [host] =>`` and the lines indented deeper below it, blank lines of a block scalar
    among them (a model's answer has paragraphs; a warning Ansible prints on stderr may
    follow without a blank line)."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.rstrip() == f"    {name}:"]
    if not starts:
        return None
    key = lines[starts[-1]]
    value = list(itertools.takewhile(lambda line: line.startswith(" " * 8) or not line.strip(),
                                     lines[starts[-1] + 1:]))
    return yaml.safe_load(textwrap.dedent("\n".join([key, *value]).rstrip()))[name]


@dataclass
class Run:
    name: str
    returncode: int
    output: str
    seconds: float
    log: Path
    inventory: str = ""
    args: tuple[str, ...] = ()

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        return lab.play_recap(self.output)

    def changed(self) -> dict[str, int]:
        return {host: counts["changed"] for host, counts in self.recap.items()}

    @property
    def interrupted(self) -> bool:
        """Whether a Ctrl-C (``interrupt``) stopped the run: Ansible's own last words, or
        SIGINT's exit where Python had no time to print them."""
        return "User interrupted execution" in self.output or self.returncode == -signal.SIGINT

    @property
    def interrupt_swallowed(self) -> bool:
        """Whether a Ctrl-C reached Ansible's main thread inside a callback, where Python
        swallows the KeyboardInterrupt ("Exception ignored in: ..."), and the run then ended on
        its own before the next press: nothing was cut (a task of milliseconds, the last of a
        run, can end that way)."""
        return not self.interrupted and "KeyboardInterrupt" in self.output

    def changed_results(self) -> int:
        """Task and handler results reported changed, counted in the output: unlike the
        recap, also there for a run cut short."""
        return len(re.findall(r"^changed: \[", self.output, re.M))

    def changed_tasks(self) -> dict[str, set[str]]:
        """Per host, the names of the tasks and handlers that reported it changed."""
        changed: dict[str, set[str]] = {}
        task = ""
        for line in self.output.splitlines():
            banner = re.match(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \**$", line)
            if banner:
                task = banner.group(1)
            elif found := re.match(r"^changed: \[([^]\s]+)", line):
                changed.setdefault(found.group(1), set()).add(task)
        return changed

    def tasks_of(self, play: str) -> list[str]:
        """The tasks the run printed in the play whose name starts with ``play``, in order
        (a task skipped on every host prints nothing)."""
        tasks: list[str] = []
        inside = False
        for line in self.output.splitlines():
            if banner := re.match(r"^PLAY \[(.*)\] \**$", line):
                inside = banner.group(1).startswith(play)
            elif (inside and (task := re.match(r"^TASK \[(.*)\] \**$", line))
                  and task.group(1) not in tasks):
                tasks.append(task.group(1))
        return tasks

    def fact(self, name: str) -> dict:
        """A fact the run printed (``printed_fact``); a run that printed none fails the test
        naming its log."""
        printed = printed_fact(self.output, name)
        assert printed is not None, f"{self.name} printed no {name}; see {self.log}"
        return printed

    def unfolded(self) -> str:
        """The output with the YAML callback's line folding and quote doubling undone, for
        searching."""
        return " ".join(self.output.split()).replace("''", "'")


@dataclass
class Playbooks:
    """Runs playbooks from the repository root; every run is kept (``runs``), and its wall
    time with the test that ran it (``timings``: test, playbook, seconds, rc)."""

    log_dir: Path
    verbose: bool = False
    runs: list[Run] = field(default_factory=list)
    timings: list[dict] = field(default_factory=list)

    @property
    def outputs(self) -> list[str]:
        return [run.output for run in self.runs]

    def log(self, playbook: str, inventory: Path, output: str, suffix: str = "") -> Path:
        """``output`` kept in the next run's log file; its path."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / (f"{len(self.runs) + 1:02d}-{Path(playbook).stem}-"
                              f"{inventory.name}{suffix}.log")
        log.write_text(output)
        return log

    def run(self, playbook: str, inventory: Path, *args: str,
            on: list[tuple[str, Callable[[subprocess.Popen], None]]] | None = None,
            extra_env: dict[str, str] | None = None, timeout: float = 1800) -> Run:
        """ansible-playbook; ``on`` = [(regex, action)]: each action runs once, when a line
        matching its regex first appears (the running process is passed to it). A fault whose
        line never appeared did not happen: the run raises AssertionError naming it (a renamed
        task must not let a fault test pass without its fault)."""
        command = ["ansible-playbook", *(["-vvv"] if self.verbose else []),
                   "-i", str(inventory), playbook, *args]
        pending = list(on or [])
        lines: list[str] = []
        started = time.monotonic()
        # Its own process group, as a shell runs a job: a terminal's Ctrl-C reaches the whole
        # group (interrupt_group), and none of it reaches pytest's.
        with subprocess.Popen(command, cwd=REPO, env=env(**(extra_env or {})), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              process_group=0) as proc:
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    lines.append(line)
                    for hook in [h for h in pending if re.search(h[0], line)]:
                        pending.remove(hook)
                        hook[1](proc)
            except BaseException:
                # Nobody reads its output from here on (a hook failed, the test's time limit
                # ran out): left running, it would block on the full pipe, and the Popen's
                # exit wait on it, for ever. What it printed so far is kept.
                kill_group(proc)
                self.log(playbook, inventory, "".join(lines), "-unfinished")
                raise
            finally:
                timer.cancel()
        output = "".join(lines)
        log = self.log(playbook, inventory, output)
        run = Run(Path(playbook).name, proc.returncode, output, time.monotonic() - started, log,
                  inventory.name, args)
        self.runs.append(run)
        self.timings.append({"test": current_test(), "playbook": run.name,
                             "inventory": inventory.name, "seconds": round(run.seconds, 1),
                             "returncode": run.returncode})
        if pending:
            raise AssertionError(
                f"{run.name} never printed a line matching {[h[0] for h in pending]}: the "
                f"fault meant for that point did not happen (exit {run.returncode}; see {log})")
        return run


def current_test() -> str:
    """The running pytest test's name, or "" outside pytest."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].rsplit("::", 1)[-1]


def interrupt(proc: subprocess.Popen, again_after: float = 5, presses: int = 3) -> None:
    """Ctrl-C, as a user presses it and a terminal sends it: SIGINT to the playbook's whole
    process group (its forks and their ssh clients too), again after ``again_after`` seconds
    while the playbook still runs, up to ``presses`` times. Ansible turns SIGINT into a
    KeyboardInterrupt raised wherever its main thread is; when that is a garbage collector's
    callback, Python prints "Exception ignored in: ..." and the run goes on, as a user then
    sees and presses again."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(proc.pid, signal.SIGINT)
    if presses > 1:
        timer = threading.Timer(again_after, lambda: interrupt(proc, again_after, presses - 1))
        timer.daemon = True
        timer.start()


def kill_group(proc: subprocess.Popen) -> None:
    """A lost controller: SIGKILL to the playbook's whole process group (the ssh control
    masters, daemons of their own, live on, as they do when a laptop's session dies)."""
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(proc.pid, signal.SIGKILL)


# Where the worker role puts a worker's service and files (roles/worker/defaults/main.yml),
# read from the role so the lab cannot drift from it.
WORKER_DEFAULTS = yaml.safe_load((REPO / "roles" / "worker" / "defaults" / "main.yml").read_text())


@dataclass
class Node:
    """One lab host, in its container. ``kind`` is ``linux`` (systemd units) or ``macos`` (the
    Mac-shaped node: launchd agents of its login user, lab/macos/). ``container`` is the
    container's name where it is not the host's (a second lab, lab.second_lab_inventory)."""

    name: str
    address: str
    network: str
    kind: str = "linux"
    container: str = ""

    def __post_init__(self) -> None:
        self.container = self.container or self.name

    def sh(self, *argv: str, check: bool = False, timeout: float = 120,
           input_text: str | None = None, user: str | None = None
           ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["podman", "exec", "--interactive",
                               *(["--user", user] if user else []), self.container, *argv],
                              env=env(), capture_output=True, text=True, check=False,
                              timeout=timeout, input=input_text)
        if check and done.returncode != 0:
            raise AssertionError(f"{self.name}: {' '.join(argv)}: {done.stderr.strip()}")
        return done

    def unit(self, verb: str, unit: str = "web-worker.service") -> str:
        return self.sh("systemctl", verb, unit).stdout.strip()

    @property
    def worker_base_dir(self) -> str:
        """The workers' code and virtualenv (worker_base_dir)."""
        return f"{mac.HOME}/coordinator-worker" if self.kind == "macos" \
            else "/opt/coordinator-worker"

    @property
    def cluster_tls_dir(self) -> str:
        """Where cluster_tls keeps the node's TLS files: the lab inventory's cluster_tls_dir,
        the Mac's own in its user's home (inventory/home's macbookair)."""
        settings = mac.HOME_MAC if self.kind == "macos" else (
            lab.INVENTORY / "group_vars" / "all" / "cluster.yml")
        return yaml.safe_load(settings.read_text())["cluster_tls_dir"]

    @property
    def cluster_ca_file(self) -> str:
        """The cluster CA's certificate on the node, where cluster_tls puts it."""
        return self.cluster_tls_dir + "/ca.crt"

    def worker_service_file(self, worker: str = "web-worker") -> str:
        """The worker's systemd unit or launchd plist."""
        if self.kind == "macos":
            return f"{mac.HOME}/Library/LaunchAgents/{self._label(worker)}.plist"
        return f"/etc/systemd/system/{worker}.service"

    def worker_installed(self, worker: str = "web-worker") -> bool:
        """Whether the worker's unit or plist is there."""
        return self.sh("test", "-e", self.worker_service_file(worker)).returncode == 0

    def worker_active(self, worker: str = "web-worker") -> bool:
        """Whether its service manager runs the worker now."""
        if self.kind == "macos":
            shown = self.sh("launchctl", "print", f"gui/{mac.UID}/{self._label(worker)}",
                            user=mac.USER)
            return shown.returncode == 0 and "state = running" in shown.stdout
        return self.unit("is-active", f"{worker}.service") == "active"

    def worker_enabled(self, worker: str = "web-worker") -> bool:
        """Whether the worker would start at the next boot (systemd) or login (launchd)."""
        if self.kind == "macos":
            installed = self.sh("test", "-e", self.worker_service_file(worker)).returncode == 0
            disabled = self.sh("launchctl", "print-disabled", f"gui/{mac.UID}", user=mac.USER)
            return installed and f'"{self._label(worker)}" => disabled' not in disabled.stdout
        return self.unit("is-enabled", f"{worker}.service") == "enabled"

    def worker_env(self, worker: str = "web-worker") -> str:
        """The worker's environment as NAME="value" lines: its env file (Linux), its plist's
        EnvironmentVariables (macOS)."""
        if self.kind == "macos":
            plist = plistlib.loads(self.sh("cat", self.worker_service_file(worker), check=True,
                                           ).stdout.encode())
            return "".join(f'{name}="{value}"\n'
                           for name, value in plist["EnvironmentVariables"].items())
        return self.sh("cat", f"/etc/coordinator-worker/{worker}.env", check=True).stdout

    def processes(self, pattern: str = "worker_web.py") -> list[int]:
        # -f: the options GNU's and BSD's pgrep share.
        return [int(pid) for pid in self.sh("pgrep", "-f", pattern).stdout.split()]

    @staticmethod
    def _label(worker: str) -> str:
        return f"{WORKER_DEFAULTS['worker_launchd_label_prefix']}{worker}"

    def stop_sshd(self) -> None:
        """Ansible can no longer log in; what runs on the host goes on (its open SSH
        sessions, ControlPersist's too, are closed)."""
        self.sh("systemctl", "stop", "ssh", check=True)
        self.sh("pkill", "-f", f"sshd: {lab.kinds()[self.kind].user}")

    def start_sshd(self) -> None:
        self.sh("systemctl", "start", "ssh", check=True)

    def stop_container(self) -> None:
        """The host goes down (powered off): its container stops, everything in it with it."""
        lab.podman("stop", "--time", "5", self.container, capture=True)

    def start_container(self) -> None:
        """The host boots again: its enabled units start, and its sshd answers."""
        lab.podman("start", self.container, capture=True)
        wait_for_port(22, 60, f"sshd of {self.name}", host=self.address)

    def disconnect(self) -> None:
        """The host leaves the LAN (powered off, Wi-Fi gone): nothing reaches it, and its
        workers reach nothing."""
        lab.podman("network", "disconnect", "--force", self.network, self.container,
                   capture=True)

    def connect(self) -> None:
        """Back on the LAN, and answering: its sshd is reached again (a first connection
        right after the interface comes back can time out)."""
        lab.podman("network", "connect", "--ip", self.address, self.network, self.container,
                   capture=True)
        wait_for_port(22, 60, f"sshd of {self.name}", host=self.address)


class Coordinator:
    """The lab Coordinator's API, as a client with the lab's token sees it."""

    def __init__(self, url: str) -> None:
        self.url = url
        token = (lab.SECRETS_DIR / "coordinator_token").read_text().split()[0]
        self.headers = {"Authorization": f"Bearer {token}"}
        self.verify = lab.verify_for(url)

    def route(self, prompt: str = PROMPT, task_type: str = "web_search") -> str:
        answer = requests.post(f"{self.url}/route", json={"prompt": prompt,
                                                          "task_type": task_type},
                               headers=self.headers, timeout=10, verify=self.verify)
        answer.raise_for_status()
        return answer.json()["task_id"]

    def task(self, task_id: str, wait: int = 0) -> dict:
        answer = requests.get(f"{self.url}/task/{task_id}", params={"wait": wait},
                              headers=self.headers, timeout=wait + 10, verify=self.verify)
        answer.raise_for_status()
        return answer.json()

    def finished(self, task_id: str, deadline: float) -> dict:
        task: dict = {"task_id": task_id, "status": "unknown"}
        while time.monotonic() < deadline:
            try:
                task = self.task(task_id, wait=20)
            except requests.RequestException:
                time.sleep(1)  # the Coordinator restarting
                continue
            if task["status"] in ("done", "failed"):
                break
        return task

    def search(self, prompt: str = PROMPT, timeout: float = 120) -> dict:
        return self.finished(self.route(prompt), time.monotonic() + timeout)

    def workers(self) -> dict[str, dict]:
        """GET /workers by worker id."""
        answer = requests.get(f"{self.url}/workers", headers=self.headers, timeout=10,
                              verify=self.verify)
        answer.raise_for_status()
        return {w["worker_id"]: w for w in answer.json()["workers"]}

    def alive_web_workers(self) -> list[dict]:
        return [w for w in self.workers().values() if w["kind"] == "web" and w["alive"]]


def notify_url(core: Node) -> str:
    """Where the lab Coordinator posts its notifications: COORDINATOR_NOTIFY_URL of the
    environment file the coordinator role wrote on ``core``."""
    env = core.sh("cat", "/etc/coordinator/coordinator.env", check=True).stdout
    match = re.search(r'^COORDINATOR_NOTIFY_URL="([^"]+)"$', env, re.M)
    assert match, "the lab Coordinator sends no notification (no COORDINATOR_NOTIFY_URL)"
    return match.group(1)


def notifications(url: str, since: float | None = None, about: str = "",
                  title: str = "") -> list[dict]:
    """The messages an ntfy topic holds, oldest first, as a subscriber polls them:
    ``<url>/json?poll=1`` (``url`` is the topic's, as in COORDINATOR_NOTIFY_URL), from
    ``since`` (Unix time, ntfy's ``since``) on; only those whose message holds ``about`` and,
    given one, with that ``title``."""
    params = {"poll": "1", **({"since": str(int(since))} if since is not None else {})}
    answer = requests.get(f"{url.rstrip('/')}/json", params=params, timeout=10)
    answer.raise_for_status()
    messages = [json.loads(line) for line in answer.text.splitlines() if line.strip()]
    return [m for m in messages
            if about in m.get("message", "") and (not title or m.get("title") == title)]


@dataclass
class Outcome:
    routed: int
    refused: int  # POST /route answered an error or nothing: no task was made
    done: list[dict]
    failed: list[dict]
    lost: list[dict]
    longest_untaken: float  # seconds tasks:web held a task no worker took
    # Tasks routed through another Coordinator, the one of their turn not answering.
    failed_over: int = 0

    def hosts(self) -> set[str]:
        return {task.get("worker_host") for task in self.done}


class Traffic:
    """Routes a task every ``interval`` seconds while it runs, of each of ``task_types`` in
    turn, through each Coordinator (``coordinator``, then each of ``also``) in turn, going to
    the next one when it does not answer, as a client given their URLs does; ``outcome()``
    afterwards."""

    def __init__(self, coordinator: Coordinator, redis_url: str, interval: float = 2.0,
                 also: tuple[Coordinator, ...] = (),
                 task_types: tuple[str, ...] = ("web_search",)) -> None:
        self.coordinator = coordinator
        self.coordinators = [coordinator, *also]
        self.task_types = task_types
        self.interval = interval
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self.routed: list[str] = []
        self.refused = 0
        self.failed_over = 0
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._route, daemon=True),
                        threading.Thread(target=self._sample, daemon=True)]

    def _route(self) -> None:
        turn = 0
        while not self.stop.is_set():
            first = turn % len(self.coordinators)
            task_type = self.task_types[turn % len(self.task_types)]
            for tried, coordinator in enumerate(self.coordinators[first:]
                                                + self.coordinators[:first]):
                try:
                    self.routed.append(coordinator.route(f"{PROMPT} #{len(self.routed)}",
                                                         task_type=task_type))
                except requests.RequestException:
                    continue
                self.failed_over += tried > 0
                break
            else:
                self.refused += 1
            turn += 1
            self.stop.wait(self.interval)

    def _sample(self) -> None:
        while not self.stop.is_set():
            try:
                depth = int(self.redis.llen(WEB_QUEUE))
            except redis.RedisError:
                depth = -1
            self.samples.append((time.monotonic(), depth))
            self.stop.wait(0.1)

    def longest_untaken(self) -> float:
        longest, since = 0.0, None
        for at, depth in self.samples:
            if depth > 0 and since is None:
                since = at
            elif depth <= 0 and since is not None:
                longest, since = max(longest, at - since), None
        if since is not None and self.samples:
            longest = max(longest, self.samples[-1][0] - since)
        return longest

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def outcome(self, wait: float = 300) -> Outcome:
        deadline = time.monotonic() + wait
        tasks = [self.coordinator.finished(task_id, deadline) for task_id in self.routed]
        return Outcome(
            routed=len(self.routed), refused=self.refused,
            done=[t for t in tasks if t["status"] == "done"],
            failed=[t for t in tasks if t["status"] == "failed"],
            lost=[t for t in tasks if t["status"] not in ("done", "failed")],
            longest_untaken=self.longest_untaken(), failed_over=self.failed_over)


@contextmanager
def sshd_stopped(node: Node) -> Iterator[None]:
    node.stop_sshd()
    try:
        yield
    finally:
        node.start_sshd()


# -- commands the docs give a user -------------------------------------------------------------

#: Where docs/operating.md routes a task and reads it back with curl, as a user types it.
CURL_PROOF = (REPO / "docs" / "operating.md", "## A task by hand, with curl")
#: The placeholder of that read for the id the route answers.
TASK_ID_PLACEHOLDER = "<task_id>"


def documented_commands(doc: Path, heading: str) -> list[str]:
    """The commands of the first ```sh block in the section ``heading`` of the Markdown file
    ``doc``, as a shell reads them: a line ending in a backslash goes on in the next one, and
    comments and blank lines are left out."""
    lines = doc.read_text().splitlines()
    if heading not in lines:
        raise ValueError(f"{doc} has no heading {heading!r}")
    level = len(heading) - len(heading.lstrip("#"))
    fence: str | None = None  # the language of the fenced block the line is in
    block: list[str] = []
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("```"):
            if fence == "sh":
                return _shell_commands(block)
            fence = None if fence is not None else line[3:].strip()
        elif fence == "sh":
            block.append(line)
        elif fence is None and (found := re.match(r"(#+) ", line)) and (
                len(found.group(1)) <= level):
            break
    raise ValueError(f"the section {heading!r} of {doc} has no ```sh block")


def _shell_commands(lines: list[str]) -> list[str]:
    commands: list[str] = []
    current = ""
    for line in lines:
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line
        if line.endswith("\\"):
            current += "\n"
            continue
        commands.append(current)
        current = ""
    if current:
        raise ValueError(f"a command ends in a backslash with nothing after it: {current!r}")
    return commands


def home_coordinator_address() -> str:
    """The Coordinator's address in inventory/home, the example the docs' commands use."""
    hosts = yaml.safe_load((REPO / "inventory" / "home" / "hosts.yml").read_text())["all"]
    name = next(iter(hosts["children"]["coordinator"]["hosts"]))
    return hosts["hosts"][name]["node_address"]


def curl_proof(coordinator_address: str) -> tuple[str, str]:
    """docs/operating.md's two curl commands (CURL_PROOF) as two shell scripts, each with the
    lines that set what they use (the CA, the token): POST /route, and GET /task with
    TASK_ID_PLACEHOLDER for the id the first answers. The Coordinator's address, the doc's
    one placeholder besides the id (inventory/home's), becomes ``coordinator_address``."""
    commands = documented_commands(*CURL_PROOF)
    setup = [c for c in commands if not c.startswith("curl ")]
    route = [c for c in commands if c.startswith("curl ") and "/route" in c]
    read = [c for c in commands if c.startswith("curl ") and f"/task/{TASK_ID_PLACEHOLDER}" in c]
    home = home_coordinator_address()
    if len(route) != 1 or len(read) != 1 or len(setup) + 2 != len(commands) or not all(
            f"https://{home}:" in c for c in route + read):
        raise ValueError(f"{CURL_PROOF[0]} ({CURL_PROOF[1]}) does not give one curl POST "
                         f"/route and one GET /task/{TASK_ID_PLACEHOLDER}, both to https://"
                         f"{home}, after the lines they need: {commands}")

    def script(command: str) -> str:
        return "\n".join([*setup, command.replace(home, coordinator_address)])

    return script(route[0]), script(read[0])
