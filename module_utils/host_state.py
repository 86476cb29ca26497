# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ``host_state`` module reads of a host: accounts, files, systemd units, launchd
agents and local JSON APIs, in one pass.

The Python standard library only, and no Ansible: the module imports it, and its action
plugin runs ``read_state`` with this file's own source as a plain Python program over the
connection (``python3 -``), a fraction of a module run's cost, so that a role reads what it
needs once and runs a module only where something must change.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

CHUNK = 1 << 20
# The largest file ``texts`` returns: configuration files, not data.
TEXT_LIMIT = 1 << 16
# host_state's options (documented in library/host_state.py), for the module and its action
# plugin alike.
ARGUMENT_SPEC = {
    "users": {"type": "list", "elements": "str", "default": []},
    "groups": {"type": "list", "elements": "str", "default": []},
    "files": {"type": "list", "elements": "str", "default": []},
    "units": {"type": "list", "elements": "str", "default": []},
    "agents": {"type": "list", "elements": "str", "default": []},
    "launchd_domain": {"type": "str"},
    "urls": {"type": "list", "elements": "str", "default": []},
    "texts": {"type": "list", "elements": "str", "default": []},
}
# What systemd says of a unit, as ansible.builtin.systemd_service's status names it.
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "UnitFileState", "MainPID")
# launchctl print of an agent launchd does not know: 113, "Could not find specified service"
# (launchd's error table, copied in https://github.com/Alkenso/sLaunchctl,
# Sources/sLaunchctl/Error.swift).
NOT_LOADED = 113
# A gui/<uid> domain that does not exist, because nobody is logged in at the console: 125
# "Domain does not support specified action" (over SSH on current macOS:
# https://github.com/rjwalters/loom/issues/4130, https://github.com/duh17/oppi/issues/38),
# 112 "Could not find specified domain" (the same issue's earlier probe), 5 "Input/output
# error" from bootstrap (https://github.com/psimaker/vaultsync/issues/89).
DOMAIN_GONE = (5, 112, 125)
_PID = re.compile(r"^\s*pid = (\d+)\s*$", re.M)
# The agent's own state is the first `state =` line; nested blocks (coalitions, event
# triggers) print their own `state = active` further down.
_STATE = re.compile(r"^\s*state = (.+?)\s*$", re.M)


def user_entry(name: str) -> dict[str, Any] | None:
    """A user as ansible.builtin.user compares one: uid, primary group (its name, or its gid
    where no group has it), home, shell and supplementary groups; None when there is none."""
    try:
        found = pwd.getpwnam(name)
    except KeyError:
        return None
    try:
        primary = grp.getgrgid(found.pw_gid).gr_name
    except KeyError:
        primary = str(found.pw_gid)
    return {"uid": found.pw_uid, "group": primary, "home": found.pw_dir,
            "shell": found.pw_shell,
            "groups": sorted(g.gr_name for g in grp.getgrall() if name in g.gr_mem)}


def group_entry(name: str) -> dict[str, Any] | None:
    try:
        return {"gid": grp.getgrnam(name).gr_gid}
    except KeyError:
        return None


def name_of(table: Any, number: int) -> str:
    """The user (pwd) or group (grp) name of a number, or the number where none has it."""
    try:
        return table(number)[0]
    except KeyError:
        return str(number)


def file_entry(path: str) -> dict[str, Any] | None:
    """A path as ansible.builtin.stat reports the parts roles compare (not followed): its
    type, owner and group (ids and names), mode (octal string), whether the connecting user
    may execute it, and a regular file's SHA-1 (stat's checksum); None when nothing is there,
    or when it cannot be read."""
    path = os.path.expanduser(path)  # ~ is the connecting (or become) user's, as for a module
    try:
        found = os.lstat(path)
    except OSError:
        return None
    kind = ("file" if stat.S_ISREG(found.st_mode) else "directory" if stat.S_ISDIR(found.st_mode)
            else "link" if stat.S_ISLNK(found.st_mode) else "other")
    entry: dict[str, Any] = {"type": kind, "uid": found.st_uid, "gid": found.st_gid,
                             "owner": name_of(pwd.getpwuid, found.st_uid),
                             "group": name_of(grp.getgrgid, found.st_gid),
                             "mode": f"{stat.S_IMODE(found.st_mode):04o}",
                             "executable": os.access(path, os.X_OK)}
    if kind == "file":
        digest = hashlib.sha1()  # what ansible.builtin.stat reports as checksum
        try:
            with open(path, "rb") as stream:
                for block in iter(lambda: stream.read(CHUNK), b""):
                    digest.update(block)
        except OSError:
            return None
        entry["checksum"] = digest.hexdigest()
    return entry


def text_entry(path: str) -> str | None:
    """A regular file's whole text (UTF-8, at most TEXT_LIMIT bytes), for a decision made on
    the controller; None when it is missing, not a regular file, larger or not UTF-8."""
    try:
        with open(os.path.expanduser(path), "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                return None
            data = stream.read(TEXT_LIMIT + 1)
    except OSError:
        return None
    if len(data) > TEXT_LIMIT:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def parse_units(names: list[str], shown: str) -> dict[str, dict[str, Any] | None]:
    """``systemctl show`` of ``names`` (one block of KEY=value lines a unit, in their order,
    blank lines between) -> each unit's UNIT_PROPERTIES; a unit systemd does not know has
    LoadState not-found. None for all when the blocks do not match the names."""
    blocks = [block for block in shown.strip().split("\n\n") if block.strip()]
    if len(blocks) != len(names):
        return dict.fromkeys(names)
    units: dict[str, dict[str, Any] | None] = {}
    for index, name in enumerate(names):  # the same length; zip(strict=) is Python 3.10+
        found = dict(line.split("=", 1) for line in blocks[index].splitlines() if "=" in line)
        entry: dict[str, Any] = {key: found.get(key, "") for key in UNIT_PROPERTIES}
        entry["MainPID"] = int(entry["MainPID"] or 0)
        units[name] = entry
    return units


def unit_entries(names: list[str]) -> dict[str, dict[str, Any] | None]:
    """Each systemd unit's state, read in one ``systemctl show``; None for each where systemd
    cannot answer (a Mac, a container without it)."""
    if not names:
        return {}
    try:
        shown = subprocess.run(
            ["systemctl", "show", "--property=" + ",".join(UNIT_PROPERTIES), "--", *names],
            capture_output=True, text=True, check=False,
            env={**os.environ, "LC_ALL": "C", "SYSTEMD_PAGER": ""})
    except OSError:
        return dict.fromkeys(names)
    return parse_units(names, shown.stdout) if shown.returncode == 0 else dict.fromkeys(names)


def agent_entry(print_rc: int, print_out: str, disabled_out: str,
                label: str) -> dict[str, Any]:
    """An agent as `launchctl print <domain>/<label>` (its exit code and output) and
    `launchctl print-disabled <domain>` report it: loaded, running, pid (0 when not running),
    enabled."""
    loaded = print_rc == 0
    state = _STATE.search(print_out) if loaded else None
    running = state is not None and state.group(1) == "running"
    pid = _PID.search(print_out) if running else None
    # Recent macOS prints `"label" => disabled`, older ones `"label" => true`.
    disabled = re.search(r'"' + re.escape(label) + r'" => (?:disabled|true)', disabled_out)
    return {"loaded": loaded, "running": running, "pid": int(pid.group(1)) if pid else 0,
            "enabled": disabled is None}


def domain_user(domain: str) -> str:
    """The login name of a `gui/<uid>` or `user/<uid>` domain's user."""
    uid = domain.rpartition("/")[2]
    try:
        return pwd.getpwuid(int(uid)).pw_name
    except (ValueError, KeyError):
        return f"the user with uid {uid}"


def not_logged_in(domain: str, user: str) -> str:
    """The one line a user reads when the domain does not exist."""
    return (f"{user} is not logged in at the console, so launchd has no {domain} domain for "
            "its agents (FileVault turns automatic login off, and a restart logs everyone "
            "out): log in at the console or enable automatic login, then run again")


def launchctl_failure(command: list[str], rc: int, out: str, err: str) -> str:
    """launchctl's own words for a subcommand that failed."""
    return f"launchctl {' '.join(command)} failed ({rc}): {(err or out).strip()}"


def launchctl(*args: str) -> tuple[int, str, str]:
    """Run launchctl (/bin on macOS, on an SSH session's PATH): exit code, output, errors."""
    try:
        ran = subprocess.run(["launchctl", *args], capture_output=True, text=True, check=False)
    except OSError as error:
        return 127, "", str(error)
    return ran.returncode, ran.stdout, ran.stderr


def domain_problem(domain: str, run: Callable[..., tuple[int, str, str]] = launchctl
                   ) -> str | None:
    """Why launchd cannot answer for ``domain`` (nobody logged in, or launchctl's words);
    None when the domain exists. ``run`` runs launchctl (a module passes its own)."""
    rc, out, err = run("print", domain)
    if rc in DOMAIN_GONE:
        return not_logged_in(domain, domain_user(domain))
    return launchctl_failure(["print", domain], rc, out, err) if rc != 0 else None


def agent_entries(labels: list[str], domain: str,
                  check_domain: bool) -> tuple[dict[str, dict[str, Any] | None], str | None]:
    """Each agent of ``domain`` as launchd has it (one `print` each, one `print-disabled`),
    and why launchd could not answer (None when it did). Without labels, only whether the
    domain exists, when ``check_domain``. None for each where there is no launchctl (Linux)."""
    if shutil.which("launchctl") is None:
        return dict.fromkeys(labels), None
    if not labels:
        return {}, domain_problem(domain) if check_domain else None
    printed: dict[str, tuple[int, str]] = {}
    for label in labels:
        rc, out, err = launchctl("print", f"{domain}/{label}")
        if rc not in (0, NOT_LOADED):
            # A domain that is gone fails every subcommand: say why, not launchctl's code.
            return {}, domain_problem(domain) or launchctl_failure(
                ["print", f"{domain}/{label}"], rc, out, err)
        printed[label] = (rc, out)
    rc, disabled, err = launchctl("print-disabled", domain)
    if rc != 0:
        return {}, launchctl_failure(["print-disabled", domain], rc, disabled, err)
    return {label: agent_entry(rc, out, disabled, label)
            for label, (rc, out) in printed.items()}, None


# A local API answers at once or not at all: no proxy (the environment's would be asked for
# 127.0.0.1 too), a short wait.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))
URL_TIMEOUT = 5


def url_entry(url: str) -> dict[str, Any] | None:
    """``GET url`` on the host: its HTTP status and its JSON body (None when it is not JSON),
    or None when nothing answered."""
    try:
        with _LOCAL.open(url, timeout=URL_TIMEOUT) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    except (OSError, ValueError):
        return None
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    return {"status": status, "json": document}


def read_state(params: Mapping[str, Any]) -> dict[str, Any]:
    """Each of ``params``' users, groups, files, units, agents, urls and texts (lists of
    names, absolute paths, labels and URLs) as the host has it: ``{"users": {name: entry or
    None}, "groups": ..., "files": ..., "units": ..., "agents": ..., "launchd_domain": ...,
    "urls": ..., "texts": ...}``, with ``failed`` and
    ``msg`` where launchd cannot answer for the domain (nobody is logged in at the
    console)."""
    labels = list(params.get("agents") or ())
    domain = params.get("launchd_domain") or f"gui/{os.getuid()}"
    agents, problem = agent_entries(labels, domain, bool(params.get("launchd_domain")))
    state = {
        "users": {name: user_entry(name) for name in params.get("users") or ()},
        "groups": {name: group_entry(name) for name in params.get("groups") or ()},
        "files": {path: file_entry(path) for path in params.get("files") or ()},
        "units": unit_entries(list(params.get("units") or ())),
        "agents": agents,
        "launchd_domain": domain if labels or params.get("launchd_domain") else None,
        "urls": {url: url_entry(url) for url in params.get("urls") or ()},
        "texts": {path: text_entry(path) for path in params.get("texts") or ()},
    }
    if problem is not None:
        state.update(failed=True, msg=problem)
    return state
