# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the ollama role: who holds the Ollama port on a Mac, from lsof's output for
programs (`lsof -nP -iTCP:<port> -sTCP:LISTEN -F pcn`, tasks/preflight.yml)."""

from __future__ import annotations

from typing import Any


def lsof_listeners(output: str) -> list[dict[str, Any]]:
    """The processes of `lsof -F pcn` output: [{pid, command, names}].

    lsof(8), OUTPUT FOR OTHER PROGRAMS: one field a line, its first character saying which;
    a `p` line (process id) starts a process set, the lines after it (`c` command, and per
    file `f` descriptor and `n` name) belong to it. Fields not asked for (lsof adds `f` on
    some versions) are skipped. https://man.freebsd.org/cgi/man.cgi?manpath=macOS+26.3&query=lsof&sektion=8
    """
    processes: list[dict[str, Any]] = []
    for line in output.splitlines():
        field, value = line[:1], line[1:]
        if field == "p":
            processes.append({"pid": int(value), "command": "", "names": []})
        elif processes and field == "c":
            processes[-1]["command"] = value
        elif processes and field == "n":
            processes[-1]["names"].append(value)
    return processes


def port_holders(listeners: list[dict[str, Any]], own_pid: int) -> str:
    """The processes other than ``own_pid`` (the role's agent), as a user reads them:
    "Ollama (pid 812, 127.0.0.1:11434)"; "" when there is none."""
    return ", ".join(f"{entry['command'] or 'a process'} (pid {entry['pid']}, "
                     f"{' '.join(entry['names'])})"
                     for entry in listeners if entry["pid"] != own_pid)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"lsof_listeners": lsof_listeners, "port_holders": port_holders}
