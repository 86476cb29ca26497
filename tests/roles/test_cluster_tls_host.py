"""cluster_tls on a Mac: the CA certificate belongs to the login user and its primary group.

A Mac runs the role without become and has no group root (gid 0 is wheel), so a chown to
root:root fails there with EPERM. No Mac here: the play poses as one (faked facts naming a
login user other than the one running the test, here `nobody`), and the file must end up
owned by that user and its primary group, with no module asked for root or wheel.
"""

from __future__ import annotations

import grp
import json
import pwd
import re
import stat
import sys
from pathlib import Path

from .conftest import HERE, run
from .test_worker_darwin import asked_for_root, changed

PLAYBOOK = HERE / "playbooks" / "cluster_tls_host.yml"
LOGIN = pwd.getpwnam("nobody")


def play(tmp_path: Path, os_family: str, user: str, gid: int) -> str:
    extra = {"test_dir": str(tmp_path), "test_os_family": os_family, "test_user": user,
             "test_gid": gid, "ansible_python_interpreter": sys.executable}
    # -vvv: every module's arguments, searched for a root or wheel owner.
    result = run(["ansible-playbook", "-vvv", str(PLAYBOOK), "-i", "localhost,",
                  "-e", json.dumps(extra)])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def ca_dir(tmp_path: Path) -> Path:
    (tmp_path / "ca").mkdir()
    (tmp_path / "ca" / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    return tmp_path / "tls"


def test_a_mac_owns_the_ca_certificate_as_its_login_user(tmp_path):
    tls = ca_dir(tmp_path)
    output = play(tmp_path, "Darwin", LOGIN.pw_name, LOGIN.pw_gid)
    for path, mode in ((tls, 0o755), (tls / "ca.crt", 0o644)):
        info = path.stat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (
            LOGIN.pw_uid, LOGIN.pw_gid, mode), path
    assert asked_for_root(output) == []
    assert not re.search(r"EXEC .*\bsudo\b", output)  # and nothing ran through sudo
    assert changed(play(tmp_path, "Darwin", LOGIN.pw_name, LOGIN.pw_gid)) == 0


def test_linux_keeps_root_ownership(tmp_path):
    tls = ca_dir(tmp_path)
    output = play(tmp_path, "Debian", "root", 0)
    info = (tls / "ca.crt").stat()
    assert (pwd.getpwuid(info.st_uid).pw_name, grp.getgrgid(info.st_gid).gr_name) == (
        "root", "root")
    # The search the Mac's test relies on finds them.
    assert sorted(asked_for_root(output)) == ["group: root", "owner: root"]
