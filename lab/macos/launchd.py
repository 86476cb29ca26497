#!/usr/bin/env python3
"""The lab Mac's launchd: one user's GUI session (the domain gui/<uid>), as macOS runs it.

Run as the user whose session it is, for as long as that user is "logged in":

    python3 lab/macos/launchd.py --socket /run/lab-launchd/gui-501.sock \\
        --state-dir /var/db/lab-launchd [--home /Users/admin] [--localnet-shim deny.so]

At start it does what macOS does at login: it bootstraps every plist in
~/Library/LaunchAgents whose label is not disabled. On SIGTERM (logout) it stops every job
as `bootout` does and exits. `lab/macos/launchctl` talks to it over the socket. Each
behaviour is copied from macOS; README.md beside this file lists them with their sources.
This is a stand-in for the lab, not launchd: standard library only, Python 3.9+.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import plistlib
import pwd
import signal
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import launchd_protocol as proto
from launchd_protocol import Reply, Request

# sysexits.h EX_CONFIG: launchd's "last exit code" for a job it could not spawn (a program
# that cannot be executed, a log it cannot open): https://stackoverflow.com/questions/
# 34215527 (status 78 from a bad shebang or an unwritable log directory),
# https://github.com/LrGenius/LrGeniusAI/pull/298 (`last exit code = 78: EX_CONFIG`).
EX_CONFIG = 78
NEVER_EXITED = "(never exited)"
# launchd's own umask, which a job keeps when its plist sets no Umask.
DEFAULT_UMASK = 0o022
RICHER = "Try re-running the command as root for richer errors.\n"


class Refused(Exception):
    """A bootstrap launchd refuses; non-root launchctl reports every such refusal as 5."""


class Job:
    """One loaded service: its plist and what launchd knows of its process."""

    def __init__(self, label: str, path: str, spec: dict[str, Any]) -> None:
        self.label = label
        self.path = path
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.state = "not running"
        self.runs = 0
        self.last_exit: int | str = NEVER_EXITED
        self.last_signal = 0
        self.started = 0.0
        # The environment of the last spawn; print shows it (the lab's switches included).
        self.env: dict[str, str] = {}
        self.booting_out = False
        # Bumped at every spawn and bootout, so a timer armed for an older run does nothing.
        self.generation = 0

    @property
    def arguments(self) -> list[str]:
        return [str(a) for a in self.spec.get("ProgramArguments") or [self.spec["Program"]]]

    @property
    def program(self) -> str:
        return str(self.spec.get("Program") or self.arguments[0])

    @property
    def throttle(self) -> int:
        return int(self.spec.get("ThrottleInterval", proto.DEFAULT_THROTTLE_INTERVAL))

    @property
    def exit_timeout(self) -> int:
        return int(self.spec.get("ExitTimeOut", proto.DEFAULT_EXIT_TIMEOUT))

    def keeps_alive(self, status: int) -> bool:
        """Whether launchd restarts the job after it exited with ``status`` (launchd.plist(5)
        KeepAlive: true restarts always; a dict's SuccessfulExit restarts only after a
        clean (true) or an unclean (false) exit)."""
        keep = self.spec.get("KeepAlive", False)
        if isinstance(keep, dict):
            if "SuccessfulExit" not in keep:
                return False
            return bool(keep["SuccessfulExit"]) == (status == 0)
        return bool(keep)


def read_plist(path: str, uid: int) -> dict[str, Any]:
    """The job description at ``path``, refused as launchd refuses it."""
    try:
        info = os.stat(path)
        with open(path, "rb") as handle:
            spec = plistlib.load(handle)
    except (OSError, plistlib.InvalidFileException, ValueError) as error:
        raise Refused(f"{path}: {error}") from None
    # launchd-842 support/launchctl.c: "Dubious permissions on file (skipping)" when group
    # or others may write it, "Dubious ownership" when neither root nor the caller owns it.
    if info.st_mode & 0o022 or info.st_uid not in (0, uid):
        raise Refused(f"{path}: dubious ownership or permissions")
    if not isinstance(spec, dict) or not isinstance(spec.get("Label"), str):
        raise Refused(f"{path}: no Label")
    if not (spec.get("ProgramArguments") or spec.get("Program")):
        raise Refused(f"{path}: neither Program nor ProgramArguments")
    return spec


def send(proc: subprocess.Popen[bytes], number: int) -> None:
    """Signal a job's process; one that has just been reaped is left alone."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(number)


def signal_words(number: int) -> str:
    """`Killed: 9`, as launchctl print words a terminating signal (strsignal and number)."""
    return f"{signal.strsignal(number)}: {number}"


class Session:
    """The domain gui/<uid>: its jobs, its disabled database, its switches."""

    def __init__(self, uid: int, home: str, state_dir: Path, shim: str, tmpdir: str) -> None:
        self.uid = uid
        self.home = home
        self.state_dir = state_dir
        self.shim = shim
        self.tmpdir = tmpdir
        self.jobs: dict[str, Job] = {}
        # One lock for all state; reapers and timers notify through it.
        self.cond = threading.Condition()
        self.disabled_path = state_dir / proto.disabled_db_name(uid)

    # -- the disabled database ------------------------------------------------------------

    def disabled_db(self) -> dict[str, bool]:
        """label -> disabled, as /private/var/db/com.apple.xpc.launchd/disabled.<uid>.plist."""
        try:
            with open(self.disabled_path, "rb") as handle:
                return {str(k): bool(v) for k, v in plistlib.load(handle).items()}
        except FileNotFoundError:
            return {}

    def is_disabled(self, label: str, spec: dict[str, Any]) -> bool:
        # The database overrides the plist's own Disabled key (launchctl(1), enable/disable).
        return self.disabled_db().get(label, bool(spec.get("Disabled", False)))

    def set_disabled(self, label: str, disabled: bool) -> None:
        db = self.disabled_db()
        db[label] = disabled
        temporary = self.disabled_path.with_suffix(".tmp")
        temporary.write_bytes(plistlib.dumps(db, fmt=plistlib.FMT_XML))
        temporary.chmod(0o644)  # the daemon runs with umask 0
        temporary.replace(self.disabled_path)

    # -- spawning -------------------------------------------------------------------------

    def environment(self, job: Job) -> dict[str, str]:
        """launchd's minimal environment for an agent, then the plist's variables.

        launchd-842 src/core.c job_postfork_become_user: TMPDIR, SHELL, HOME, USER, LOGNAME;
        PATH is launchd's own _PATH_STDPATH; job_setup_attributes then sets each
        EnvironmentVariables entry over them. XPC_SERVICE_NAME is the label on current macOS
        (`environment = { XPC_SERVICE_NAME => <label> }` in launchctl print).
        """
        entry = pwd.getpwuid(self.uid)
        env = {"PATH": proto.STD_PATH, "HOME": self.home, "USER": entry.pw_name,
               "LOGNAME": entry.pw_name, "SHELL": entry.pw_shell, "TMPDIR": self.tmpdir,
               "XPC_SERVICE_NAME": job.label, "XPC_FLAGS": "0x0"}
        env.update({str(k): str(v) for k, v in job.spec.get("EnvironmentVariables", {}).items()})
        if (self.state_dir / proto.LOCALNET_DENIED).exists():
            # macOS 15 Local Network privacy, as an LD_PRELOAD shim (localnet_deny.c).
            env["LD_PRELOAD"] = self.shim
            env[proto.LOCALNET_GRANTED_ENV] = str(self.state_dir / proto.LOCALNET_GRANTED)
        return env

    def spawn(self, job: Job) -> None:
        """Start ``job`` as launchd does; a spawn that fails leaves 78: EX_CONFIG."""
        job.generation += 1
        job.runs += 1
        job.started = time.monotonic()
        spec = job.spec
        umask = int(spec.get("Umask", DEFAULT_UMASK))
        workdir = str(spec.get("WorkingDirectory", ""))
        outputs: list[int] = []
        job.env = self.environment(job)
        try:
            if "LD_PRELOAD" in job.env and not os.path.isfile(job.env["LD_PRELOAD"]):
                # Without its shim the switch would deny nothing: refuse the job instead.
                print(f"lab launchd: {proto.LOCALNET_DENIED} is set but the shim "
                      f"{job.env['LD_PRELOAD']!r} does not exist", file=sys.stderr)
                raise FileNotFoundError(job.env["LD_PRELOAD"])
            for key in ("StandardOutPath", "StandardErrorPath"):
                outputs.append(open_log(spec.get(key), umask))
            job.proc = subprocess.Popen(
                job.arguments, executable=job.program, env=job.env,
                # launchd-842 core.c: a missing WorkingDirectory is logged and the job runs
                # where launchd is, "/".
                cwd=workdir if os.path.isdir(workdir) else "/",
                stdin=subprocess.DEVNULL, stdout=outputs[0], stderr=outputs[1],
                # launchd-842 core.c job_setup_attributes: umask(Umask) when the key is set;
                # setsid() when launchd (pid 1 on macOS) is the parent: a session and
                # process group of the job's own.
                umask=umask, start_new_session=True, close_fds=True)
        except OSError:
            self.spawn_failed(job)
            return
        finally:
            for handle in outputs:
                if handle >= 0:
                    os.close(handle)
        job.state = "running"
        threading.Thread(target=self.reap, args=(job, job.proc), daemon=True).start()

    def spawn_failed(self, job: Job) -> None:
        job.proc = None
        job.state = "not running"
        job.last_exit, job.last_signal = f"{EX_CONFIG}: EX_CONFIG", 0
        if job.keeps_alive(EX_CONFIG):
            self.schedule_restart(job)

    def reap(self, job: Job, proc: subprocess.Popen[bytes]) -> None:
        status = proc.wait()
        with self.cond:
            if status < 0:
                job.last_signal = -status
            else:
                job.last_exit, job.last_signal = status, 0
            job.proc = None
            job.state = "not running"
            if job.booting_out:
                # The label is released only now that its process is gone.
                self.jobs.pop(job.label, None)
            elif job.keeps_alive(status):
                self.schedule_restart(job)
            self.cond.notify_all()

    def schedule_restart(self, job: Job) -> None:
        """KeepAlive's restart, throttled: no sooner than ThrottleInterval after the last
        start (launchd-842 core.c job_start: "Throttling respawn: Will start in %ld
        seconds" when the job ran less than min_run_time)."""
        delay = max(0.0, job.started + job.throttle - time.monotonic())
        job.state = "spawn scheduled"
        generation = job.generation
        self.after(delay, lambda: self.throttled_start(job, generation))

    def throttled_start(self, job: Job, generation: int) -> None:
        with self.cond:
            if self.jobs.get(job.label) is job and job.generation == generation \
                    and job.proc is None and not job.booting_out:
                self.spawn(job)
                self.cond.notify_all()

    def after(self, delay: float, action: Any) -> None:
        timer = threading.Timer(delay, action)
        timer.daemon = True
        timer.start()

    # -- stopping -------------------------------------------------------------------------

    def stop(self, job: Job) -> None:
        """SIGTERM now, SIGKILL after ExitTimeOut (0: never), as launchd-842 core.c
        job_stop arms exit_timeout; the label stays until the process is gone."""
        job.booting_out = True
        job.generation += 1
        if job.proc is None:
            self.jobs.pop(job.label, None)
            return
        # `state = SIGTERMed` until the process exits, bootstrap refused meanwhile (macOS
        # 26.5.2: https://github.com/kxn/codex-remote-feishu/issues/914).
        job.state = "SIGTERMed"
        send(job.proc, signal.SIGTERM)
        if job.exit_timeout:
            proc = job.proc
            self.after(job.exit_timeout, lambda: self.kill_late(proc))

    def kill_late(self, proc: subprocess.Popen[bytes]) -> None:
        with self.cond:
            send(proc, signal.SIGKILL)

    def logout(self) -> None:
        """Every job stopped as bootout stops it; returns once every process is gone."""
        with self.cond:
            for job in list(self.jobs.values()):
                if not job.booting_out:
                    self.stop(job)
            self.cond.wait_for(lambda: not self.jobs)

    # -- launchctl's subcommands ----------------------------------------------------------

    def handle(self, request: Request) -> Reply:
        with self.cond:
            return getattr(self, "do_" + request.sub.replace("-", "_"))(request)

    def bootstrap_path(self, path: str) -> None:
        spec = read_plist(path, self.uid)
        label = spec["Label"]
        # A label still loaded, or still exiting after a bootout, cannot be bootstrapped;
        # nor can a disabled one. Non-root launchctl says 5 for both:
        # https://github.com/Layr-Labs/d-inference/issues/1102 (37 inside, 5 printed),
        # https://github.com/openclaw/openclaw/pull/849 (a disabled label).
        if label in self.jobs or self.is_disabled(label, spec):
            raise Refused(label)
        job = Job(label, os.path.abspath(path), spec)
        self.jobs[label] = job
        if spec.get("RunAtLoad") or starts_at_load(spec.get("KeepAlive", False)):
            self.spawn(job)

    def do_bootstrap(self, request: Request) -> Reply:
        for path in request.paths:
            try:
                self.bootstrap_path(path)
            except Refused:
                return Reply(proto.EIO, err=proto.failed("Bootstrap", proto.EIO) + RICHER)
        return Reply()

    def do_bootout(self, request: Request) -> Reply:
        labels = [request.label] if request.label else []
        for path in request.paths:
            try:
                labels.append(read_plist(path, self.uid)["Label"])
            except Refused:
                return Reply(proto.EIO, err=proto.failed("Boot-out", proto.EIO))
        for label in labels:
            job = self.jobs.get(label)
            if job is None:
                # By label: 3 (https://github.com/DeterminateSystems/nix-installer/issues/1148
                # "Boot-out failed: 3: No such process"); by path: 5 (same report).
                code = proto.EIO if request.paths else proto.ESRCH
                return Reply(code, err=proto.failed("Boot-out", code))
            if job.booting_out:
                # https://github.com/osquery/osquery/issues/5698: "Boot-out failed: 36:
                # Operation now in progress" while the job is still going.
                return Reply(proto.EINPROGRESS, err=proto.failed("Boot-out", proto.EINPROGRESS))
            self.stop(job)
        return Reply()

    def do_kickstart(self, request: Request) -> Reply:
        job = self.jobs.get(request.label)
        if job is None:
            return Reply(proto.ENOSERVICE, err=proto.no_such_service(request.label, self.uid))
        if job.booting_out:
            # Procursus kickstart.c prints nothing for EALREADY.
            return Reply(proto.EALREADY)
        if job.proc is not None and request.kill:
            # -k kills with SIGKILL, not SIGTERM: a running job's SIGTERM handler never runs
            # (https://github.com/kirodotdev/KiroCrew/issues/1562: LastExitStatus 9).
            old = job.proc
            job.generation += 1
            send(old, signal.SIGKILL)
            self.cond.wait_for(lambda: job.proc is not old)
        if job.proc is None:
            # kickstart starts now, bypassing the throttle (launchctl(1) kickstart; the
            # throttled restart timer of the older generation then does nothing).
            self.spawn(job)
        pid = job.proc.pid if job.proc is not None else 0
        return Reply(out=f"{pid}\n" if request.print_pid and pid else "")

    def do_kill(self, request: Request) -> Reply:
        job = self.jobs.get(request.label)
        if job is None:
            return Reply(proto.ENOSERVICE, err=proto.no_such_service(request.label, self.uid))
        if job.proc is None:
            return Reply(proto.ESRCH, err="No process to signal.\n")  # Procursus kill.c
        send(job.proc, request.signal)
        return Reply()

    def do_enable(self, request: Request) -> Reply:
        self.set_disabled(request.label, False)
        return Reply()

    def do_disable(self, request: Request) -> Reply:
        self.set_disabled(request.label, True)
        return Reply()

    def do_print_disabled(self, request: Request) -> Reply:
        lines = [f'\t"{label}" => {"disabled" if off else "enabled"}'
                 for label, off in sorted(self.disabled_db().items())]
        return Reply(out="disabled services = {\n" + "".join(f"{x}\n" for x in lines) + "}\n")

    def do_list(self, request: Request) -> Reply:
        if request.label:
            return self.list_one(request.label)
        rows = ["PID\tStatus\tLabel"]
        for job in sorted(self.jobs.values(), key=lambda j: j.label):
            # launchctl(1) list: the PID if running, the last exit status, negative for the
            # signal that killed it.
            pid = str(job.proc.pid) if job.proc else "-"
            rows.append(f"{pid}\t{last_status(job)}\t{job.label}")
        return Reply(out="".join(f"{row}\n" for row in rows))

    def list_one(self, label: str) -> Reply:
        """`launchctl list <label>`: the job as an old-style property list, as a Mac prints it
        (https://github.com/Homebrew/homebrew-services/issues/601); an unknown label is 113
        "... in domain for port" (https://github.com/iamkroot/trakt-scrobbler/issues/83)."""
        job = self.jobs.get(label)
        if job is None:
            return Reply(proto.ENOSERVICE,
                         err=f'Could not find service "{label}" in domain for port\n')
        lines = [f'\t"Label" = "{label}";', f'\t"LastExitStatus" = {last_status(job)};']
        if job.proc:
            lines.append(f'\t"PID" = {job.proc.pid};')
        lines += [f'\t"Program" = "{job.program}";', '\t"ProgramArguments" = (',
                  *(f'\t\t"{a}";' for a in job.arguments), "\t);"]
        return Reply(out="{\n" + "".join(f"{x}\n" for x in lines) + "};\n")

    def do_print(self, request: Request) -> Reply:
        if not request.label:
            return Reply(out=self.print_domain())
        job = self.jobs.get(request.label)
        if job is None:
            return Reply(proto.ENOSERVICE,
                         err="Bad request.\n" + proto.no_such_service(request.label, self.uid))
        return Reply(out=self.print_job(job))

    def print_job(self, job: Job) -> str:
        """launchctl print gui/<uid>/<label>, in the order and words of macOS's output."""
        spec, env = job.spec, job.env or self.environment(job)
        lines = [f"gui/{self.uid}/{job.label} = {{",
                 f"\tactive count = {1 if job.proc else 0}",
                 f"\tpath = {job.path}", "\ttype = LaunchAgent", f"\tstate = {job.state}", "",
                 f"\tprogram = {job.program}", "\targuments = {",
                 *(f"\t\t{a}" for a in job.arguments), "\t}", ""]
        if spec.get("WorkingDirectory"):
            lines += [f"\tworking directory = {spec['WorkingDirectory']}", ""]
        for key, name in (("StandardOutPath", "stdout"), ("StandardErrorPath", "stderr")):
            if spec.get(key):
                lines.append(f"\t{name} path = {spec[key]}")
        lines += ["\tenvironment = {", *(f"\t\t{k} => {v}" for k, v in sorted(env.items())),
                  "\t}", "", f"\tdomain = gui/{self.uid}",
                  f"\tminimum runtime = {job.throttle}", f"\texit timeout = {job.exit_timeout}",
                  f"\truns = {job.runs}"]
        if job.proc:
            lines.append(f"\tpid = {job.proc.pid}")
        # A terminating signal replaces the exit code line.
        if job.last_signal:
            lines.append(f"\tlast terminating signal = {signal_words(job.last_signal)}")
        else:
            lines.append(f"\tlast exit code = {job.last_exit}")
        return "\n".join([*lines, "}"]) + "\n"

    def print_domain(self) -> str:
        """launchctl print gui/<uid>: the domain, its services and its disabled ones."""
        jobs = sorted(self.jobs.values(), key=lambda j: j.label)
        running = sum(1 for j in jobs if j.proc)
        lines = [f"gui/{self.uid} = {{", "\ttype = login", f"\thandle = {self.uid}",
                 f"\tactive count = {running}", f"\tservice count = {len(jobs)}",
                 f"\tactive service count = {running}", "", "\tservices = {"]
        lines += [f"\t\t{j.proc.pid if j.proc else 0:>8} {last_status(j, '-'):>6} \t{j.label}"
                  for j in jobs]
        lines += ["\t}", "", "\tdisabled services = {"]
        lines += [f'\t\t"{label}" => {"disabled" if off else "enabled"}'
                  for label, off in sorted(self.disabled_db().items())]
        return "\n".join([*lines, "\t}", "}"]) + "\n"

    # -- login ----------------------------------------------------------------------------

    def login(self) -> None:
        """What macOS does at login: bootstrap each agent in ~/Library/LaunchAgents whose
        label is not disabled; one that fails does not stop the others."""
        agents = Path(self.home, "Library", "LaunchAgents")
        with self.cond:
            for path in sorted(agents.glob("*.plist")) if agents.is_dir() else []:
                try:
                    self.bootstrap_path(str(path))
                except Refused:
                    continue


def starts_at_load(keep: Any) -> bool:
    """Whether KeepAlive alone starts the job at bootstrap, as RunAtLoad does.

    launchd.plist(5): KeepAlive true keeps the job "continuously running"; SuccessfulExit
    "implies that RunAtLoad is set to true, since the job needs to run at least once before
    we can get an exit status".
    """
    return keep is True or (isinstance(keep, dict) and "SuccessfulExit" in keep)


def last_status(job: Job, never: str = "0") -> str:
    """The status column of list and print: exit code, or minus the signal."""
    if job.last_signal:
        return f"-{job.last_signal}"
    if job.last_exit == NEVER_EXITED:
        return never
    return str(job.last_exit).split(":")[0]


def open_log(path: Any, umask: int) -> int:
    """StandardOutPath/StandardErrorPath as launchd opens them: O_WRONLY|O_CREAT|O_APPEND,
    mode 0666 less the job's umask (launchd-842 core.c job_setup_fd), /dev/null when unset.

    A missing directory is created when the user may create it; when not, the job never
    runs and its last exit code is 78: EX_CONFIG
    (https://github.com/LrGenius/LrGeniusAI/pull/298, measured with throwaway agents).
    """
    if not path:
        return subprocess.DEVNULL
    os.makedirs(os.path.dirname(str(path)) or "/", mode=0o777 & ~umask, exist_ok=True)
    return os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOCTTY,
                   0o666 & ~umask)


class Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        session: Session = self.server.session  # type: ignore[attr-defined]
        request = Request.from_wire(self.rfile.readline())
        self.wfile.write(proto.reply_to_wire(session.handle(request)))


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--home", default=None)
    parser.add_argument("--localnet-shim", default="")
    parser.add_argument("--tmpdir", default=None,
                        help="the agents' TMPDIR (macOS: the user's /var/folders/.../T/); "
                             "default STATE_DIR/T-<uid>")
    args = parser.parse_args(argv)
    uid = os.getuid()
    home = args.home or pwd.getpwuid(uid).pw_dir
    args.state_dir.mkdir(parents=True, exist_ok=True)
    tmpdir = args.tmpdir or str(args.state_dir / f"T-{uid}")
    os.makedirs(tmpdir, mode=0o700, exist_ok=True)
    # Jobs get their own umask at spawn; log files are created with 0666 less that umask.
    os.umask(0)
    session = Session(uid, home, args.state_dir, args.localnet_shim, tmpdir)
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    server = Server(args.socket, Handler)
    os.chmod(args.socket, 0o600)
    server.session = session  # type: ignore[attr-defined]
    logged_out = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: logged_out.set())
    signal.signal(signal.SIGINT, lambda *_: logged_out.set())
    session.login()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    while not logged_out.wait(1):
        continue
    # No new commands once the user is logging out; the socket goes with the session.
    server.shutdown()
    os.unlink(args.socket)
    session.logout()
    return 0


if __name__ == "__main__":
    sys.exit(main())
