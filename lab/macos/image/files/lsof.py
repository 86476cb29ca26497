#!/usr/bin/python3.11
"""/usr/sbin/lsof of macOS, for the questions asked of it about TCP sockets:

    lsof -nP -iTCP[:PORT] [-sTCP:LISTEN] [-t] [-a] [-F[FIELDS]]

read from /proc (net/tcp, net/tcp6 and the caller's own /proc/PID/fd: lsof run by a user on
macOS lists only that user's processes' files, as here). Behaviours copied from lsof(8)
(https://lsof.readthedocs.io/en/latest/manpage/ and its OUTPUT and OUTPUT FOR OTHER PROGRAMS
sections):

- columns COMMAND PID USER FD TYPE DEVICE SIZE/OFF NODE NAME; NAME is
  ``ADDRESS:PORT (STATE)``, ``*:PORT`` for a wildcard address, IPv6 in brackets;
- ``-t``: only the PIDs, one a line, each once;
- ``-F``: one field a line with its letter (``p`` pid, ``c`` command, ``u`` uid, ``L``
  login, ``f`` fd, ``t`` type, ``P`` protocol, ``n`` name, ``T`` TST=state); ``p`` always
  and ``f`` for each file (OUTPUT FOR OTHER PROGRAMS); the list attached (-Fpcn) or as the
  next argument (-F pcn);
- exit status 1 when nothing was listed.

Other options end with lsof's "lsof: unsupported option" line (the stand-in's, naming it) and
status 1: the product must not rely on what this stand-in does not do.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import re
import sys
from dataclasses import dataclass

# /proc/net/tcp's st column (include/net/tcp_states.h) -> lsof's TCP state names.
TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
              "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSED", "08": "CLOSE_WAIT",
              "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
INET = re.compile(r"^-i(?:(?P<v>[46]))?(?P<proto>TCP|tcp)?(?::(?P<port>\d+))?$")


@dataclass
class Socket:
    family: str
    local: str
    remote: str
    state: str
    inode: int


def address(hex_address: str, family: str) -> tuple[str, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if family == "IPv4":
        ip = ipaddress.IPv4Address(raw[::-1])
    else:  # four little-endian 32-bit words
        ip = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return str(ip), int(port, 16)


def name_of(ip: str, port: int, family: str) -> str:
    if ip in ("0.0.0.0", "::"):
        return f"*:{port}"
    return f"[{ip}]:{port}" if family == "IPv6" else f"{ip}:{port}"


def tcp_sockets() -> dict[int, tuple[Socket, int, int]]:
    """inode -> (socket, local port, remote port) of every TCP socket of the host."""
    sockets = {}
    for path, family in (("/proc/net/tcp", "IPv4"), ("/proc/net/tcp6", "IPv6")):
        try:
            with open(path) as handle:
                lines = handle.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local_ip, local_port = address(fields[1], family)
            remote_ip, remote_port = address(fields[2], family)
            remote = "" if remote_port == 0 else name_of(remote_ip, remote_port, family)
            socket = Socket(family, name_of(local_ip, local_port, family), remote,
                            TCP_STATES.get(fields[3], fields[3]), int(fields[9]))
            sockets[socket.inode] = (socket, local_port, remote_port)
    return sockets


def open_sockets() -> list[tuple[int, str, int, str]]:
    """(pid, command, fd, socket inode) of the processes this user may look into."""
    found = []
    for pid in sorted(int(name) for name in os.listdir("/proc") if name.isdigit()):
        try:
            with open(f"/proc/{pid}/comm") as handle:
                command = handle.read().strip()
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in sorted(fds, key=int):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                found.append((pid, command, int(fd), target[8:-1]))
    return found


def main(argv: list[str]) -> int:
    port, state, terse, fields, family = None, None, False, None, None
    inet = False
    index = 0
    while index < len(argv):
        arg = argv[index]
        match = INET.match(arg)
        if match:
            inet = True
            port = int(match["port"]) if match["port"] else None
            family = {"4": "IPv4", "6": "IPv6"}.get(match["v"] or "")
        elif arg.startswith("-sTCP:"):
            state = arg[len("-sTCP:"):].upper()
        elif arg in ("-n", "-P", "-nP", "-Pn", "-a"):
            pass
        elif arg in ("-t", "-tnP", "-nPt"):
            terse = True
        elif arg.startswith("-F"):
            # lsof takes the field list attached or as the next argument (main.c, case
            # 'F': a following argument not starting with - or + is its value).
            fields = arg[2:]
            if not fields and index + 1 < len(argv) and argv[index + 1][:1] not in "-+":
                index += 1
                fields = argv[index]
            fields = fields or "pcfn"
        else:
            print(f"lsof: unsupported option in the lab's lsof stand-in: {arg}", file=sys.stderr)
            return 1
        index += 1
    if not inet:
        print("lsof: the lab's lsof stand-in lists TCP sockets only (-iTCP)", file=sys.stderr)
        return 1
    sockets = tcp_sockets()
    rows = []
    for pid, command, fd, inode in open_sockets():
        entry = sockets.get(int(inode))
        if entry is None:
            continue
        socket, local_port, remote_port = entry
        if port is not None and port not in (local_port, remote_port):
            continue
        if state is not None and socket.state != state:
            continue
        if family is not None and socket.family != family:
            continue
        rows.append((pid, command, fd, socket))
    if not rows:
        return 1
    if terse:
        print("\n".join(dict.fromkeys(str(pid) for pid, *_ in rows)))
        return 0
    if fields is not None:
        print_fields(rows, fields)
        return 0
    print_table(rows)
    return 0


def user_of(pid: int) -> tuple[int, str]:
    uid = os.stat(f"/proc/{pid}").st_uid
    try:
        return uid, pwd.getpwuid(uid).pw_name
    except KeyError:
        return uid, str(uid)


def print_fields(rows: list[tuple[int, str, int, Socket]], fields: str) -> None:
    last = None
    for pid, command, fd, socket in rows:
        if pid != last:
            uid, login = user_of(pid)
            process = {"p": str(pid), "c": command, "u": str(uid), "L": login}
            print("\n".join(f"{key}{process[key]}" for key in "pcuL"
                            if key == "p" or key in fields))
            last = pid
        name = socket.local + (f"->{socket.remote}" if socket.remote else "")
        file_ = {"f": str(fd), "t": socket.family, "P": "TCP", "n": name,
                 "T": f"ST={socket.state}"}
        print("\n".join(f"{key}{file_[key]}" for key in "ftPnT" if key == "f" or key in fields))


def print_table(rows: list[tuple[int, str, int, Socket]]) -> None:
    lines = [("COMMAND", "PID", "USER", "FD", "TYPE", "DEVICE", "SIZE/OFF", "NODE", "NAME")]
    for pid, command, fd, socket in rows:
        name = socket.local + (f"->{socket.remote}" if socket.remote else "")
        lines.append((command[:9], str(pid), user_of(pid)[1], f"{fd}u", socket.family,
                      f"0x{socket.inode:016x}", "0t0", "TCP", f"{name} ({socket.state})"))
    widths = [max(len(line[i]) for line in lines) for i in range(8)]
    for line in lines:
        # COMMAND and USER left-aligned, the numbers right-aligned, as lsof prints them.
        cells = [line[i].ljust(widths[i]) if i in (0, 2, 4) else line[i].rjust(widths[i])
                 for i in range(8)]
        print(" ".join(cells) + " " + line[8])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
