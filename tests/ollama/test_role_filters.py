"""The ollama role's filters (roles/ollama/filter_plugins/ollama.py): lsof's output for
programs, as macOS's lsof prints it for `lsof -nP -iTCP:11434 -sTCP:LISTEN -F pcn`."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys

import pytest

from .conftest import REPO, ROLE

_spec = importlib.util.spec_from_file_location("ollama_role_filters",
                                               ROLE / "filter_plugins" / "ollama.py")
assert _spec is not None and _spec.loader is not None
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)


def test_each_process_set_starts_at_its_pid_line():
    # Two processes; the first listens on IPv4 and IPv6, with the `f` lines some lsof
    # versions add although they were not asked for.
    output = "p812\ncOllama\nf4\nn127.0.0.1:11434\nf5\nn[::1]:11434\np4242\ncollama\nn*:11434\n"
    assert filters.lsof_listeners(output) == [
        {"pid": 812, "command": "Ollama", "names": ["127.0.0.1:11434", "[::1]:11434"]},
        {"pid": 4242, "command": "ollama", "names": ["*:11434"]},
    ]


def test_nothing_listening_is_no_process():
    # lsof prints nothing (and exits 1) when no process matches.
    assert filters.lsof_listeners("") == []


@pytest.mark.parametrize(("own_pid", "holders"), [
    (4242, "Ollama (pid 812, 127.0.0.1:11434 [::1]:11434)"),
    (0, "Ollama (pid 812, 127.0.0.1:11434 [::1]:11434), ollama (pid 4242, *:11434)"),
])
def test_the_holders_are_every_process_but_the_roles_agent(own_pid, holders):
    listeners = filters.lsof_listeners(
        "p812\ncOllama\nn127.0.0.1:11434\nn[::1]:11434\np4242\ncollama\nn*:11434\n")
    assert filters.port_holders(listeners, own_pid) == holders


def test_only_the_roles_agent_holds_no_one():
    assert filters.port_holders([{"pid": 4242, "command": "ollama", "names": ["*:11434"]}],
                                4242) == ""


def test_the_lab_macs_lsof_output_is_read(tmp_path):
    """The lab Mac's /usr/sbin/lsof (lab/macos/image/files/lsof.py, read from /proc here) for
    a socket this test listens on, as the role's preflight asks it."""
    lsof = REPO / "lab" / "macos" / "image" / "files" / "lsof.py"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        argv = [sys.executable, str(lsof), "-nP", f"-iTCP:{port}", "-sTCP:LISTEN", "-F", "pcn"]
        found = subprocess.run(argv, capture_output=True, text=True, check=True)
    listeners = filters.lsof_listeners(found.stdout)
    assert [(entry["pid"], entry["names"]) for entry in listeners] == [
        (os.getpid(), [f"127.0.0.1:{port}"])]
    assert filters.port_holders(listeners, os.getpid()) == ""
    # Nothing listens any more: no process, and lsof's exit status 1.
    gone = subprocess.run(argv, capture_output=True, text=True)
    assert (gone.returncode, filters.lsof_listeners(gone.stdout)) == (1, [])
