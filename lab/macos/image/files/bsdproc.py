#!/usr/bin/python3.11
"""pgrep(1), pkill(1) and ps(1) of macOS: /usr/bin/pgrep, /usr/bin/pkill and /bin/ps are this
file, which tells them apart by its name.

pgrep and pkill are a copy of Apple's pkill.c (adv_cmds-237,
https://github.com/apple-oss-distributions/adv_cmds, pkill/pkill.c), reading the process
table from /proc instead of sysmon; each behaviour below is that file's:

- options by BSD getopt(3) only, pgrep "DF:G:ILP:U:ac:d:fg:ilnoqt:u:vx" (-c, and -I for
  pgrep, -d and -q for pkill fall to usage()); getopt stops at the first operand and has no
  long options: ``--count`` is the option ``-`` -> "pgrep: illegal option -- -" and usage;
- the pattern is an extended regular expression matched against the basename of argv[0]
  (comm when there is none), or against the arguments joined by spaces with -f;
- pgrep and its ancestors are never selected unless -a (the loop over ``ancestors``);
- output: pids joined by the -d delimiter (newline) and one final newline; -l adds comm, or
  the whole command line with -f; -q prints nothing;
- pkill's signal as its first argument: -NUMBER or -NAME (SIG optional, any case); -l
  prints "kill -SIGNUM PID" for each, "No matching processes belonging to you were found"
  when none was signalled;
- exit status 0 something matched, 1 nothing, 2 bad usage, 3 fatal error.

pgrep runs on Debian's Python, so its own process is python3.11 running this file: that is
the process "pgrep never selects", with its ancestors.

ps copies Apple's ps/ps.c of the same release in its default UNIX2003 mode: options by
getopt "aACcdeEfg:G:hjLlMmO:o:p:rSTt:U:u:vwx" (anything else: "ps: illegal option -- X" and
its usage, exit 1), the selection (-A/-e every process; -a other users' too; -x also those
without a terminal; -p, -u euid, -U ruid lists OR-ed; else the user's own with a terminal),
-o keywords with keyword.c's headers (``kw=`` renames, all empty: no header line), the
default format "pid tty time command=CMD", exit status 1 when no process was listed. PID 1
is shown as /sbin/launchd, the program macOS runs as PID 1 (launchd(8)): here systemd plays
that part, and Ansible's service_mgr fact asks `ps -p 1 -o comm` on a Mac. The options
the stand-in does not implement say so and exit 1.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import re
import signal
import sys
from dataclasses import dataclass, field

STATUS_MATCH, STATUS_NOMATCH, STATUS_BADUSAGE, STATUS_ERROR = 0, 1, 2, 3
MIN_PID, MAX_PID = 5, 99999
PGREP_OPTIONS = "DF:G:ILP:U:ac:d:fg:ilnoqt:u:vx"


class Exit(Exception):
    """The program's exit, as exit(3) and errx(3) end it."""

    def __init__(self, status: int, message: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Proc:
    pid: int
    ppid: int
    pgid: int
    tdev: int
    ruid: int
    euid: int
    rgid: int
    start: int
    comm: str
    argv: list[str] = field(default_factory=list)
    state: str = "?"


def read_proc(pid: int) -> Proc | None:
    """One process from /proc, or None when it has gone meanwhile."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
        with open(f"/proc/{pid}/status") as handle:
            status = dict(line.split(":", 1) for line in handle if ":" in line)
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    uids, gids = status["Uid"].split(), status["Gid"].split()
    argv = [part.decode(errors="replace") for part in cmdline.split(b"\0")[:-1]]
    return Proc(pid, int(fields[1]), int(fields[2]), int(fields[4]), int(uids[0]),
                int(uids[1]), int(gids[0]), int(fields[19]), comm, argv, fields[0])


def process_table() -> list[Proc]:
    pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    return [proc for proc in map(read_proc, pids) if proc is not None]


def getopt(prog: str, args: list[str], optstring: str) -> tuple[list[tuple[str, str]], list[str]]:
    """BSD getopt(3): options up to the first operand or "--"; errors as it prints them."""
    options: list[tuple[str, str]] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            index += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        position = 1
        while position < len(arg):
            letter = arg[position]
            spec = optstring.find(letter)
            if letter == ":" or spec < 0:
                # getopt returns '?' here, and pgrep stops at it with usage().
                print(f"{prog}: illegal option -- {letter}", file=sys.stderr)
                return [*options, ("?", "")], []
            if spec + 1 < len(optstring) and optstring[spec + 1] == ":":
                if position + 1 < len(arg):
                    value = arg[position + 1:]
                elif index + 1 < len(args):
                    index += 1
                    value = args[index]
                else:
                    print(f"{prog}: option requires an argument -- {letter}", file=sys.stderr)
                    return [*options, ("?", "")], []
                options.append((letter, value))
                break
            options.append((letter, ""))
            position += 1
        index += 1
    return options, args[index:]


def usage(pgrep: bool) -> Exit:
    prog = "pgrep" if pgrep else "pkill"
    ustr = "[-Lfilnoqvx] [-d delim]" if pgrep else "[-signal] [-ILfilnovx]"
    return Exit(STATUS_BADUSAGE,
                f"usage: {prog} {ustr} [-F pidfile] [-G gid]\n"
                "             [-P ppid] [-U uid] [-g pgrp] [-t tty] [-u euid]\n"
                "             pattern ...")


def tty_device(name: str, prog: str) -> int:
    """A -t operand as the device number /proc's tty_nr uses; -1 for "no terminal"."""
    if name == "-":
        return -1
    if name.isdigit():
        candidates = [f"/dev/pts/{name}"]
    else:
        name_ = "console" if name == "co" else name
        candidates = [f"/dev/{name_}", f"/dev/tty{name_}"]
    for path in candidates:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if not (st.st_mode & 0o020000):
            raise Exit(STATUS_BADUSAGE, f"{prog}: Not a tty: `{name}'")
        return st.st_rdev
    shown = candidates[0] if name.isdigit() else name
    raise Exit(STATUS_BADUSAGE, f"{prog}: No such tty: `{shown}'")


def make_list(kind: str, src: str, prog: str) -> list[int]:
    """makelist(): comma-separated numbers, or names of users, groups, terminals."""
    pgrep = prog == "pgrep"
    numbers = []
    for item in src.split(","):
        if not item:
            raise usage(pgrep)
        if kind == "tty":
            numbers.append(tty_device(item, prog))
            continue
        try:
            number = int(item, 0)
        except ValueError:
            number = None
        if number is not None:
            numbers.append(os.getpgrp() if kind == "pgrp" and number == 0 else number)
        elif kind == "user":
            try:
                numbers.append(pwd.getpwnam(item).pw_uid)
            except KeyError:
                raise Exit(STATUS_BADUSAGE, f"{prog}: Unknown user `{item}'") from None
        elif kind == "group":
            try:
                numbers.append(grp.getgrnam(item).gr_gid)
            except KeyError:
                raise Exit(STATUS_BADUSAGE, f"{prog}: Unknown group `{item}'") from None
        else:
            raise usage(pgrep)
    return numbers


def take_pid(prog: str, path: str, lock: bool) -> int:
    try:
        handle = open(path)  # noqa: SIM115 -- closed by the with below; the open's error first
    except OSError as exc:
        raise Exit(STATUS_ERROR, f"{prog}: Cannot open pidfile `{path}': {exc.strerror}") from None
    with handle:
        if lock:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                raise Exit(STATUS_ERROR, f"{prog}: File '{path}' can be locked")
        line = handle.readline()
    if not line:
        raise Exit(STATUS_ERROR, f"{prog}: Pidfile `{path}' is empty")
    match = re.match(r"\s*([+-]?\d+)(\s|$)", line)
    if not match or not MIN_PID <= int(match.group(1)) <= MAX_PID:
        raise Exit(STATUS_ERROR, f"{prog}: Invalid pid in file `{path}'")
    return int(match.group(1))


def signal_number(name: str) -> int | None:
    """pkill's -SIGNAL: a number, or a name with or without SIG, in any case."""
    if re.fullmatch(r"[+-]?\d+", name):
        return int(name)
    name = name.upper()
    name = name[3:] if name.startswith("SIG") else name
    value = getattr(signal.Signals, f"SIG{name}", None) if name else None
    return int(value) if value is not None else None


def run(prog: str, args: list[str]) -> int:
    pgrep = prog == "pgrep"
    signum = int(signal.SIGTERM)
    if not pgrep and args and args[0].startswith("-"):
        number = signal_number(args[0][1:])
        if number is not None:
            signum, args = number, args[1:]
    options, patterns = getopt(prog, args, PGREP_OPTIONS)
    lists: dict[str, list[int]] = {}
    kinds = {"G": "group", "P": "pid", "U": "user", "g": "pgrp", "t": "tty", "u": "user"}
    flags: set[str] = set()
    delim, pidfile, criteria = "\n", None, bool(patterns)
    for letter, value in options:
        if letter == "?" or letter == "c" or (letter == "I" and pgrep) \
                or (letter in "dq" and not pgrep):
            raise usage(pgrep)
        if letter in kinds:
            lists[letter] = lists.get(letter, []) + make_list(kinds[letter], value, prog)
            criteria = True
        elif letter == "F":
            pidfile, criteria = value, True
        elif letter == "d":
            delim = value
        else:
            flags.add(letter)
            criteria = criteria or letter in "no"
    if not criteria:
        raise usage(pgrep)
    if {"n", "o"} <= flags:
        raise Exit(STATUS_ERROR, f"{prog}: Options -n and -o are mutually exclusive")
    if pidfile is None and "L" in flags:
        raise Exit(STATUS_ERROR, f"{prog}: Option -L doesn't make sense without -F")
    from_file = take_pid(prog, pidfile, "L" in flags) if pidfile is not None else None
    mypid = os.getpid()
    table = [proc for proc in process_table() if proc.pid != mypid]
    selected = {proc.pid: False for proc in table}
    for pattern in patterns:
        try:
            regex = re.compile(pattern, re.IGNORECASE if "i" in flags else 0)
        except re.error as exc:
            raise Exit(STATUS_BADUSAGE, f"{prog}: Cannot compile regular expression "
                       f"`{pattern}' ({exc})") from None
        for proc in table:
            if "f" in flags and proc.argv:
                subject = " ".join(proc.argv)
            else:
                subject = os.path.basename(proc.argv[0]) if proc.argv else ""
                subject = subject or proc.comm
            found = regex.search(subject)
            if found and ("x" not in flags or (found.start() == 0
                                               and found.end() == len(subject))):
                selected[proc.pid] = True
    attributes = {"U": "ruid", "G": "rgid", "u": "euid", "P": "ppid", "g": "pgid",
                  "t": "tdev"}
    for proc in table:
        if from_file is not None and proc.pid != from_file:
            selected[proc.pid] = False
            continue
        wanted = [value for letter, value in lists.items()
                  if getattr(proc, attributes[letter]) not in value
                  and not (letter == "t" and -1 in value and proc.tdev == 0)]
        if wanted:
            selected[proc.pid] = False
            continue
        if not patterns:
            selected[proc.pid] = True
    if "a" not in flags:
        by_pid = {proc.pid: proc for proc in table}
        pid = os.getppid()
        while pid in by_pid:
            selected[pid] = False
            pid = by_pid[pid].ppid
    if flags & {"n", "o"}:
        chosen = [proc for proc in table if selected[proc.pid]]
        best = (max if "n" in flags else min)(chosen, key=lambda p: p.start, default=None)
        selected = {proc.pid: best is not None and proc.pid == best.pid for proc in table}
    return act(prog, table, selected, flags, delim, signum)


def act(prog: str, table: list[Proc], selected: dict[int, bool], flags: set[str], delim: str,
        signum: int) -> int:
    pgrep = prog == "pgrep"
    matched, shown, did_action = False, [], False
    for proc in table:
        if selected[proc.pid]:
            if "l" in flags and not pgrep:
                did_action = True
                print(f"kill -{signum} {proc.pid}")
            if "v" in flags:
                continue
        elif "v" not in flags:
            continue
        if pgrep:
            matched = True
            if "q" not in flags:
                if "l" in flags and "f" in flags and proc.argv:
                    shown.append(f"{proc.pid} {' '.join(proc.argv)}")
                elif "l" in flags:
                    shown.append(f"{proc.pid} {proc.comm}")
                else:
                    shown.append(str(proc.pid))
            continue
        try:
            os.kill(proc.pid, signum)
        except ProcessLookupError:
            continue
        except OSError as exc:
            print(f"{prog}: signalling pid {proc.pid}: {exc.strerror}", file=sys.stderr)
            continue
        matched = True
    if shown:
        sys.stdout.write(delim.join(shown) + "\n")
    if not did_action and not pgrep and "l" in flags:
        print("No matching processes belonging to you were found", file=sys.stderr)
    return STATUS_MATCH if matched else STATUS_NOMATCH


PS_OPTIONS = "aACcdeEfg:G:hjLlMmO:o:p:rSTt:U:u:vwx"
PS_USAGE = ("usage: ps [-AaCcEefhjlMmrSTvwXx] [-O fmt | -o fmt] [-G gid[,gid...]]\n"
            "          [-g grp[,grp...]] [-u [uid,uid...]]\n"
            "          [-p pid[,pid...]] [-t tty[,tty...]] [-U user[,user...]]\n"
            "       ps [-L]")
# keyword.c: keyword -> header; right-aligned (numbers) unless listed in PS_LEFT.
PS_HEADERS = {"pid": "PID", "ppid": "PPID", "pgid": "PGID", "uid": "UID", "ruid": "RUID",
              "user": "USER", "ruser": "RUSER", "comm": "COMM", "command": "COMMAND",
              "args": "ARGS", "ucomm": "UCOMM", "state": "STAT", "stat": "STAT",
              "etime": "ELAPSED", "time": "TIME", "tty": "TTY", "tt": "TT"}
PS_LEFT = {"user", "ruser", "comm", "command", "args", "ucomm", "state", "stat", "tty", "tt"}
LAUNCHD = "/sbin/launchd"


def ps_columns(spec: str) -> list[tuple[str, str]]:
    """parsefmt(): keywords split by commas or blanks; ``kw=header`` takes the rest."""
    columns = []
    while spec:
        spec = spec.lstrip(", \t")
        if not spec:
            break
        word = re.match(r"[^,\s=]+", spec)
        keyword = word.group(0) if word else ""
        spec = spec[len(keyword):]
        if keyword not in PS_HEADERS:
            raise Exit(1, f"ps: {keyword}: keyword not found\nps: no valid keywords; valid "
                       f"keywords:\n{' '.join(sorted(PS_HEADERS))}")
        header = PS_HEADERS[keyword]
        if spec.startswith("="):
            header, spec = spec[1:], ""
        columns.append((keyword, header))
    return columns


def ps_value(proc: Proc, keyword: str) -> str:
    if keyword in ("comm", "ucomm"):
        if proc.pid == 1:
            return LAUNCHD if keyword == "comm" else os.path.basename(LAUNCHD)
        if keyword == "ucomm":
            return proc.comm
        try:
            return os.readlink(f"/proc/{proc.pid}/exe")
        except OSError:
            return proc.argv[0] if proc.argv else proc.comm
    if keyword in ("command", "args"):
        if proc.pid == 1:
            return LAUNCHD
        return " ".join(proc.argv) if proc.argv else f"({proc.comm})"
    if keyword in ("user", "ruser", "uid", "ruid"):
        uid = proc.euid if keyword in ("user", "uid") else proc.ruid
        if keyword in ("uid", "ruid"):
            return str(uid)
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)
    if keyword in ("tty", "tt"):
        return "??" if proc.tdev == 0 else f"ttys{os.minor(proc.tdev):03d}"
    if keyword in ("state", "stat"):
        return proc.state
    if keyword in ("etime", "time"):
        ticks = os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        seconds = int(uptime - proc.start / ticks) if keyword == "etime" else 0
        minutes, seconds = divmod(seconds, 60)
        return f"{minutes:02d}:{seconds:02d}" if keyword == "etime" else "0:00.00"
    return str(getattr(proc, {"pid": "pid", "ppid": "ppid", "pgid": "pgid"}[keyword]))


def ps(args: list[str]) -> int:
    options, operands = getopt("ps", args, PS_OPTIONS)
    columns: list[tuple[str, str]] = []
    pids: list[int] = []
    euids: list[int] = []
    ruids: list[int] = []
    every = other_users = False
    keep_detached: bool | None = None
    implied = False
    for letter, value in options:
        if letter == "?":
            raise Exit(1, PS_USAGE)
        if letter in "Ae":
            every, keep_detached = True, True
        elif letter == "a":
            other_users = True
        elif letter == "x":
            keep_detached = True
        elif letter == "o":
            columns += ps_columns(value)
        elif letter == "p":
            pids += make_list("pid", value.replace(" ", ","), "ps")
        elif letter == "u":
            euids += make_list("user", value.replace(" ", ","), "ps")
            implied = True
        elif letter == "U":
            ruids += make_list("user", value.replace(" ", ","), "ps")
            implied = True
        elif letter != "w":
            raise Exit(1, f"ps: -{letter}: not implemented by the lab's ps stand-in")
    if operands:
        raise Exit(1, PS_USAGE)
    if keep_detached is None:
        keep_detached = implied
    if not (every or other_users or pids or euids or ruids):
        euids = [os.getuid()]
    columns = columns or ps_columns("pid tty time command=CMD")
    rows = []
    for proc in process_table():
        keep = proc.pid in pids
        if not keep and (keep_detached or proc.tdev != 0):
            keep = every or other_users or proc.euid in euids or proc.ruid in ruids
        if keep:
            rows.append([ps_value(proc, keyword) for keyword, _ in columns])
    print_ps(columns, rows)
    return 0 if rows else 1


def print_ps(columns: list[tuple[str, str]], rows: list[list[str]]) -> None:
    headers = [header for _, header in columns]
    lines = ([headers] if any(headers) else []) + rows
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    for line in lines:
        cells = [line[i].ljust(widths[i]) if columns[i][0] in PS_LEFT
                 else line[i].rjust(widths[i]) for i in range(len(columns))]
        print(" ".join(cells).rstrip())


def main() -> int:
    prog = os.path.basename(sys.argv[0])
    try:
        if prog == "ps":
            return ps(sys.argv[1:])
        return run(prog if prog == "pkill" else "pgrep", sys.argv[1:])
    except Exit as stop:
        if stop.message:
            print(stop.message, file=sys.stderr)
        return stop.status


if __name__ == "__main__":
    sys.exit(main())
