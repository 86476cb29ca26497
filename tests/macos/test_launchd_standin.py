"""The lab Mac's launchd and launchctl (lab/macos/), run on this host as the current user.

Each test drives the daemon through the client and asserts what macOS does, with the exact
words and exit codes a user reads (lab/macos/README.md cites the source of each).
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import plistlib
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lab.macos import launchd_protocol as proto

MACOS = Path(__file__).resolve().parents[2] / "lab" / "macos"
DAEMON = MACOS / "launchd.py"
CLIENT = MACOS / "launchctl"
UID = os.getuid()
DOMAIN = f"gui/{UID}"
PY = sys.executable


def python39() -> str | None:
    """A CPython 3.9 that runs (the lab node's /usr/bin/python3 is 3.9, as a Mac's is)."""
    candidates = [*map(str, sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python3.9"))),
                  shutil.which("python3.9")]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


PYTHON39 = python39()
RICHER = "Try re-running the command as root for richer errors.\n"


def wait_until(check: Callable[[], object], timeout: float = 10, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or check}")


class Mac:
    """One user's lab Mac: the session daemon (when logged in) and launchctl."""

    def __init__(self, root: Path, python: str = PY) -> None:
        self.root = root
        self.python = python
        self.home = root / "home"
        self.agents = self.home / "Library" / "LaunchAgents"
        self.agents.mkdir(parents=True)
        self.state = root / "state"
        self.sockets = root / "run"
        self.sockets.mkdir()
        self.socket = self.sockets / f"gui-{UID}.sock"
        self.shim = ""
        self.daemon: subprocess.Popen[bytes] | None = None

    def login(self) -> None:
        command = [self.python, str(DAEMON), "--socket", str(self.socket),
                   "--state-dir", str(self.state), "--home", str(self.home)]
        if self.shim:
            command += ["--localnet-shim", self.shim]
        self.daemon = subprocess.Popen(command)
        wait_until(self.socket.exists, what="the session's socket")

    def logout(self) -> None:
        assert self.daemon is not None
        self.daemon.send_signal(signal.SIGTERM)
        assert self.daemon.wait(timeout=30) == 0
        self.daemon = None

    def launchctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LAB_LAUNCHD_SOCKET_DIR": str(self.sockets)}
        return subprocess.run([self.python, str(CLIENT), *args], env=env, text=True,
                              capture_output=True, timeout=30)

    def agent(self, label: str, code: str, where: Path | None = None, **keys: object) -> Path:
        """A plist whose job runs ``code`` with this Python; written 0644 as launchd wants."""
        spec = {"Label": label, "ProgramArguments": [PY, "-c", code], **keys}
        path = (where or self.root) / f"{label}.plist"
        path.write_bytes(plistlib.dumps(spec))
        path.chmod(0o644)
        return path

    def printed(self, label: str) -> dict[str, str]:
        """The top-level `key = value` lines of launchctl print for ``label``."""
        result = self.launchctl("print", f"{DOMAIN}/{label}")
        assert result.returncode == 0, result.stderr
        lines = [line[1:] for line in result.stdout.splitlines()
                 if line.startswith("\t") and not line.startswith("\t\t") and " = " in line]
        return dict(line.split(" = ", 1) for line in lines)

    def pid(self, label: str) -> int:
        return int(wait_until(lambda: self.printed(label).get("pid"), what=f"{label} running"))

    def handling_term(self, label: str, marker: Path) -> int:
        """The pid of a ``draining`` job once its SIGTERM handler is in place: a SIGTERM
        before it would end the job at once, on a loaded machine too."""
        pid = self.pid(label)
        wait_until(ready(marker).exists, what=f"{label}'s SIGTERM handler")
        return pid

    def gone(self, label: str) -> bool:
        return self.launchctl("print", f"{DOMAIN}/{label}").returncode == 113


@pytest.fixture
def mac(tmp_path: Path) -> Iterator[Mac]:
    mac = Mac(tmp_path)
    mac.login()
    yield mac
    if mac.daemon is not None:
        mac.logout()


@pytest.fixture
def logged_out(tmp_path: Path) -> Mac:
    return Mac(tmp_path)


# A job that marks SIGTERM in a file, takes `delay` seconds to finish, then exits.
def ready(marker: Path) -> Path:
    """Where a ``draining`` job says its SIGTERM handler is in place."""
    return marker.with_name(marker.name + ".ready")


def draining(marker: Path, delay: float) -> str:
    return (f"import signal, sys, time\n"
            f"def term(*_):\n"
            f"    open({str(marker)!r}, 'a').write('term\\n')\n"
            f"    time.sleep({delay})\n"
            f"    sys.exit(0)\n"
            f"signal.signal(signal.SIGTERM, term)\n"
            f"open({str(ready(marker))!r}, 'w').close()\n"
            f"while True: time.sleep(0.1)\n")


SLEEPER = "import time\nwhile True: time.sleep(0.1)\n"


def stamp(starts: Path) -> list[str]:
    """A job that appends the time it started to ``starts`` and exits: sh and date start in
    milliseconds, so the gaps between lines are launchd's, not an interpreter's start-up."""
    return ["/bin/sh", "-c", f"date +%s.%N >> '{starts}'"]


# -- nobody logged in ------------------------------------------------------------------------


def test_nobody_logged_in_print_and_bootstrap_fail_as_macos(logged_out: Mac):
    plist = logged_out.agent("lab.a", SLEEPER)
    printed = logged_out.launchctl("print", f"{DOMAIN}/lab.a")
    assert (printed.returncode, printed.stdout, printed.stderr) == (
        125, "", "Domain does not support specified action\n")
    boot = logged_out.launchctl("bootstrap", DOMAIN, str(plist))
    assert (boot.returncode, boot.stderr) == (
        125, "Bootstrap failed: 125: Domain does not support specified action\n")
    bootout = logged_out.launchctl("bootout", f"{DOMAIN}/lab.a")
    assert (bootout.returncode, bootout.stderr) == (
        125, "Boot-out failed: 125: Domain does not support specified action\n")
    disable = logged_out.launchctl("disable", f"{DOMAIN}/lab.a")
    assert (disable.returncode, disable.stderr) == (
        125, "Could not disable service: 125: Domain does not support specified action\n")
    # Over SSH, list shows the caller's background domain: none of the user's agents.
    listed = logged_out.launchctl("list")
    assert (listed.returncode, listed.stdout) == (0, "PID\tStatus\tLabel\n")


def test_a_socket_left_by_a_dead_session_is_nobody_logged_in(logged_out: Mac):
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(logged_out.socket))
    stale.close()
    assert logged_out.launchctl("print", DOMAIN).returncode == 125


# -- the command line ------------------------------------------------------------------------


def test_command_line_errors_answer_without_a_session(logged_out: Mac):
    unknown = logged_out.launchctl("frobnicate")
    assert unknown.returncode == 1
    assert unknown.stderr == "Unrecognized subcommand: frobnicate\n"
    assert unknown.stdout.startswith("Usage: launchctl <subcommand> ... | help [subcommand]\n")
    load = logged_out.launchctl("load", "-w", "x.plist")
    assert (load.returncode, load.stderr) == (
        5, "Load failed: 5: Input/output error\n"
           "Try running `launchctl bootstrap` as root for richer errors.\n")
    target = logged_out.launchctl("kickstart", "-k", "lab.a")
    assert target.returncode == 64
    assert target.stderr.startswith("Unrecognized target specifier.")
    assert target.stderr.endswith("Usage: launchctl kickstart [-kp] <service-target>\n")
    bad_signal = logged_out.launchctl("kill", "SIGNOPE", f"{DOMAIN}/lab.a")
    assert (bad_signal.returncode, bad_signal.stderr) == (
        64, "Invalid signal.\nUsage: launchctl kill <signal-number|signal-name> "
            "<service-target>\n")


# -- bootstrap, print, list ------------------------------------------------------------------


def test_bootstrap_runs_at_load_and_print_shows_it(mac: Mac):
    plist = mac.agent("lab.run", SLEEPER, RunAtLoad=True)
    assert mac.launchctl("bootstrap", DOMAIN, str(plist)).returncode == 0
    pid = mac.pid("lab.run")
    fields = mac.printed("lab.run")
    assert fields["state"] == "running"
    assert fields["path"] == str(plist)
    assert fields["program"] == PY
    assert fields["last exit code"] == "(never exited)"
    assert fields["minimum runtime"] == "10"  # ThrottleInterval's default
    assert fields["exit timeout"] == "20"  # ExitTimeOut's default
    listed = mac.launchctl("list").stdout.splitlines()
    assert f"{pid}\t0\tlab.run" in listed
    one = mac.launchctl("list", "lab.run").stdout
    assert one.startswith('{\n\t"Label" = "lab.run";\n\t"LastExitStatus" = 0;\n')
    assert f'\t"PID" = {pid};\n' in one
    unknown = mac.launchctl("list", "lab.none")
    assert (unknown.returncode, unknown.stderr) == (
        113, 'Could not find service "lab.none" in domain for port\n')
    domain = mac.launchctl("print", DOMAIN).stdout
    assert f"\t\t{pid:>8} {'-':>6} \tlab.run\n" in domain
    missing = mac.launchctl("print", f"{DOMAIN}/lab.none")
    assert (missing.returncode, missing.stderr) == (
        113, f'Bad request.\nCould not find service "lab.none" in domain for user gui: {UID}\n')


def test_bootstrap_refuses_what_launchd_refuses(mac: Mac):
    refused = f"Bootstrap failed: 5: Input/output error\n{RICHER}"
    no_label = mac.root / "nolabel.plist"
    no_label.write_bytes(plistlib.dumps({"ProgramArguments": [PY]}))
    no_program = mac.root / "noprogram.plist"
    no_program.write_bytes(plistlib.dumps({"Label": "lab.noprogram"}))
    writable = mac.agent("lab.writable", SLEEPER)
    writable.chmod(0o664)
    for path in (no_label, no_program, writable, mac.root / "missing.plist"):
        result = mac.launchctl("bootstrap", DOMAIN, str(path))
        assert (result.returncode, result.stderr) == (5, refused), path
    # A binary plist is read as an XML one is; once loaded, its label is refused again.
    binary = mac.root / "binary.plist"
    binary.write_bytes(plistlib.dumps({"Label": "lab.binary", "ProgramArguments": [PY]},
                                      fmt=plistlib.FMT_BINARY))
    assert mac.launchctl("bootstrap", DOMAIN, str(binary)).returncode == 0
    again = mac.launchctl("bootstrap", DOMAIN, str(binary))
    assert (again.returncode, again.stderr) == (5, refused)


# -- bootout ---------------------------------------------------------------------------------


def test_bootout_returns_before_the_job_has_exited(mac: Mac):
    marker = mac.root / "term"
    plist = mac.agent("lab.drain", draining(marker, 3), RunAtLoad=True)
    mac.launchctl("bootstrap", DOMAIN, str(plist))
    pid = mac.handling_term("lab.drain", marker)
    started = time.monotonic()
    bootout = mac.launchctl("bootout", f"{DOMAIN}/lab.drain")
    assert bootout.returncode == 0
    assert time.monotonic() - started < 1.0
    fields = mac.printed("lab.drain")
    assert (fields["state"], fields["pid"]) == ("SIGTERMed", str(pid))
    # The naive reload: bootstrap right after bootout finds the label still loaded.
    race = mac.launchctl("bootstrap", DOMAIN, str(plist))
    assert (race.returncode, race.stderr) == (5, f"Bootstrap failed: 5: Input/output error\n"
                                                 f"{RICHER}")
    twice = mac.launchctl("bootout", f"{DOMAIN}/lab.drain")
    assert (twice.returncode, twice.stderr) == (
        36, "Boot-out failed: 36: Operation now in progress\n")
    wait_until(lambda: mac.gone("lab.drain"), what="the label released")
    assert time.monotonic() - started >= 3
    assert marker.read_text() == "term\n"
    assert mac.launchctl("bootstrap", DOMAIN, str(plist)).returncode == 0


def test_bootout_kills_after_exit_timeout(mac: Mac):
    marker = mac.root / "term"
    plist = mac.agent("lab.stuck", draining(marker, 60), RunAtLoad=True, ExitTimeOut=1)
    mac.launchctl("bootstrap", DOMAIN, str(plist))
    mac.handling_term("lab.stuck", marker)
    started = time.monotonic()
    mac.launchctl("bootout", f"{DOMAIN}/lab.stuck")
    wait_until(lambda: mac.gone("lab.stuck"), what="SIGKILL after ExitTimeOut")
    assert 1.0 <= time.monotonic() - started < 5
    assert marker.read_text() == "term\n"


def test_bootout_of_unknown_labels(mac: Mac):
    by_label = mac.launchctl("bootout", f"{DOMAIN}/lab.none")
    assert (by_label.returncode, by_label.stderr) == (3, "Boot-out failed: 3: No such process\n")
    by_path = mac.launchctl("bootout", DOMAIN, str(mac.agent("lab.none", SLEEPER)))
    assert (by_path.returncode, by_path.stderr) == (5, "Boot-out failed: 5: Input/output error\n")


# -- kickstart and kill ----------------------------------------------------------------------


def test_kickstart_k_kills_with_sigkill_and_starts_again(mac: Mac):
    marker = mac.root / "term"
    plist = mac.agent("lab.kick", draining(marker, 0), RunAtLoad=True)
    mac.launchctl("bootstrap", DOMAIN, str(plist))
    old = mac.handling_term("lab.kick", marker)
    kicked = mac.launchctl("kickstart", "-kp", f"{DOMAIN}/lab.kick")
    assert kicked.returncode == 0
    new = int(kicked.stdout)  # a pipe gets the bare pid
    assert new != old
    assert mac.printed("lab.kick")["pid"] == str(new)
    assert mac.printed("lab.kick")["last terminating signal"] == "Killed: 9"
    assert not marker.exists()  # its SIGTERM handler never ran


def test_kickstart_starts_a_job_that_is_not_running(mac: Mac):
    plist = mac.agent("lab.idle", SLEEPER)
    mac.launchctl("bootstrap", DOMAIN, str(plist))
    assert mac.printed("lab.idle")["state"] == "not running"
    assert mac.launchctl("kickstart", f"{DOMAIN}/lab.idle").returncode == 0
    assert mac.printed("lab.idle")["state"] == "running"
    unknown = mac.launchctl("kickstart", "-k", f"{DOMAIN}/lab.none")
    assert (unknown.returncode, unknown.stderr) == (
        113, f'Could not find service "lab.none" in domain for user gui: {UID}\n')


def test_kill_signals_the_job(mac: Mac):
    plist = mac.agent("lab.victim", SLEEPER, RunAtLoad=True)
    mac.launchctl("bootstrap", DOMAIN, str(plist))
    mac.pid("lab.victim")
    assert mac.launchctl("kill", "TERM", f"{DOMAIN}/lab.victim").returncode == 0
    wait_until(lambda: mac.printed("lab.victim")["state"] == "not running", what="exit")
    assert mac.printed("lab.victim")["last terminating signal"] == "Terminated: 15"
    idle = mac.launchctl("kill", "15", f"{DOMAIN}/lab.victim")
    assert (idle.returncode, idle.stderr) == (3, "No process to signal.\n")


# -- KeepAlive -------------------------------------------------------------------------------


def test_keepalive_restarts_no_sooner_than_the_throttle_interval(mac: Mac):
    starts = mac.root / "starts"
    mac.launchctl("bootstrap", DOMAIN, str(mac.agent("lab.crash", "", KeepAlive=True,
                                                     ThrottleInterval=1,
                                                     ProgramArguments=stamp(starts))))
    # Not kept alive: KeepAlive false, and a clean exit under SuccessfulExit false (which
    # starts the job at load by itself).
    mac.launchctl("bootstrap", DOMAIN, str(mac.agent("lab.once", "pass", RunAtLoad=True,
                                                     KeepAlive=False)))
    mac.launchctl("bootstrap", DOMAIN, str(mac.agent("lab.clean", "pass", ThrottleInterval=1,
                                                     KeepAlive={"SuccessfulExit": False})))
    wait_until(lambda: starts.exists() and len(starts.read_text().split()) >= 3,
               what="three starts")
    times = [float(t) for t in starts.read_text().split()]
    assert all(later - earlier >= 0.95 for earlier, later in itertools.pairwise(times))
    for label in ("lab.once", "lab.clean"):
        fields = mac.printed(label)
        assert (fields["runs"], fields["state"], fields["last exit code"]) == (
            "1", "not running", "0"), label


def test_keepalive_without_throttle_interval_waits_ten_seconds(mac: Mac):
    starts = mac.root / "starts"
    mac.launchctl("bootstrap", DOMAIN, str(mac.agent("lab.fast", "", KeepAlive=True,
                                                     ProgramArguments=stamp(starts))))
    wait_until(lambda: mac.printed("lab.fast")["state"] == "spawn scheduled", what="throttle")
    assert mac.printed("lab.fast")["minimum runtime"] == "10"
    wait_until(lambda: len(starts.read_text().split()) == 2, timeout=15, what="the restart")
    first, second = (float(t) for t in starts.read_text().split())
    # Ten seconds from spawn to spawn; the stamps are taken once each sh has started, which on
    # a loaded machine may lag its spawn by a tenth of a second more one time than the other
    # (9.93 s in a full run). Without the throttle the restart comes within a second.
    assert second - first >= 9.5


# -- enable, disable, login, logout ---------------------------------------------------------


def test_disable_persists_across_logins_and_login_skips_disabled_agents(mac: Mac):
    mac.agent("lab.on", SLEEPER, where=mac.agents, RunAtLoad=True)
    mac.agent("lab.off", SLEEPER, where=mac.agents, RunAtLoad=True)
    mac.logout()
    mac.login()
    mac.pid("lab.on")
    mac.pid("lab.off")
    assert mac.launchctl("disable", f"{DOMAIN}/lab.off").returncode == 0
    assert mac.launchctl("enable", f"{DOMAIN}/lab.on").returncode == 0
    # disable stops nothing now; it decides the next bootstrap.
    assert mac.printed("lab.off")["state"] == "running"
    mac.logout()
    assert stat.S_IMODE((mac.state / proto.disabled_db_name(UID)).stat().st_mode) == 0o644
    mac.login()
    mac.pid("lab.on")
    assert mac.gone("lab.off")
    disabled = mac.launchctl("print-disabled", DOMAIN)
    assert disabled.stdout == ('disabled services = {\n\t"lab.off" => disabled\n'
                               '\t"lab.on" => enabled\n}\n')
    refused = mac.launchctl("bootstrap", DOMAIN, str(mac.agents / "lab.off.plist"))
    assert (refused.returncode, refused.stderr) == (
        5, f"Bootstrap failed: 5: Input/output error\n{RICHER}")
    mac.launchctl("enable", f"{DOMAIN}/lab.off")
    assert mac.launchctl("bootstrap", DOMAIN, str(mac.agents / "lab.off.plist")).returncode == 0


def test_logout_stops_every_job_as_bootout_does(mac: Mac):
    marker = mac.root / "term"
    plist = mac.agent("lab.bye", draining(marker, 0.5), RunAtLoad=True)
    mac.launchctl("bootstrap", DOMAIN, str(plist))
    pid = mac.handling_term("lab.bye", marker)
    mac.logout()
    assert marker.read_text() == "term\n"
    assert not mac.socket.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # Nothing loaded is remembered: after the next login only ~/Library/LaunchAgents counts.
    mac.login()
    assert mac.gone("lab.bye")


# -- what a job gets -------------------------------------------------------------------------


def test_job_environment_directory_logs_and_process_group(mac: Mac):
    workdir = mac.root / "work"
    workdir.mkdir()
    log = mac.root / "logs" / "job.log"  # its directory does not exist yet
    # The environment the process was started with (Python itself may add LC_CTYPE).
    code = ("import json, os\n"
            "raw = open('/proc/self/environ', 'rb').read().decode().split('\\0')\n"
            "env = dict(item.split('=', 1) for item in raw if item)\n"
            "print(json.dumps({'env': env, 'cwd': os.getcwd(),\n"
            "    'pgid': os.getpgid(0), 'sid': os.getsid(0), 'pid': os.getpid()}))\n")
    plist = mac.agent("lab.env", code, RunAtLoad=True, WorkingDirectory=str(workdir),
                      StandardOutPath=str(log), StandardErrorPath=str(log), Umask=0o077,
                      EnvironmentVariables={"LAB_VAR": "x", "PATH": "/opt/bin:/usr/bin"})
    mac.launchctl("bootstrap", DOMAIN, str(plist))
    wait_until(lambda: log.exists() and log.read_text(), what="the job's output")
    seen = json.loads(log.read_text())
    user = seen["env"]["USER"]
    assert seen["env"] == {
        "PATH": "/opt/bin:/usr/bin", "HOME": str(mac.home), "USER": user, "LOGNAME": user,
        "SHELL": seen["env"]["SHELL"], "TMPDIR": str(mac.state / f"T-{UID}"),
        "XPC_SERVICE_NAME": "lab.env", "XPC_FLAGS": "0x0", "LAB_VAR": "x"}
    assert seen["cwd"] == str(workdir)
    assert seen["pgid"] == seen["sid"] == seen["pid"]
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    # Logs are appended to, never truncated.
    wait_until(lambda: mac.printed("lab.env")["state"] == "not running", what="exit")
    mac.launchctl("kickstart", f"{DOMAIN}/lab.env")
    wait_until(lambda: len(log.read_text().splitlines()) == 2, what="a second line")


def test_default_path_and_missing_program(mac: Mac):
    log = mac.root / "path.log"
    plist = mac.agent("lab.path", "import os; print(os.environ['PATH'])", RunAtLoad=True,
                      StandardOutPath=str(log))
    mac.launchctl("bootstrap", DOMAIN, str(plist))
    wait_until(lambda: log.exists() and log.read_text(), what="output")
    assert log.read_text() == "/usr/bin:/bin:/usr/sbin:/sbin\n"
    missing = mac.root / "missing.plist"
    missing.write_bytes(plistlib.dumps({"Label": "lab.missing", "RunAtLoad": True,
                                        "ProgramArguments": ["/nonexistent/prog"]}))
    missing.chmod(0o644)
    mac.launchctl("bootstrap", DOMAIN, str(missing))
    assert mac.printed("lab.missing")["last exit code"] == "78: EX_CONFIG"


def test_the_local_network_switch_without_its_shim_refuses_jobs(mac: Mac):
    (mac.state / proto.LOCALNET_DENIED).touch()
    mac.launchctl("bootstrap", DOMAIN, str(mac.agent("lab.noshim", SLEEPER, RunAtLoad=True)))
    fields = mac.printed("lab.noshim")
    assert (fields["state"], fields["last exit code"]) == ("not running", "78: EX_CONFIG")


def test_a_log_directory_that_cannot_be_made_means_ex_config(mac: Mac):
    blocker = mac.root / "file"
    blocker.write_text("")
    plist = mac.agent("lab.nolog", SLEEPER, RunAtLoad=True,
                      StandardOutPath=str(blocker / "sub" / "out.log"))
    mac.launchctl("bootstrap", DOMAIN, str(plist))
    fields = mac.printed("lab.nolog")
    assert (fields["state"], fields["last exit code"]) == ("not running", "78: EX_CONFIG")


# -- Local Network privacy -------------------------------------------------------------------


def own_address() -> str | None:
    """A non-loopback address of this host's own interfaces, or None."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return None
    return next((a for a in out.split() if ":" not in a and not a.startswith("127.")), None)


PROBE = ("import json, socket, sys\n"
         "result = {}\n"
         "for host, port in json.loads(sys.argv[1]):\n"
         "    s = socket.socket()\n"
         "    s.settimeout(3)\n"
         "    try:\n"
         "        s.connect((host, port)); result[host] = 0\n"
         "    except OSError as e:\n"
         "        result[host] = e.errno\n"
         "    s.close()\n"
         "open(sys.argv[2], 'w').write(json.dumps(result))\n")


@pytest.fixture
def shim(tmp_path: Path) -> str:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) on this host to build localnet_deny.c")
    built = tmp_path / "localnet_deny.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(built),
                    str(MACOS / "localnet_deny.c"), "-ldl"], check=True)
    return str(built)


def test_local_network_switch(tmp_path: Path, shim: str):
    mac = Mac(tmp_path)
    mac.shim = shim
    mac.login()
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    lan = own_address()
    # Only loopback and this host's own address are ever connected to; 10.255.255.1 is
    # refused by the shim before anything is sent.
    targets = [("127.0.0.1", port), ("10.255.255.1", 9)] + ([(lan, port)] if lan else [])
    try:
        def probe(label: str) -> dict[str, int]:
            out = mac.root / f"{label}.json"
            spec = {"Label": label, "RunAtLoad": True,
                    "ProgramArguments": [PY, "-c", PROBE, json.dumps(targets), str(out)]}
            path = mac.root / f"{label}.plist"
            path.write_bytes(plistlib.dumps(spec))
            path.chmod(0o644)
            assert mac.launchctl("bootstrap", DOMAIN, str(path)).returncode == 0
            return json.loads(str(wait_until(lambda: out.exists() and out.read_text())))

        (mac.state / proto.LOCALNET_DENIED).touch()
        denied = probe("lab.denied")
        assert denied["127.0.0.1"] == 0
        assert denied["10.255.255.1"] == errno.EHOSTUNREACH
        if lan:
            assert denied[lan] == errno.EHOSTUNREACH
            # A process the launchd did not start (SSH) connects.
            socket.create_connection((lan, port), timeout=3).close()
            (mac.state / proto.LOCALNET_GRANTED).write_text(os.path.realpath(PY) + "\n")
            assert probe("lab.granted")[lan] == 0
        (mac.state / proto.LOCALNET_DENIED).unlink()
        (mac.state / proto.LOCALNET_GRANTED).unlink(missing_ok=True)
        assert probe("lab.allowed")["127.0.0.1"] == 0
        allowed = mac.launchctl("print", f"{DOMAIN}/lab.allowed").stdout
        assert "LD_PRELOAD" not in allowed
        assert f"LD_PRELOAD => {shim}" in mac.launchctl("print", f"{DOMAIN}/lab.denied").stdout
    finally:
        listener.close()
        mac.logout()


# -- the Python the lab node has -------------------------------------------------------------


@pytest.mark.skipif(PYTHON39 is None, reason="no Python 3.9 on this host")
def test_runs_under_python_39(tmp_path: Path):
    mac = Mac(tmp_path, python=str(PYTHON39))
    assert mac.launchctl("print", DOMAIN).returncode == 125
    mac.login()
    try:
        plist = mac.agent("lab.py39", SLEEPER, RunAtLoad=True, KeepAlive=True)
        assert mac.launchctl("bootstrap", DOMAIN, str(plist)).returncode == 0
        old = mac.pid("lab.py39")
        kicked = mac.launchctl("kickstart", "-k", "-p", f"{DOMAIN}/lab.py39")
        assert int(kicked.stdout) != old
        assert mac.launchctl("kill", "SIGTERM", f"{DOMAIN}/lab.py39").returncode == 0
        assert mac.launchctl("disable", f"{DOMAIN}/lab.py39").returncode == 0
        assert '"lab.py39" => disabled' in mac.launchctl("print-disabled", DOMAIN).stdout
        assert "lab.py39" in mac.launchctl("list").stdout
        assert mac.launchctl("bootout", f"{DOMAIN}/lab.py39").returncode == 0
        wait_until(lambda: mac.gone("lab.py39"), what="bootout")
    finally:
        mac.logout()
