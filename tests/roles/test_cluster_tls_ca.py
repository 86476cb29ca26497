"""cluster_tls's CA on the controller: made once, then only read; a wrong passphrase fails
and leaves the CA as it is.

The community.crypto modules' own default (``regenerate: full_idempotence``) makes a new key
when the existing one does not open with the passphrase given: a mistyped vault passphrase
would silently replace the cluster's CA, and every certificate with it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from .conftest import HERE, run
from .test_worker_darwin import changed

PLAYBOOK = HERE / "playbooks" / "cluster_tls_ca.yml"
PASSPHRASE = "a passphrase of the test's own"


def play(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    extra = {"test_dir": str(tmp_path), "cluster_tls_ca_passphrase": PASSPHRASE,
             "ansible_python_interpreter": sys.executable, **variables}
    # -vvv: each module the run starts is named (AnsiballZ_<module>.py).
    return run(["ansible-playbook", "-vvv", str(PLAYBOOK), "-i", "localhost,",
                "-e", json.dumps(extra)])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def subject(path: Path) -> str:
    return subprocess.run(["openssl", "x509", "-noout", "-subject", "-in", str(path)],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_ca_is_made_once_then_read_without_a_module_run(tmp_path):
    made = play(tmp_path)
    assert made.returncode == 0, made.stdout[-4000:]
    key, cert = tmp_path / "ca" / "ca.key", tmp_path / "ca" / "ca.crt"
    assert subject(cert) == "subject=CN = coordinator-cluster CA"
    before = (digest(key), digest(cert))

    again = play(tmp_path)
    assert again.returncode == 0, again.stdout[-4000:]
    assert changed(again.stdout) == 0
    assert "AnsiballZ_" not in again.stdout  # no module ran
    assert (digest(key), digest(cert)) == before

    # Another CA name: the certificate is made again, on the same key.
    renamed = play(tmp_path, cluster_tls_ca_name="another cluster CA")
    assert renamed.returncode == 0, renamed.stdout[-4000:]
    assert changed(renamed.stdout) == 1
    assert subject(cert) == "subject=CN = another cluster CA"
    assert digest(key) == before[0]


def test_a_wrong_passphrase_fails_and_keeps_the_cas_key(tmp_path):
    assert play(tmp_path).returncode == 0
    key, cert = tmp_path / "ca" / "ca.key", tmp_path / "ca" / "ca.crt"
    kept = digest(key)
    # With the certificate gone the CA's tasks run, and the key does not open.
    cert.unlink()
    wrong = play(tmp_path, cluster_tls_ca_passphrase="not the passphrase of the key")
    assert wrong.returncode != 0
    assert ("Unable to read the key. The key is protected with a another passphrase / no "
            "passphrase or broken. Will not proceed.") in wrong.stdout, wrong.stdout[-4000:]
    assert digest(key) == kept and not cert.exists()
