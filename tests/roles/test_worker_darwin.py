"""The worker role's macOS path: the rendered launchd plist and the launchctl calls.

No Mac here: the play poses as one (faked facts) and a fake launchctl records every call
(tests/doubles/launchctl). What only a real Mac shows is listed in docs/roles.md.
"""

from __future__ import annotations

import json
import plistlib
import re
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jinja2
import pytest
import worker_infer
import worker_web
import yaml

from tests.filter_kit import worker

from .conftest import HERE, REPO, run

PLAYBOOK = HERE / "playbooks" / "darwin.yml"
WEB_LABEL = "jp.mapleharp.coordinator-web-worker"
INFER_LABEL = "jp.mapleharp.coordinator-inference-worker"
BOTH = [{"name": "web-worker", "kind": "web"}, {"name": "inference-worker", "kind": "inference"}]
# An owner or group of root or wheel (gid 0), in -vvv's YAML.
ROOT_OWNER = re.compile(r"^\s+(owner|group): '?(root|wheel|0)'?$", re.M)


def asked_for_root(output: str) -> list[str]:
    """The module arguments (-vvv's `module_args:` blocks) that ask for root or wheel as owner
    or group. Results are not searched: they report the files' real owners, which are root's
    here, where the tests run as root."""
    asked = []
    for block in re.finditer(r"^( *)module_args:\n((?:\1 +.*\n)*)", output, re.M):
        asked += [match.group(0).strip() for match in ROOT_OWNER.finditer(block.group(2))]
    return asked
# The play sets no model: the workers run with the role's default.
ROLE_DEFAULTS = yaml.safe_load((REPO / "roles" / "worker" / "defaults" / "main.yml").read_text())


def play(home: Path, instances: list[dict], entry: str = "darwin", check: bool = False,
         **extra: object) -> str:
    extra_vars = {"test_home": str(home), "test_instances": instances, "test_entry": entry,
                  "ansible_python_interpreter": sys.executable, **extra}
    # -vvv: the most Ansible ever prints (module arguments, loop items), searched for secrets.
    result = run(["ansible-playbook", "-vvv", str(PLAYBOOK), "-i", "localhost,",
                  *(["--check", "--diff"] if check else []), "-e", json.dumps(extra_vars)])
    output = result.stdout + result.stderr
    if entry in ("darwin", "status", "install"):
        assert result.returncode == 0, output[-4000:]
    return output


def changed(output: str) -> int:
    match = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", output)
    assert match, output[-2000:]
    return int(match.group(1))


def calls(home: Path) -> list[list[str]]:
    return json.loads((home / "launchctl.json").read_text())["calls"]


def plist(home: Path, label: str) -> Path:
    return home / "Library" / "LaunchAgents" / f"{label}.plist"


@dataclass
class Runs:
    """One sequence of plays on one fake Mac, shared by the tests below (each play is slow)."""

    home: Path
    outputs: dict[str, str] = field(default_factory=dict)
    calls: dict[str, list[list[str]]] = field(default_factory=dict)
    plists: dict[str, dict] = field(default_factory=dict)
    status: dict[str, dict] = field(default_factory=dict)  # the status entry point's facts

    def step(self, name: str, instances: list[dict], test_entry: str = "darwin",
             check: bool = False, **extra: object) -> None:
        before = len(calls(self.home)) if (self.home / "launchctl.json").exists() else 0
        self.outputs[name] = play(self.home, instances, entry=test_entry, check=check, **extra)
        self.calls[name] = calls(self.home)[before:]


GONE = [{"name": "web-worker", "kind": "web", "state": "absent"},
        {"name": "inference-worker", "kind": "inference"}]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    home = tmp_path_factory.mktemp("mac")
    # A disabled agent must be enabled before its bootstrap.
    (home / "launchctl.json").write_text(
        json.dumps({"loaded": [], "disabled": [WEB_LABEL], "calls": []}))
    seq = Runs(home)
    seq.step("first", BOTH)
    seq.plists = {label: plistlib.loads(plist(home, label).read_bytes())
                  for label in (WEB_LABEL, INFER_LABEL)}
    seq.plists["mode"] = {"web": stat.S_IMODE(plist(home, WEB_LABEL).stat().st_mode)}
    seq.step("status_first", BOTH, test_entry="status")
    seq.status["first"] = json.loads((home / "status.json").read_text())
    seq.step("second", BOTH)
    seq.step("check_env_changed", BOTH, check=True, worker_env={"OLLAMA_TIMEOUT": "120"})
    seq.plists["after_check"] = {label: plist(home, label).read_bytes()
                                 for label in (WEB_LABEL, INFER_LABEL)}
    seq.step("env_changed", BOTH, worker_env={"OLLAMA_TIMEOUT": "120"})
    # Another code: a copy of the programs with one of them changed.
    code = tmp_path_factory.mktemp("code")
    for name in ROLE_DEFAULTS["worker_files"] + ["requirements-worker.txt"]:
        shutil.copy(REPO / "files" / name, code / name)
    (code / "worker_web.py").write_text((REPO / "files" / "worker_web.py").read_text()
                                        + "# changed\n")
    seq.step("code_changed", BOTH, worker_env={"OLLAMA_TIMEOUT": "120"},
             worker_source_dir=str(code))
    seq.step("absent", GONE, worker_env={"OLLAMA_TIMEOUT": "120"})
    seq.step("absent_again", GONE, worker_env={"OLLAMA_TIMEOUT": "120"})
    seq.step("status_absent", GONE, test_entry="status")
    seq.status["absent"] = json.loads((home / "status.json").read_text())
    return seq


def test_plist_has_every_key_and_the_environment(runs):
    home = runs.home
    assert runs.plists["mode"]["web"] == 0o600  # it holds secrets
    data = runs.plists[WEB_LABEL]
    base = f"{home}/coordinator-worker"
    assert data["Label"] == WEB_LABEL
    assert data["ProgramArguments"] == [f"{base}/venv/bin/python", f"{base}/app/worker_web.py"]
    assert data["WorkingDirectory"] == f"{base}/app"
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] is True
    log = f"{home}/Library/Logs/coordinator/web-worker.log"
    assert data["StandardOutPath"] == log
    assert data["StandardErrorPath"] == log
    assert data["EnvironmentVariables"] == {
        "PYTHONUNBUFFERED": "1",
        "REDIS_HOST": "10.89.20.40",
        "REDIS_PORT": "6379",
        "REDIS_USERNAME": "worker_macbookair",
        "REDIS_PASSWORD": "redis-secret",
        "PG_DSN": "host=10.89.20.40 port=5432 dbname=coordinator user=coordinator "
                  "password='pg pass with \\'quote\\' & <xml>'",
        "SEARXNG_URL": "http://10.89.20.1:8888",
        "OLLAMA_HOST": "http://localhost:11434",
        "OLLAMA_MODEL": ROLE_DEFAULTS["worker_ollama_model"],
        "COORDINATOR_URL": "http://10.89.20.40:8000",
        "COORDINATOR_TOKEN": "token-secret",
        "WORKER_ID": "web-worker-macbookair",
        "WORKER_HOST": "10.89.20.43",
        "SHUTDOWN_TIMEOUT": "30",
        "WORKER_BUILD": worker.worker_build(
            str(REPO / "files"), ROLE_DEFAULTS["worker_files"] + ["requirements-worker.txt"]),
    }
    # launchd waits that long plus 10 s after SIGTERM, then kills it.
    assert data["ExitTimeOut"] == 40
    # Unset (or Standard), launchd throttles an agent's CPU and I/O (launchd.plist(5)).
    assert data["ProcessType"] == "Interactive"


def test_ollama_agent_is_not_throttled_either():
    # The Ollama role's plist, rendered as its template is: the workers wait on its answers.
    template = (REPO / "roles" / "ollama" / "templates" / "ollama.plist.j2").read_text()
    rendered = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(template).render(
        ansible_managed="managed", ollama_launchd_label="com.ollama.serve",
        ollama_binary="/opt/homebrew/bin/ollama", ollama_service_environment={"A": "1"},
        ollama_launchd_log_file="/Users/mapleharp/Library/Logs/ollama.log")
    data = plistlib.loads(rendered.encode())
    assert data["ProcessType"] == "Interactive"
    assert data["ProgramArguments"] == ["/opt/homebrew/bin/ollama", "serve"]


def test_inference_agent_shares_the_python_but_not_the_log(runs):
    web, infer = runs.plists[WEB_LABEL], runs.plists[INFER_LABEL]
    # One venv python for both: macOS's Local Network permission is granted per binary.
    assert infer["ProgramArguments"][0] == web["ProgramArguments"][0]
    assert infer["ProgramArguments"][1].endswith("/app/worker_infer.py")
    assert infer["StandardOutPath"].endswith("/inference-worker.log")
    assert infer["StandardOutPath"] != web["StandardOutPath"]
    assert infer["EnvironmentVariables"]["WORKER_ID"] == "macbookair"
    assert infer["EnvironmentVariables"]["WORKER_DEVICE"] == "cpu"
    assert "WORKER_DEVICE" not in web["EnvironmentVariables"]


def test_first_run_enables_then_bootstraps_each_agent(runs):
    made = runs.calls["first"]
    assert changed(runs.outputs["first"]) > 0
    for label in (WEB_LABEL, INFER_LABEL):
        assert ["bootstrap", "gui/501", str(plist(runs.home, label))] in made
        assert ["print", f"gui/501/{label}"] in made  # checked: state = running
    enable = made.index(["enable", f"gui/501/{WEB_LABEL}"])
    assert enable < made.index(["bootstrap", "gui/501", str(plist(runs.home, WEB_LABEL))])
    assert ["enable", f"gui/501/{INFER_LABEL}"] not in made
    assert not [c for c in made if c[0] == "bootout"]


def test_legacy_load_unload_never_used(runs):
    every = [c for step in runs.calls.values() for c in step]
    assert not [c for c in every if c[0] in ("load", "unload")]


def test_second_run_changes_nothing(runs):
    assert changed(runs.outputs["second"]) == 0, runs.outputs["second"][-3000:]
    assert not [c for c in runs.calls["second"] if c[0] in ("bootstrap", "bootout", "kickstart")]


def test_check_mode_predicts_the_reload_of_a_changed_plist_and_changes_nothing(runs):
    output = runs.outputs["check_env_changed"]
    assert changed(output) > 0
    # Each agent would be reloaded: launchd_agent's plan, read with print only.
    for label in (WEB_LABEL, INFER_LABEL):
        assert re.search(rf"- bootout\n\s+- gui/501/{re.escape(label)}\n", output), output[-3000:]
    assert {c[0] for c in runs.calls["check_env_changed"]} <= {"print", "print-disabled"}
    for label in (WEB_LABEL, INFER_LABEL):
        assert plistlib.loads(runs.plists["after_check"][label])["EnvironmentVariables"] == (
            runs.plists[label]["EnvironmentVariables"])


def test_changed_plist_is_reloaded_with_bootout_then_bootstrap(runs):
    after = runs.calls["env_changed"]
    for label in (WEB_LABEL, INFER_LABEL):
        bootout = after.index(["bootout", f"gui/501/{label}"])
        bootstrap = after.index(["bootstrap", "gui/501", str(plist(runs.home, label))])
        assert bootout < bootstrap
    assert not [c for c in after if c[0] == "kickstart"]


def test_changed_code_reloads_each_agent_which_finishes_its_task(runs):
    # The code reaches each plist (WORKER_BUILD): bootout, which waits until the old process
    # has exited (SIGTERM: the worker finishes its task), then bootstrap; never kickstart -k,
    # which is SIGKILL (launchd_agent, docs/roles.md).
    after = runs.calls["code_changed"]
    for label in (WEB_LABEL, INFER_LABEL):
        bootout = after.index(["bootout", f"gui/501/{label}"])
        assert bootout < after.index(["bootstrap", "gui/501", str(plist(runs.home, label))])
    assert not [c for c in after if c[0] == "kickstart"]


def test_absent_worker_is_booted_out_and_removed_once(runs):
    assert changed(runs.outputs["absent"]) > 0
    assert ["bootout", f"gui/501/{WEB_LABEL}"] in runs.calls["absent"]
    assert not plist(runs.home, WEB_LABEL).exists()
    assert plist(runs.home, INFER_LABEL).exists()
    state = json.loads((runs.home / "launchctl.json").read_text())
    assert state["loaded"] == [INFER_LABEL]
    assert changed(runs.outputs["absent_again"]) == 0, runs.outputs["absent_again"][-3000:]
    assert not [c for c in runs.calls["absent_again"] if c[0] == "bootout"]


def test_secrets_never_reach_the_output(runs):
    for output in runs.outputs.values():
        for secret in ("redis-secret", "token-secret", "pg pass"):
            assert secret not in output


def test_missing_vault_secret_names_the_variable_and_the_fix(tmp_path):
    output = play(tmp_path, BOTH, entry="main", worker_db_password="")
    assert ("worker_db_password is not set (missing, empty or still CHANGE_ME): add it to "
            "inventory/<name>/group_vars/all/vault.yml (copy vault.yml.example, fill it in, then "
            "ansible-vault encrypt it)") in output
    assert not plist(tmp_path, WEB_LABEL).exists()


def test_macos_as_root_is_refused(tmp_path):
    output = play(tmp_path, BOTH, entry="main", test_uid=0)
    assert ("localhost is macOS and Ansible runs as root there: launchd agents belong to the "
            "login user, set ansible_become: false for localhost in host_vars") in output
    assert not plist(tmp_path, WEB_LABEL).exists()


def test_status_reports_what_launchd_has(runs):
    first = {w["name"]: w for w in runs.status["first"]["worker_status"]}
    for name in ("web-worker", "inference-worker"):
        assert {k: first[name][k] for k in ("installed", "enabled", "running", "pid")} == {
            "installed": True, "enabled": True, "running": True, "pid": 4242}, name
    assert runs.status["first"]["worker_web"]["label"] == WEB_LABEL
    # status only reads: print and print-disabled, nothing that changes launchd.
    assert {c[0] for c in runs.calls["status_first"]} <= {"print", "print-disabled"}
    gone = {w["name"]: w for w in runs.status["absent"]["worker_status"]}
    assert {k: gone["web-worker"][k] for k in ("installed", "enabled", "running", "pid")} == {
        "installed": False, "enabled": False, "running": False, "pid": 0}
    assert gone["inference-worker"]["running"] is True


# -- the registration check (verify.yml) -------------------------------------------------------

@pytest.fixture
def coordinator() -> Iterator[tuple[str, list[dict]]]:
    """A Coordinator answering GET /workers with the list the test fills in."""
    workers: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"workers": workers}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", workers
    server.shutdown()
    server.server_close()


def running_agents(home: Path, loaded: list[str]) -> None:
    """A Mac whose launchd runs the ``loaded`` agents (the launchctl double gives each pid
    4242)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "launchctl.json").write_text(
        json.dumps({"loaded": loaded, "disabled": [], "calls": []}))


def test_verify_reads_the_pid_launchd_runs_and_finds_it_registered(tmp_path, coordinator):
    url, workers = coordinator
    running_agents(tmp_path, [WEB_LABEL, INFER_LABEL])
    # Each registers with the version of the program the role ships.
    shipped = {"web-worker-macbookair": worker_web.VERSION, "macbookair": worker_infer.VERSION}
    workers += [{"worker_id": worker_id, "host": "10.89.20.43", "version": version,
                 "alive": True, "pid": 4242} for worker_id, version in shipped.items()]
    output = play(tmp_path, BOTH, entry="verify", worker_coordinator_url=url)
    assert re.search(r"localhost\s*:.*\sfailed=0\s", output), output[-3000:]
    registered = json.loads((tmp_path / "registered.json").read_text())
    assert registered == {
        "web-worker": {"worker_id": "web-worker-macbookair", "host": "10.89.20.43",
                       "version": worker_web.VERSION, "pid": 4242},
        "inference-worker": {"worker_id": "macbookair", "host": "10.89.20.43",
                             "version": worker_infer.VERSION, "pid": 4242}}
    # launchd asked through host_state: print and print-disabled only.
    asked = calls(tmp_path)
    assert ["print", f"gui/501/{WEB_LABEL}"] in asked
    assert {c[0] for c in asked} == {"print", "print-disabled"}


def test_verify_fails_for_a_worker_registered_with_another_version(tmp_path, coordinator):
    url, workers = coordinator
    running_agents(tmp_path, [WEB_LABEL, INFER_LABEL])
    workers += [{"worker_id": "web-worker-macbookair", "host": "10.89.20.43",
                 "version": "0.9-old", "alive": True, "pid": 4242},
                {"worker_id": "macbookair", "host": "10.89.20.43",
                 "version": worker_infer.VERSION, "alive": True, "pid": 4242}]
    output = play(tmp_path, BOTH, entry="verify", worker_coordinator_url=url,
                  worker_register_retries=1, worker_register_delay=0)
    flat = " ".join(output.split())
    assert (f"web-worker (web-worker-macbookair) on localhost is not registered alive with the "
            f"Coordinator at {url} as host 10.89.20.43, version {worker_web.VERSION}, pid 4242 "
            "(Coordinator says: {") in flat
    assert "'version': '0.9-old'" in flat
    # The other worker is listed as expected: the message names only the one that is not.
    assert "inference-worker (macbookair) on localhost is not registered" not in flat
    assert not (tmp_path / "registered.json").exists()


def test_verify_of_an_agent_launchd_does_not_run_fails_at_once_with_its_log(tmp_path,
                                                                           coordinator):
    url, _ = coordinator
    running_agents(tmp_path, [INFER_LABEL])
    log = tmp_path / "Library" / "Logs" / "coordinator" / "web-worker.log"
    log.parent.mkdir(parents=True)
    log.write_text("Traceback: the web worker died\n")
    output = play(tmp_path, [BOTH[0]], entry="verify", worker_coordinator_url=url,
                  worker_register_retries=0)
    flat = " ".join(output.split())
    assert "web-worker (web-worker-macbookair) on localhost is not registered alive" in flat
    assert "pid ?" in flat
    assert "Traceback: the web worker died" in flat
    assert not (tmp_path / "registered.json").exists()


# -- the virtualenv's interpreter (tasks/preflight.yml, tasks/install.yml) ---------------------
#
# A Mac as it ships: over SSH its PATH is /usr/bin:/bin:/usr/sbin:/sbin, whose python3 is the
# Command Line Tools' 3.9, and Homebrew (when installed) is off that PATH. Here PATH's python3
# is a CPython 3.9 (pyenv's), Homebrew's prefix and python.org's Frameworks directory are
# folders of the test, their interpreters pyenv's CPythons of the same versions.

PYENV = Path.home() / ".pyenv" / "versions"
FORMULA = "python@3.12"


def cpython(minor: str) -> Path:
    """pyenv's CPython <minor> (3.9, 3.12, ...); the test is skipped without it."""
    found = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"))
    if not found:
        pytest.skip(f"no CPython {minor} under {PYENV}")
    return found[-1]


def version_of(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()


# Homebrew's own brew, as far as the role uses it through community.general.homebrew:
# `brew info --json=v2 <formula>` (an entry per formula, "installed" listing the versions
# installed, empty when none: https://docs.brew.sh/Querying-Brew) and `brew install
# <formula>`, which puts the keg in Cellar/<formula>/<version> and links opt/<formula> to it
# (https://docs.brew.sh/Formula-Cookbook, "opt_prefix"). Like Homebrew's bin/brew it refuses
# root outside a container (Library/Homebrew/brew.sh, check-run-command-as-root).
FAKE_BREW = '''#!{python}
import json, os, sys
from pathlib import Path

prefix = Path(__file__).resolve().parent.parent
with open(prefix / "brew-calls.json", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
container = os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")
if os.geteuid() == 0 and not container:
    sys.exit("Error: Running Homebrew as root is extremely dangerous and no longer supported.")
formulae = {{{formula!r}: {python!r}}}
command, names = sys.argv[1], [a for a in sys.argv[2:] if not a.startswith("-")]
for name in names:
    if name not in formulae:
        sys.exit(f'Error: No available formula with the name "{{name}}".')
if command == "info":
    print(json.dumps({{"formulae": [
        {{"name": n, "full_name": n, "tap": "homebrew/core", "aliases": [], "oldnames": [],
          "outdated": False,
          "installed": [{{"version": {version!r}}}] if (prefix / "opt" / n).exists() else []}}
        for n in names], "casks": []}}))
elif command == "install":
    for name in names:
        keg = prefix / "Cellar" / name / {version!r}
        (keg / "bin").mkdir(parents=True, exist_ok=True)
        minor = name.split("@")[1]
        (keg / "bin" / f"python{{minor}}").symlink_to(formulae[name])
        (prefix / "opt").mkdir(exist_ok=True)
        (prefix / "opt" / name).symlink_to(keg)
else:
    sys.exit(f"Error: Unknown command: {{command}}")
'''


@dataclass
class Mac:
    """A fake Mac's interpreters: PATH's python3, Homebrew's prefix, python.org's builds."""

    root: Path
    output: str = ""  # the last play's, as Ansible printed it
    home: Path = field(init=False)
    path_bin: Path = field(init=False)
    prefix: Path = field(init=False)
    frameworks: Path = field(init=False)

    def __post_init__(self) -> None:
        self.home, self.path_bin = self.root / "home", self.root / "usr-bin"
        self.prefix, self.frameworks = self.root / "homebrew", self.root / "Frameworks"
        for folder in (self.home, self.path_bin, self.frameworks):
            folder.mkdir(parents=True)
        (self.path_bin / "python3").symlink_to(cpython("3.9"))
        source = self.root / "files"
        source.mkdir()
        # No dependency: pip has nothing to fetch; the interpreter is what is tested.
        (source / "requirements-worker.txt").write_text("# no dependency\n")
        (source / "worker_web.py").write_text("")

    def brew(self) -> None:
        """Homebrew installed, without its Python."""
        (self.prefix / "bin").mkdir(parents=True)
        brew = self.prefix / "bin" / "brew"
        brew.write_text(FAKE_BREW.format(python=str(cpython("3.12")), formula=FORMULA,
                                         version=version_of(cpython("3.12"))))
        brew.chmod(0o755)

    def python_org(self, minor: str) -> Path:
        """python.org's installer's build of <minor>."""
        python = self.frameworks / minor / "bin" / f"python{minor}"
        python.parent.mkdir(parents=True)
        python.symlink_to(cpython(minor))
        return python

    def brew_calls(self) -> list[list[str]]:
        log = self.prefix / "brew-calls.json"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    @property
    def venv(self) -> Path:
        return self.home / "coordinator-worker" / "venv"

    def venv_python(self) -> str:
        """The real path of the interpreter the virtualenv runs on."""
        return str((self.venv / "bin" / "python").resolve())

    def play(self, entry: str = "install", instances: list[dict] | None = None,
             check: bool = False, **extra: object) -> str:
        settings = {"test_path": f"{self.path_bin}:/usr/bin:/bin:/usr/sbin:/sbin",
                    "worker_homebrew_prefix": str(self.prefix),
                    "worker__python_frameworks": str(self.frameworks),
                    "worker_source_dir": str(self.root / "files"),
                    # The Mac's login user, not root (who runs these tests).
                    "worker_files": ["worker_web.py"], "test_user": "nobody",
                    "worker_register_check": False, **extra}
        self.output = play(self.home, BOTH if instances is None else instances, entry=entry,
                           check=check, **settings)
        return " ".join(self.output.split())


@pytest.fixture
def mac(tmp_path) -> Mac:
    return Mac(tmp_path)


@pytest.mark.parametrize("entry", ["main", "preflight"])
def test_a_mac_as_it_ships_is_stopped_before_any_change_naming_python_and_fix(mac, entry):
    output = mac.play(entry=entry)
    python3 = mac.path_bin / "python3"
    assert (f"localhost: {python3} is Python {version_of(cpython('3.9'))}, the workers need "
            "Python 3.10 or later: install Homebrew (https://brew.sh) and run `brew install "
            "python@3.12` there, or install Python 3.10 or later from python.org, or set "
            "worker_python to a Python 3.10 or later") in output
    assert not (mac.home / "coordinator-worker").exists()
    assert not (mac.home / "Library").exists()


def test_brew_installs_its_python_when_missing_and_the_venv_is_built_from_it(mac):
    mac.brew()
    # A python.org build is there too: Homebrew's Python comes first.
    mac.python_org("3.13")
    running_agents(mac.home, [])
    # The whole role, as site.yml runs it: preflight, install, the agents.
    mac.play(entry="main", instances=[BOTH[0]])
    assert ["install", FORMULA] in mac.brew_calls()
    assert mac.venv_python() == str(cpython("3.12").resolve())
    agent = plistlib.loads(plist(mac.home, WEB_LABEL).read_bytes())
    assert agent["ProgramArguments"][0] == str(mac.venv / "bin" / "python")
    # As the login user: nothing asked for root, wheel or sudo (brew refuses root).
    assert "module_args:" in mac.output
    assert asked_for_root(mac.output) == []
    assert not re.search(r"EXEC .*\bsudo\b", mac.output)
    asked = len(mac.brew_calls())
    assert changed(mac.play(entry="main", instances=[BOTH[0]])) == 0
    assert mac.brew_calls()[asked:] == []  # the virtualenv runs: brew is not even asked


def test_check_mode_verifies_a_worker_a_run_leaves_running_and_skips_one_it_would_restart(
        mac, coordinator):
    url, workers = coordinator
    (mac.root / "files" / "worker_web.py").write_text('VERSION = "9.9"\n')
    mac.python_org("3.13")
    running_agents(mac.home, [])
    mac.play(entry="main", instances=[BOTH[0]], worker_coordinator_url=url)
    verify = dict(instances=[BOTH[0]], check=True, worker_register_check=True,
                  worker_coordinator_url=url, worker_register_retries=1,
                  worker_register_delay=0)
    # Converged: nothing would change, so the registration is read and checked as a run does.
    workers.append({"worker_id": "web-worker-macbookair", "host": "10.89.20.43",
                    "version": "9.9", "alive": True, "pid": 4242})
    output = mac.play(entry="main", **verify)
    assert changed(output) == 0 and "failed=0" in output, output[-3000:]
    assert "TASK [worker : Wait until the Coordinator lists every worker alive" in output
    workers.clear()
    assert "web-worker (web-worker-macbookair) on localhost is not registered alive" in (
        mac.play(entry="main", **verify))
    # A run would reload the changed agent: nothing could register yet, nothing is checked.
    before = len(calls(mac.home))
    output = mac.play(entry="main", worker_env={"LAB_DRIFT": "1"}, **verify)
    assert changed(output) > 0 and "failed=0" in output, output[-3000:]
    assert "Wait until the Coordinator lists every worker alive" not in output
    assert {c[0] for c in calls(mac.home)[before:]} <= {"print", "print-disabled"}


def test_without_brew_the_newest_python_org_build_is_used(mac):
    mac.python_org("3.10")
    mac.python_org("3.13")
    mac.play()
    assert mac.venv_python() == str(cpython("3.13").resolve())


def test_a_venv_on_another_good_python_is_kept_and_the_move_is_explained(mac):
    mac.python_org("3.13")
    mac.play()
    # Homebrew's Python arrives later: the virtualenv stays on 3.13 (its Local Network grant).
    mac.brew()
    subprocess.run([str(mac.prefix / "bin" / "brew"), "install", FORMULA], check=True)
    output = mac.play()
    homebrew = mac.prefix / "opt" / FORMULA / "bin" / "python3.12"
    assert (f"localhost: keeping {mac.venv} on {cpython('3.13').resolve()} (Python "
            f"{version_of(cpython('3.13'))}) rather than building it on {homebrew} (Python "
            f"{version_of(cpython('3.12'))}), which would need a new Local Network grant. To "
            f"move it, delete {mac.venv} and run again, then "
            f"allow {homebrew} in System Settings > Privacy & Security > Local Network") in output
    assert mac.venv_python() == str(cpython("3.13").resolve())


def test_a_venv_left_on_python_3_9_is_rebuilt_on_the_one_found_saying_so(mac):
    # What an install before this role looked for a Python left behind: pip refused the pins.
    mac.venv.parent.mkdir(parents=True)
    subprocess.run([str(cpython("3.9")), "-m", "venv", "--without-pip", str(mac.venv)],
                   check=True)
    build = mac.python_org("3.12")
    output = mac.play()
    assert (f"localhost: {mac.venv} runs Python {version_of(cpython('3.9'))}, and the workers "
            f"need 3.10 or later: it is rebuilt on {build}; allow that interpreter in System "
            "Settings > Privacy & Security > Local Network") in output
    assert mac.venv_python() == str(cpython("3.12").resolve())


def test_brew_not_allowed_to_install_is_named_with_its_command(mac):
    mac.brew()
    output = mac.play(entry="main", worker_homebrew_install=False)
    assert (f"localhost: {mac.path_bin / 'python3'} is Python {version_of(cpython('3.9'))}, the "
            f"workers need Python 3.10 or later: run `{mac.prefix}/bin/brew install python@3.12` "
            "there (worker_homebrew_install is false), or set worker_python to a Python 3.10 or "
            "later") in output
    assert mac.brew_calls() == [] or all(c[0] != "install" for c in mac.brew_calls())
    assert not (mac.home / "coordinator-worker").exists()


def test_a_worker_python_too_old_is_named(mac):
    old = cpython("3.9")
    output = mac.play(entry="main", worker_python=str(old))
    assert (f"localhost: {old} is Python {version_of(old)}, the workers need Python 3.10 or "
            "later: set worker_python to a Python 3.10 or later, or leave it empty to let the "
            "role find one") in output
    assert not (mac.home / "coordinator-worker").exists()
