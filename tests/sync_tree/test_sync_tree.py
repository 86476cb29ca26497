"""sync_tree: pure functions of the module and its action plugin, and real playbook runs
(local connection) that check the first run ships, the second changes nothing, and only
what differs is written again."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail

from action_plugins import host_state
from action_plugins import sync_tree as action
from library import sync_tree as module
from module_utils import sync_tree_state as state

from ..library_kit import assert_options_documented, module_doc

REPO = Path(__file__).resolve().parents[2]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "__pycache__").mkdir()
    (src / "top.py").write_text("print('top')\n")
    (src / "pkg" / "a.py").write_text("A = 1\n")
    (src / "pkg" / "sub" / "b.bin").write_bytes(bytes(range(256)) * 64)
    (src / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00cache")
    (src / "stray.pyc").write_bytes(b"\x00cache")
    return src


# --- pure functions ---------------------------------------------------------------------


def test_manifest_skips_caches_and_hashes_content(tree: Path) -> None:
    manifest = action.build_manifest(str(tree), None, action.DEFAULT_EXCLUDE)
    assert sorted(manifest) == ["pkg/a.py", "pkg/sub/b.bin", "top.py"]
    assert manifest["pkg/a.py"] == sha(b"A = 1\n")


def test_manifest_of_listed_files_only(tree: Path) -> None:
    assert list(action.build_manifest(str(tree), ["top.py"], action.DEFAULT_EXCLUDE)) == ["top.py"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["missing.py"], "sync_tree: 'missing.py' is not a file in"),
        (["../etc/passwd"], "must be a path relative to src, without '..'"),
        (["/etc/passwd"], "must be a path relative to src, without '..'"),
        (["stray.pyc"], "no file to ship from"),
    ],
)
def test_manifest_refuses_bad_entries(tree: Path, files: list[str], message: str) -> None:
    with pytest.raises(AnsibleActionFail, match=message.replace("(", r"\(").replace(".", r"\.")):
        action.build_manifest(str(tree), files, action.DEFAULT_EXCLUDE)


def test_manifest_refuses_a_missing_src(tmp_path: Path) -> None:
    with pytest.raises(AnsibleActionFail) as error:
        action.build_manifest(str(tmp_path / "nowhere"), None, action.DEFAULT_EXCLUDE)
    assert (
        str(error.value)
        == f"sync_tree: src {tmp_path / 'nowhere'} is not a directory on the controller; fix src"
    )


def test_stale_files_finds_missing_and_different(tmp_path: Path) -> None:
    (tmp_path / "same").write_text("x")
    (tmp_path / "other").write_text("old")
    (tmp_path / "dir").mkdir()
    manifest = {"same": sha(b"x"), "other": sha(b"new"), "gone": sha(b"g"), "dir": sha(b"d")}
    assert module.stale_files(str(tmp_path), manifest) == ["dir", "gone", "other"]


def test_stale_files_does_not_follow_a_link(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert module.stale_files(str(tmp_path), {"link": sha(b"x")}) == ["link"]


def test_tree_directories_parents_first() -> None:
    assert module.tree_directories(["a/b/c.py", "a/d.py", "e.py"]) == ["", "a", "a/b"]


@pytest.mark.parametrize("relpath", ["", "/abs", "../up", "a/../b"])
def test_check_relative_refuses_escapes(relpath: str) -> None:
    with pytest.raises(module.TreeError, match="is not a path inside the tree"):
        module.check_relative(relpath)


def archive_of(path: Path, members: dict[str, bytes]) -> str:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_write_from_archive_writes_checked_files(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "a").mkdir(parents=True)
    archive = archive_of(tmp_path / "t.tar", {"a/x": b"new"})
    assert module.write_from_archive(archive, str(dest), {"a/x": sha(b"new"), "y": sha(b"y")}) == [
        "a/x"
    ]
    assert (dest / "a" / "x").read_bytes() == b"new"


def test_write_from_archive_refuses_damaged_content_and_leaves_the_old_file(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"old")
    archive = archive_of(tmp_path / "t.tar", {"x": b"evil"})
    with pytest.raises(module.TreeError, match="'x' arrived damaged"):
        module.write_from_archive(archive, str(tmp_path), {"x": sha(b"good")})
    assert (tmp_path / "x").read_bytes() == b"old"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".sync_tree.")]


def test_write_from_archive_refuses_a_member_outside_the_manifest(tmp_path: Path) -> None:
    archive = archive_of(tmp_path / "t.tar", {"../escape": b"x"})
    with pytest.raises(module.TreeError, match="is not a path inside the tree"):
        module.write_from_archive(archive, str(tmp_path), {"x": sha(b"x")})


def test_archive_written_by_the_plugin_round_trips(tree: Path, tmp_path: Path) -> None:
    manifest = action.build_manifest(str(tree), None, action.DEFAULT_EXCLUDE)
    archive = tmp_path / "files.tar"
    action.write_archive(str(tree), sorted(manifest), str(archive))
    dest = tmp_path / "dest"
    for directory in module.tree_directories(manifest):
        (dest / directory).mkdir(parents=True, exist_ok=True)
    assert sorted(module.write_from_archive(str(archive), str(dest), manifest)) == sorted(manifest)
    assert module.stale_files(str(dest), manifest) == []


def test_peek_reads_text_and_names_what_it_does_not_show(tmp_path: Path) -> None:
    (tmp_path / "text").write_text("PASS=x\n")
    (tmp_path / "bin").write_bytes(b"\x00\x01")
    (tmp_path / "big").write_text("x" * 11)
    (tmp_path / "dir").mkdir()
    assert module.peek(str(tmp_path / "text"), 10) == {"text": "PASS=x\n"}
    assert module.peek(str(tmp_path / "bin"), 10) == {"binary": True}
    assert module.peek(str(tmp_path / "big"), 10) == {"larger": 10}
    assert module.peek(str(tmp_path / "big"), 0) == {"text": "x" * 11}
    assert module.peek(str(tmp_path / "gone"), 10) == {"text": ""}
    assert module.peek(str(tmp_path / "dir"), 10) == {"text": ""}


def test_a_diff_entry_masks_the_secrets_and_names_binary_and_large_files() -> None:
    entry = action.diff_entry("/etc/a.env", {"text": "PASS=old-secret\nA=1\n"},
                              b"PASS=new-secret\nA=2\n", 100, ["old-secret", "new-secret"])
    assert entry == {"before_header": "/etc/a.env", "after_header": "/etc/a.env",
                     "before": "PASS=********\nA=1\n", "after": "PASS=********\nA=2\n"}
    assert action.diff_entry("/b", {"binary": True}, b"\x00", 100, []) == {
        "before_header": "/b", "after_header": "/b", "dst_binary": 1, "src_binary": 1}
    assert action.diff_entry("/c", {"larger": 100}, b"x" * 101, 100, []) == {
        "before_header": "/c", "after_header": "/c", "dst_larger": 100, "src_larger": 100}


def in_place_params(dest: Path, files: dict[str, bytes], **settings: object) -> dict:
    return {"dest": str(dest), "manifest": {name: sha(data) for name, data in files.items()},
            "owner": None, "group": None, "mode": "0640", "directory_mode": "0750", **settings}


def test_in_place_report_says_whether_a_module_run_would_change_anything(
        tmp_path: Path) -> None:
    dest, files = tmp_path / "dest", {"a.py": b"A = 1\n", "pkg/b.py": b"B = 1\n"}
    params = in_place_params(dest, files)
    assert state.in_place_report(params) == {
        "in_place": False, "dest": str(dest), "why": f"{dest} is not a directory"}
    (dest / "pkg").mkdir(parents=True, mode=0o750)
    dest.chmod(0o750)
    (dest / "pkg").chmod(0o750)
    for name, data in files.items():
        (dest / name).write_bytes(data)
        (dest / name).chmod(0o640)
    assert state.in_place_report(params) == {"in_place": True, "dest": str(dest)}
    me = os.getuid()
    assert state.in_place_report({**params, "owner": str(me), "group": str(os.getgid())})[
        "in_place"]

    (dest / "pkg" / "b.py").chmod(0o600)
    assert state.in_place_report(params)["why"] == "pkg/b.py's owner or mode"
    (dest / "pkg" / "b.py").chmod(0o640)
    (dest / "pkg").chmod(0o755)
    assert state.in_place_report(params)["why"] == f"{dest}/pkg's owner or mode"
    (dest / "pkg").chmod(0o750)
    (dest / "a.py").write_bytes(b"A = 2\n")
    assert state.in_place_report(params)["why"] == "1 files differ"
    (dest / "a.py").write_bytes(files["a.py"])
    assert state.in_place_report({**params, "owner": str(me + 1)})["why"] == (
        f"{dest}'s owner or mode")
    assert state.in_place_report({**params, "owner": "no-such-user"})["why"] == (
        "no user no-such-user here")
    assert state.in_place_report({**params, "group": "no-such-group"})["why"] == (
        "no group no-such-group here")
    assert state.in_place_report({**params, "mode": "u=rw,g=r"})["why"] == "a symbolic mode"
    # The module's defaults where the task gives no mode: 0644 files, 0755 directories.
    assert state.in_place_report({**params, "mode": None})["why"] == "a.py's owner or mode"
    assert state.in_place_report({**params, "directory_mode": None})["why"] == (
        f"{dest}'s owner or mode")


@pytest.mark.parametrize(("mode", "bits"), [
    ("0644", 0o644), ("755", 0o755), ("01777", 0o1777), (0o600, 0o600),
    ("u=rw,g=r,o=", None), ("0999", None), (True, None), (None, None)])
def test_octal_mode_reads_a_mode_as_ansible_module_does(mode: object, bits: int | None) -> None:
    assert state.octal_mode(mode) == bits


def test_the_program_sent_to_the_target_prints_its_report(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    params = {key: value for key, value in in_place_params(dest, {"a.py": b"A"}).items()
              if key in action.IN_PLACE_PARAMS}
    text = host_state.program((REPO / "module_utils" / "sync_tree_state.py").read_text(),
                              "in_place_report", params)
    ran = subprocess.run([sys.executable, "-"], input=text, capture_output=True, text=True,
                         check=True)
    assert host_state.last_json(ran.stdout) == {
        "in_place": False, "dest": str(dest), "why": f"{dest} is not a directory"}
    # What the module's arguments hold besides (the source, the secrets) stays home.
    assert set(action.IN_PLACE_PARAMS) == {"dest", "manifest", "owner", "group", "mode",
                                           "directory_mode"}



# --- playbook runs ----------------------------------------------------------------------

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Sync
      sync_tree: "{{ sync_args }}"
      register: synced
    - name: Show
      ansible.builtin.debug:
        msg: "SYNCED {{ synced | to_json }}"
"""


def run_sync(tmp_path: Path, args: dict, *extra: str) -> tuple[int, dict | None, str]:
    playbook = tmp_path / "sync.yml"
    playbook.write_text(PLAYBOOK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_STDOUT_CALLBACK="json",
    )
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            json.dumps({"sync_args": args, "ansible_python_interpreter": sys.executable}),
            *extra,
            str(playbook),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    report = json.loads(run.stdout)
    results = report["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return run.returncode, results, run.stdout


def test_first_run_ships_second_changes_nothing_then_only_the_difference(
    tree: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"
    args = {"src": str(tree), "dest": str(dest), "mode": "0640", "directory_mode": "0750"}

    rc, first, _ = run_sync(tmp_path, args)
    assert rc == 0 and first["changed"] is True
    assert first["updated"] == ["pkg/a.py", "pkg/sub/b.bin", "top.py"] and first["files"] == 3
    assert (dest / "pkg" / "sub" / "b.bin").read_bytes() == (
        tree / "pkg" / "sub" / "b.bin"
    ).read_bytes()
    assert not (dest / "pkg" / "__pycache__").exists() and not (dest / "stray.pyc").exists()
    assert oct((dest / "top.py").stat().st_mode & 0o777) == "0o640"
    assert oct((dest / "pkg" / "sub").stat().st_mode & 0o777) == "0o750"

    rc, second, _ = run_sync(tmp_path, args)
    assert rc == 0 and second["changed"] is False and second["updated"] == []

    untouched = (dest / "pkg" / "sub" / "b.bin").stat().st_ino
    (dest / "pkg" / "a.py").write_text("A = 2  # edited on the node\n")
    (dest / "top.py").chmod(0o600)
    rc, third, _ = run_sync(tmp_path, args)
    assert rc == 0 and third["changed"] is True and third["updated"] == ["pkg/a.py"]
    assert (dest / "pkg" / "a.py").read_text() == "A = 1\n"
    assert oct((dest / "top.py").stat().st_mode & 0o777) == "0o640"
    assert (dest / "pkg" / "sub" / "b.bin").stat().st_ino == untouched


def sync_tree_module_runs(tmp_path: Path, args: dict) -> int:
    """Runs of the sync_tree module in one playbook run (at -vvv Ansible names the module
    file of every module run); the run must succeed."""
    playbook = tmp_path / "sync.yml"
    playbook.write_text(PLAYBOOK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-vvv", "-i", "localhost,",
         "-c", "local", "-e",
         json.dumps({"sync_args": args, "ansible_python_interpreter": sys.executable}),
         str(playbook)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)
    assert run.returncode == 0, run.stdout[-3000:]
    return run.stdout.count(f"Using module file {REPO / 'library' / 'sync_tree.py'}")


def test_a_tree_in_place_costs_no_module_run(tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    args = {"src": str(tree), "dest": str(dest), "mode": "0640", "directory_mode": "0750"}
    # Missing: the module compares, then writes what the plugin sent.
    assert sync_tree_module_runs(tmp_path, args) == 2
    assert sync_tree_module_runs(tmp_path, args) == 0
    (dest / "top.py").chmod(0o600)  # a mode alone differs: the module sets it
    assert sync_tree_module_runs(tmp_path, args) == 1
    assert oct((dest / "top.py").stat().st_mode & 0o777) == "0o640"
    assert sync_tree_module_runs(tmp_path, args) == 0


def test_content_is_written_like_files_and_never_reaches_the_module_arguments(
    tmp_path: Path
) -> None:
    dest = tmp_path / "etc"
    texts = {"a.env": "TOKEN=s3cret-of-the-test\n", "b.service": "[Unit]\n"}
    args = {"content": texts, "dest": str(dest), "mode": "0600"}
    rc, first, _ = run_sync(tmp_path, args)
    assert rc == 0 and first["changed"] is True and first["updated"] == ["a.env", "b.service"]
    assert (dest / "a.env").read_text() == texts["a.env"]
    assert oct((dest / "a.env").stat().st_mode & 0o777) == "0o600"
    # What the module was given: the hashes, not the texts.
    assert "s3cret-of-the-test" not in json.dumps(first["invocation"])
    assert first["invocation"]["module_args"]["content"] is None

    rc, second, _ = run_sync(tmp_path, args)
    assert rc == 0 and second["changed"] is False and second["updated"] == []
    rc, third, _ = run_sync(tmp_path, args | {"content": texts | {"b.service": "[Unit]\n#\n"}})
    assert rc == 0 and third["updated"] == ["b.service"]
    assert (dest / "b.service").read_text() == "[Unit]\n#\n"


@pytest.mark.parametrize(("args", "message"), [
    ({"dest": "/tmp/x"}, "sync_tree: dest is required, and one of src or content"),
    ({"dest": "/tmp/x", "src": "/tmp", "content": {"a": "b"}},
     "sync_tree: dest is required, and one of src or content"),
    ({"dest": "/tmp/x", "content": {"../a": "b"}},
     "sync_tree: content key '../a' must be a path relative to dest, without '..'"),
])
def test_src_or_content_and_their_errors(tmp_path: Path, args: dict, message: str) -> None:
    rc, result, _ = run_sync(tmp_path, args)
    assert rc == 2 and result["msg"] == message


def test_check_mode_reports_and_writes_nothing(tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    rc, result, _ = run_sync(
        tmp_path, {"src": str(tree), "dest": str(dest), "files": ["top.py"]}, "--check"
    )
    assert rc == 0 and result["changed"] is True and result["updated"] == ["top.py"]
    assert not dest.exists()


def test_check_mode_with_diff_shows_each_file_with_its_secrets_masked(tmp_path: Path) -> None:
    dest = tmp_path / "etc"
    dest.mkdir()
    old = 'A="1"\nPASS="old-password-of-the-test"\nTOKEN="token-of-the-test"\n'
    (dest / "a.env").write_text(old)
    new = 'A="2"\nPASS="new-password-of-the-test"\nTOKEN="token-of-the-test"\n'
    secrets = ["old-password-of-the-test", "new-password-of-the-test", "token-of-the-test"]
    args = {"content": {"a.env": new, "b.service": "[Unit]\n"}, "dest": str(dest),
            "secrets": secrets, "mode": "0600"}
    rc, result, stdout = run_sync(tmp_path, args, "--check", "--diff")
    assert rc == 0 and result["changed"] is True and result["updated"] == ["a.env", "b.service"]
    assert result["diff"] == [
        {"before_header": f"{dest}/a.env", "after_header": f"{dest}/a.env",
         "before": 'A="1"\nPASS="********"\nTOKEN="********"\n',
         "after": 'A="2"\nPASS="********"\nTOKEN="********"\n'},
        {"before_header": f"{dest}/b.service", "after_header": f"{dest}/b.service",
         "before": "", "after": "[Unit]\n"}]
    assert not any(secret in stdout for secret in secrets)
    assert (dest / "a.env").read_text() == old and not (dest / "b.service").exists()

    # For real, the same diff, and the files written.
    rc, result, _ = run_sync(tmp_path, args, "--diff")
    assert rc == 0 and [entry["after"] for entry in result["diff"]] == [
        'A="2"\nPASS="********"\nTOKEN="********"\n', "[Unit]\n"]
    assert (dest / "a.env").read_text() == new
    rc, result, _ = run_sync(tmp_path, args, "--diff")
    assert rc == 0 and result["changed"] is False and "diff" not in result


def test_a_missing_file_fails_with_what_to_fix(tree: Path, tmp_path: Path) -> None:
    rc, result, _ = run_sync(
        tmp_path, {"src": str(tree), "dest": str(tmp_path / "d"), "files": ["nope.py"]}
    )
    assert rc == 2 and result["failed"] is True
    assert result["msg"] == f"sync_tree: 'nope.py' is not a file in {tree}; fix files or src"


# --- documentation ----------------------------------------------------------------------


def test_documentation_matches_the_argument_spec_and_the_results(
    tree: Path, tmp_path: Path
) -> None:
    doc = module_doc("sync_tree")
    assert_options_documented(doc, module.ARGUMENT_SPEC)
    assert tuple(module.ARGUMENT_SPEC["exclude"]["default"]) == action.DEFAULT_EXCLUDE
    rc, result, _ = run_sync(tmp_path, {"src": str(tree), "dest": str(tmp_path / "d")})
    assert rc == 0
    # Ansible and the json callback add these (and the attributes of dest, as for copy); the
    # warning is the test playbook's args given as one template.
    added = {"changed", "invocation", "_ansible_no_log", "uid", "gid", "owner", "group", "mode"}
    added |= {"state", "size", "path", "secontext", "action", "warnings"}
    assert sorted(doc["return"]) == sorted(set(result) - added)
