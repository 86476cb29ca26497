"""What the lab's launchctl and launchd share: targets, requests, launchctl's words, the wire.

The lab's Mac-shaped node runs `launchd.py` (a per-user GUI session) and the `launchctl`
client. Both import this module, so each message launchctl prints and each exit code it
returns is written once, here, next to the macOS source it copies. Standard library only,
Python 3.9 and later (the lab node's /usr/bin/python3 is 3.9, as a Mac's is).

Sources cited below:
- Apple's launchctl(1): https://keith.github.io/xcode-man-pages/launchctl.1.html
- Procursus launchctl, an open re-implementation of Apple's client that prints Apple's
  messages: https://github.com/ProcursusTeam/launchctl (launchctl.c, bootstrap.c, kill.c,
  enable.c, kickstart.c, print.c, list.c)
- Reports from real Macs, cited where each message is used.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from dataclasses import asdict, dataclass, field

# The client finds the session of user <uid> at DIR/gui-<uid>.sock; tests point DIR elsewhere.
SOCKET_DIR = "/run/lab-launchd"
SOCKET_DIR_ENV = "LAB_LAUNCHD_SOCKET_DIR"

# Under the daemon's --state-dir: the lab's Local Network switch (exists: jobs started from
# then on are denied), the grants (resolved executables, one a line; localnet_deny.c reads
# the file named by LOCALNET_GRANTED_ENV), and the disabled database.
LOCALNET_DENIED = "localnet-denied"
LOCALNET_GRANTED = "localnet-granted"
LOCALNET_GRANTED_ENV = "LAB_LOCALNET_GRANTED"


def disabled_db_name(uid: int) -> str:
    """macOS keeps it as /private/var/db/com.apple.xpc.launchd/disabled.<uid>.plist."""
    return f"disabled.{uid}.plist"


# errno values and launchd's own error codes as macOS numbers and words them. The XPC
# codes 112/113/125 are launchd's (Procursus launchctl.h: ENODOMAIN 112, ENOSERVICE 113;
# 125 "Domain does not support specified action" is quoted from real Macs below).
ESRCH = 3
EIO = 5
EINPROGRESS = 36
EALREADY = 37
EX_USAGE = 64
ENODOMAIN = 112
ENOSERVICE = 113
ENOTSUPPORTED_DOMAIN = 125
STRERROR = {
    ESRCH: "No such process",
    EIO: "Input/output error",
    EINPROGRESS: "Operation now in progress",
    EALREADY: "Operation already in progress",
    ENODOMAIN: "Could not find specified domain",
    ENOSERVICE: "Could not find specified service",
    ENOTSUPPORTED_DOMAIN: "Domain does not support specified action",
}

# launchd's defaults (launchd.plist(5) and launchd-842 src/core.c:
# LAUNCHD_MIN_JOB_RUN_TIME 10, LAUNCHD_DEFAULT_EXIT_TIMEOUT 20).
DEFAULT_THROTTLE_INTERVAL = 10
DEFAULT_EXIT_TIMEOUT = 20

# launchd-842 src/launchd.c sets PATH to _PATH_STDPATH when launchd has none; a
# LaunchAgent sees exactly this (macOS's paths.h: "/usr/bin:/bin:/usr/sbin:/sbin").
STD_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"

# Apple's launchctl prints this usage (Procursus launchctl.c help_cmd, and the same text in
# https://github.com/Homebrew/homebrew-services/issues/124 from a real Mac).
USAGE = """Usage: launchctl <subcommand> ... | help [subcommand]
Many subcommands take a target specifier that refers to a domain or service
within that domain. The available specifier forms are:

system/[service-name]
Targets the system-wide domain or service within. Root privileges are required
to make modifications.

user/<uid>/[service-name]
Targets the user domain or service within. A process running as the target user
may make modifications. Root may modify any user's domain. User domains do not
exist on iOS.

gui/<uid>/[service-name]
Targets the GUI domain or service within. Each GUI domain is associated with a
user domain, and a process running as the owner of that user domain may make
modifications. Root may modify any GUI domain. GUI domains do not exist on iOS.
"""

# Each subcommand's usage line, as `launchctl help <subcommand>` prints it (Procursus
# launchctl.c, cmds[]); printed with exit 64 when the arguments do not fit.
SUBCOMMANDS = {
    "bootstrap": "<domain-target> [service-path, service-path2, ...]",
    "bootout": "<domain-target> [service-path1, service-path2, ...] | <service-target>",
    "enable": "<service-target>",
    "disable": "<service-target>",
    "kickstart": "[-kp] <service-target>",
    "kill": "<signal-number|signal-name> <service-target>",
    "print": "<domain-target> | <service-target>",
    "print-disabled": "<domain-target>",
    "list": "[service-name]",
    "load": "<service-path, service-path2, ...>",
    "unload": "<service-path, service-path2, ...>",
}

BAD_TARGET = (
    "Unrecognized target specifier. <service-target> takes a form of "
    "<domain-target>/<service-id>.\n"
    "Please refer to `man launchctl` for explanation of the <domain-target> specifiers.\n"
)


@dataclass
class Reply:
    """What launchctl prints and the code it exits with."""

    rc: int = 0
    out: str = ""
    err: str = ""


@dataclass
class Request:
    """One parsed launchctl command line; the daemon executes it."""

    sub: str
    uid: int
    label: str = ""
    paths: list[str] = field(default_factory=list)
    kill: bool = False
    print_pid: bool = False
    signal: int = 0

    def to_wire(self) -> bytes:
        return json.dumps(asdict(self)).encode() + b"\n"

    @classmethod
    def from_wire(cls, data: bytes) -> Request:
        return cls(**json.loads(data))


class UsageError(Exception):
    """The command line does not fit; carries launchctl's reply."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.err)
        self.reply = reply


def usage_reply(sub: str) -> Reply:
    """`Usage: launchctl <sub> <its usage>` and 64, as launchctl answers bad arguments."""
    return Reply(EX_USAGE, err=f"Usage: launchctl {sub} {SUBCOMMANDS[sub]}\n")


def parse_target(sub: str, text: str, want_service: bool | None) -> tuple[int, str]:
    """``gui/<uid>`` or ``gui/<uid>/<label>`` as (uid, label).

    ``want_service`` True needs a label, False forbids one, None takes either. Only the
    GUI domain is modelled: a LaunchAgent lives there (launchctl(1), "gui/<uid>"), and a
    product that asks for another domain fails here loudly instead of being answered as
    a Mac would not.
    """
    parts = text.split("/", 2)
    if len(parts) < 2 or parts[0] != "gui" or not parts[1].isdigit():
        raise UsageError(Reply(EX_USAGE, err=BAD_TARGET + usage_reply(sub).err))
    label = parts[2] if len(parts) == 3 else ""
    if (want_service is True and not label) or (want_service is False and label):
        raise UsageError(Reply(EX_USAGE, err=BAD_TARGET + usage_reply(sub).err))
    return int(parts[1]), label


def parse_signal(text: str) -> int:
    """A signal as launchctl kill takes it: 15, -15, TERM, SIGTERM, sigterm.

    Procursus kill.c: a leading '-' and a 'SIG' prefix are dropped, a number is taken as
    is, a name is looked up case-insensitively; anything else is "Invalid signal.".
    """
    name = text[1:] if text.startswith("-") else text
    if len(name) > 3 and name[:3].upper() == "SIG":
        name = name[3:]
    if name.isdigit() and 0 < int(name) < signal.NSIG:
        return int(name)
    try:
        return int(signal.Signals["SIG" + name.upper()])
    except KeyError:
        raise UsageError(Reply(EX_USAGE, err="Invalid signal.\n" + usage_reply("kill").err)) \
            from None


def parse_argv(argv: list[str], own_uid: int) -> Request | Reply:
    """launchctl's command line as a Request for the daemon, or the reply it gets at once.

    Unknown subcommands and bad arguments are answered here, without a session, as
    launchctl answers them before it talks to launchd (Procursus launchctl.c main).
    """
    if not argv:
        return Reply(0, out=USAGE)
    sub, args = argv[0], argv[1:]
    if sub not in SUBCOMMANDS:
        # Procursus launchctl.c main: the name, the usage, exit 1.
        return Reply(1, out=USAGE, err=f"Unrecognized subcommand: {sub}\n")
    try:
        return _parse_sub(sub, args, own_uid)
    except UsageError as error:
        return error.reply


def _parse_sub(sub: str, args: list[str], own_uid: int) -> Request | Reply:
    if sub in ("load", "unload"):
        # The legacy pair infers its domain from the caller (launchctl(1), LEGACY
        # SUBCOMMANDS); the lab models only bootstrap/bootout, and refuses both with the
        # words a Mac prints when they fail (https://github.com/Wyvern/macos/issues/7,
        # macOS 14.4.1: "Unload failed: 5: Input/output error" and its hint).
        modern = "bootstrap" if sub == "load" else "bootout"
        return Reply(EIO, err=f"{sub.capitalize()} failed: 5: Input/output error\n"
                              f"Try running `launchctl {modern}` as root for richer errors.\n")
    if sub == "list":
        return Request(sub, own_uid, label=args[0] if args else "")
    if sub == "kickstart":
        return _parse_kickstart(args)
    if sub == "kill":
        if len(args) != 2:
            raise UsageError(usage_reply(sub))
        number = parse_signal(args[0])
        uid, label = parse_target(sub, args[1], True)
        return Request(sub, uid, label=label, signal=number)
    if sub in ("bootstrap", "bootout") and len(args) >= 2:
        uid, _ = parse_target(sub, args[0], False)
        return Request(sub, uid, paths=args[1:])
    if len(args) != 1 or (sub == "bootstrap"):
        raise UsageError(usage_reply(sub))
    want = {"print": None, "print-disabled": False, "bootout": True}.get(sub, True)
    uid, label = parse_target(sub, args[0], want)
    return Request(sub, uid, label=label)


def _parse_kickstart(args: list[str]) -> Request:
    kill = print_pid = False
    while args and args[0].startswith("-") and len(args[0]) > 1:
        for flag in args[0][1:]:
            if flag not in "kps":
                raise UsageError(usage_reply("kickstart"))
            kill = kill or flag == "k"
            print_pid = print_pid or flag == "p"
        args = args[1:]
    if len(args) != 1:
        raise UsageError(usage_reply("kickstart"))
    uid, label = parse_target("kickstart", args[0], True)
    return Request("kickstart", uid, label=label, kill=kill, print_pid=print_pid)


def no_such_service(label: str, uid: int) -> str:
    """launchd's ENOSERVICE words (Procursus launchctl.c main; real Macs print the same,
    e.g. https://github.com/headroomlabs-ai/headroom/issues/1289 for exit 113)."""
    return f'Could not find service "{label}" in domain for user gui: {uid}\n'


def failed(verb: str, code: int) -> str:
    """`Bootstrap failed: 5: Input/output error` and its kin (Procursus bootstrap.c)."""
    return f"{verb} failed: {code}: {STRERROR[code]}\n"


# A user who is not logged in at the console has no gui/<uid> domain. macOS 26 answers
# with 125 (https://github.com/lidge-jun/opencodex/issues/1770: `launchctl print
# gui/<uid>/<label>` exits 125 over SSH with no GUI login; bootstrap prints
# "Bootstrap failed: 125: Domain does not support specified action",
# https://github.com/duh17/oppi/issues/31 and https://github.com/rjwalters/loom/issues/4130).
NO_SESSION_WORDS = {
    "bootstrap": failed("Bootstrap", ENOTSUPPORTED_DOMAIN),
    "bootout": failed("Boot-out", ENOTSUPPORTED_DOMAIN),
    "enable": f"Could not enable service: {ENOTSUPPORTED_DOMAIN}: "
              f"{STRERROR[ENOTSUPPORTED_DOMAIN]}\n",
    "disable": f"Could not disable service: {ENOTSUPPORTED_DOMAIN}: "
               f"{STRERROR[ENOTSUPPORTED_DOMAIN]}\n",
}


def no_session_reply(request: Request) -> Reply:
    """What launchctl answers when nobody is logged in at the console as ``request.uid``.

    `list` still answers: over SSH it lists the caller's own (background) domain, which
    holds none of the user's LaunchAgents.
    """
    if request.sub == "list":
        return Reply(0, out="PID\tStatus\tLabel\n")
    words = NO_SESSION_WORDS.get(request.sub, STRERROR[ENOTSUPPORTED_DOMAIN] + "\n")
    return Reply(ENOTSUPPORTED_DOMAIN, err=words)


def socket_path(uid: int) -> str:
    """Where the GUI session of ``uid`` listens, when that user is logged in."""
    return os.path.join(os.environ.get(SOCKET_DIR_ENV, SOCKET_DIR), f"gui-{uid}.sock")


def call(path: str, request: Request) -> Reply | None:
    """Send ``request`` to the session at ``path``; None when no session listens there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        sock.sendall(request.to_wire())
        with sock.makefile("rb") as replies:
            return Reply(**json.loads(replies.readline()))


def reply_to_wire(reply: Reply) -> bytes:
    return json.dumps(asdict(reply)).encode() + b"\n"
