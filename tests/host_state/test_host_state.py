"""host_state: what it reads of users, groups and files, and real playbook runs (local
connection) that read it with a program over the connection, or with the module where no
interpreter is known."""

from __future__ import annotations

import contextlib
import grp
import hashlib
import http.server
import json
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from action_plugins import host_state as action
from module_utils import host_state as state

from ..library_kit import assert_options_documented, module_doc, serving

REPO = Path(__file__).resolve().parents[2]


def test_a_user_is_read_as_the_user_module_compares_it() -> None:
    me = pwd.getpwuid(os.getuid())
    entry = state.user_entry(me.pw_name)
    assert entry is not None
    assert (entry["uid"], entry["group"], entry["home"], entry["shell"]) == (
        me.pw_uid, grp.getgrgid(me.pw_gid).gr_name, me.pw_dir, me.pw_shell)
    assert entry["groups"] == sorted(g.gr_name for g in grp.getgrall() if me.pw_name in g.gr_mem)
    assert state.user_entry("no-such-user-here") is None
    assert state.group_entry(grp.getgrgid(0).gr_name) == {"gid": 0}
    assert state.group_entry("no-such-group-here") is None


def test_files_are_read_as_stat_reports_them(tmp_path: Path) -> None:
    data = tmp_path / "requirements.txt"
    data.write_bytes(b"redis==8.1.0\n")
    data.chmod(0o640)
    (tmp_path / "link").symlink_to(data)
    found = state.read_state({"files": [str(data), str(tmp_path), str(tmp_path / "link"),
                                        str(tmp_path / "missing")]})["files"]
    assert found[str(data)] == {
        "type": "file", "uid": os.getuid(), "gid": os.getgid(),
        "owner": pwd.getpwuid(os.getuid()).pw_name, "group": grp.getgrgid(os.getgid()).gr_name,
        "mode": "0640", "executable": False,
        "checksum": hashlib.sha1(b"redis==8.1.0\n").hexdigest()}
    assert found[str(tmp_path)]["type"] == "directory"
    assert found[str(tmp_path / "link")]["type"] == "link"  # not followed
    assert found[str(tmp_path / "missing")] is None
    # ~ is expanded where the read runs, and the path keeps the name it was asked by.
    home = state.read_state({"files": ["~"]})["files"]["~"]
    assert home is not None and home["uid"] == os.stat(os.path.expanduser("~")).st_uid


def test_the_program_prints_what_the_function_returns() -> None:
    text = action.program((REPO / "module_utils" / "host_state.py").read_text(), "read_state",
                          {"groups": ["no-such-group-here"]})
    ran = subprocess.run([sys.executable, "-"], input=text, capture_output=True, text=True,
                         check=True)
    assert action.last_json(ran.stdout) == {"users": {}, "groups": {"no-such-group-here": None},
                                            "files": {}, "units": {}, "agents": {},
                                            "launchd_domain": None, "urls": {}, "texts": {}}
    assert action.last_json("") is None
    assert action.last_json("Traceback ...\nNameError: x") is None


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Read
      host_state: "{{ read_args }}"
      register: read
      # A failed read is kept, to be looked at.
      ignore_errors: true
    - name: Keep the result
      ansible.builtin.copy:
        content: "{{ read | to_json }}"
        dest: "{{ result_file }}"
        mode: "0600"
"""


def read_on_localhost(tmp_path: Path, args: dict, interpreter: str, path: str = "",
                      **extra_env: str) -> tuple[dict, int]:
    """host_state run by ansible-playbook at -vvv: its result (failed or not), and how many
    module runs it took (Ansible names the module file of each). ``path``, then this
    Python, lead PATH."""
    playbook, result_file = tmp_path / "read.yml", tmp_path / "result.json"
    playbook.write_text(PLAYBOOK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **extra_env,
               PATH=os.pathsep.join(filter(None, [path, str(Path(sys.executable).parent),
                                                  env.get("PATH", "")])))
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-vvv", "-i", "localhost,",
         "-c", "local", "-e",
         json.dumps({"read_args": args, "ansible_python_interpreter": interpreter,
                     "result_file": str(result_file)}),
         str(playbook)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)
    assert run.returncode == 0, run.stdout[-3000:]
    return (json.loads(result_file.read_text()),
            run.stdout.count(f"Using module file {REPO / 'library' / 'host_state.py'}"))


@pytest.mark.parametrize(("interpreter", "module_runs"), [
    (sys.executable, 0),  # the program, over the connection
    ("python3", 1),  # not a path the program can be given to: the module reads
])
def test_a_read_gives_the_same_with_or_without_a_module_run(tmp_path: Path, interpreter: str,
                                                            module_runs: int) -> None:
    me = pwd.getpwuid(os.getuid()).pw_name
    (tmp_path / "stamp").write_text("x\n")
    with local_api() as url:
        args = {"users": [me, "no-such-user-here"], "groups": ["no-such-group-here"],
                "files": [str(tmp_path / "stamp")], "urls": [f"{url}/api/tags"],
                "texts": [str(tmp_path / "stamp")]}
        result, runs = read_on_localhost(tmp_path, args, interpreter)
        expected = state.read_state(args)
    assert runs == module_runs
    assert result["changed"] is False
    assert {key: result[key] for key in expected} == expected
    assert result["urls"] == {f"{url}/api/tags": {"status": 200, "json": TAGS}}
    assert result["texts"] == {str(tmp_path / "stamp"): "x\n"}


TAGS = {"models": [{"name": "llama3.2:3b", "digest": "a" * 64}]}


@contextlib.contextmanager
def local_api() -> Iterator[str]:
    """A local HTTP API on loopback: /api/tags answers TAGS, /text plain text, the rest 404."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, status, kind = {"/api/tags": (json.dumps(TAGS).encode(), 200,
                                                "application/json"),
                                  "/text": (b"Ollama is running", 200, "text/plain")}.get(
                self.path, (b'{"error": "not found"}', 404, "application/json"))
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url


def test_a_url_reads_as_its_status_and_json_or_null_when_nothing_answers() -> None:
    with local_api() as url:
        read = state.read_state({"urls": [f"{url}/api/tags", f"{url}/text", f"{url}/gone"]})
    closed = f"{url}/api/tags"  # the server is gone now
    assert read["urls"] == {f"{url}/api/tags": {"status": 200, "json": TAGS},
                            f"{url}/text": {"status": 200, "json": None},
                            f"{url}/gone": {"status": 404, "json": {"error": "not found"}}}
    assert state.read_state({"urls": [closed, "not a url"]})["urls"] == {
        closed: None, "not a url": None}


def test_a_text_is_a_small_utf8_files_whole_content_or_null(tmp_path: Path) -> None:
    (tmp_path / "pg_hba.conf").write_text("local all postgres peer\n# é\n")
    (tmp_path / "big").write_bytes(b"x" * (state.TEXT_LIMIT + 1))
    (tmp_path / "binary").write_bytes(b"\xff\xfe")
    (tmp_path / "link").symlink_to(tmp_path / "pg_hba.conf")
    paths = [str(tmp_path / name) for name in ("pg_hba.conf", "big", "binary", "link",
                                                 "missing")]
    paths.append(str(tmp_path))  # a directory
    texts = state.read_state({"texts": paths})["texts"]
    assert texts == {paths[0]: "local all postgres peer\n# é\n", paths[1]: None,
                     paths[2]: None, paths[3]: "local all postgres peer\n# é\n",
                     paths[4]: None, paths[5]: None}


def test_documentation_matches_the_argument_spec() -> None:
    doc = module_doc("host_state")
    assert_options_documented(doc, state.ARGUMENT_SPEC)
    assert sorted(doc["return"]) == sorted(action.RETURNED)


def test_units_are_read_from_one_systemctl_show() -> None:
    shown = ("MainPID=4242\nLoadState=loaded\nActiveState=active\nSubState=running\n"
             "UnitFileState=enabled\n\n"
             "MainPID=0\nLoadState=not-found\nActiveState=inactive\nSubState=dead\n"
             "UnitFileState=\n")
    assert state.parse_units(["ollama.service", "gone.service"], shown) == {
        "ollama.service": {"LoadState": "loaded", "ActiveState": "active",
                           "SubState": "running", "UnitFileState": "enabled", "MainPID": 4242},
        "gone.service": {"LoadState": "not-found", "ActiveState": "inactive",
                         "SubState": "dead", "UnitFileState": "", "MainPID": 0}}
    # Output that does not match the names asked: nothing is claimed about any of them.
    assert state.parse_units(["a.service", "b.service"], shown.split("\n\n")[0]) == {
        "a.service": None, "b.service": None}
    assert state.read_state({})["units"] == {}
