"""``ansible-test sanity``, as a collection reviewer runs it, over the modules, module_utils,
action and filter plugins (collection.py builds the tree it needs): every test it has for
Python 3.11, validate-modules, pylint, pep8, compile and import among them, passes.

ansible-test installs each test's pinned requirements (those of the pinned ansible-core) into
virtualenvs of its own under a private HOME kept in .lab/ between runs; the pip bootstrap it
would download from a host the test machines cannot reach comes from get_pip.py.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from lab.drive import VENV_BIN

from .collection import (
    NAME,
    NAMESPACE,
    PACKAGE,
    REPO,
    build,
    collection_fragments,
    collection_source,
)

HOME = REPO / ".lab" / "ansible-test"
PYTHON = "3.11"
#: How long ``ansible-test sanity`` may take; the test, also building the collection, a minute
#: more (pytest's default timeout, 300 s in pyproject.toml, would cut it short).
SANITY_TIMEOUT = 1200


# Asked in a child process: importing ansible_test lowers the importing process's soft
# open-file limit to 1024, which every program the later tests start would inherit.
PIP_VERSION = (
    "from ansible_test._internal.host_configs import NativePythonConfig\n"
    "from ansible_test._internal.python_requirements import get_venv_packages\n"
    f"print(get_venv_packages(NativePythonConfig(version={PYTHON!r}, path='python'))['pip'])")


def seed_pip_bootstrap(home: Path) -> None:
    pip = subprocess.run([VENV_BIN / "python", "-c", PIP_VERSION], check=True,
                         capture_output=True, text=True).stdout.strip()
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).with_name("get_pip.py"),
                cache / f"get_pip_{pip.replace('.', '_')}.py")


def write_pip_config(home: Path) -> None:
    """This environment's PIP_* settings (its index, CA, wheel directory), as the private
    HOME's pip.conf: ansible-test runs pip with nothing of the environment but HOME and PATH."""
    settings = sorted((key[4:].lower().replace("_", "-"), value)
                      for key, value in os.environ.items() if key.startswith("PIP_"))
    config = home / ".config" / "pip" / "pip.conf"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[global]\n" + "".join(f"{key} = {value}\n" for key, value in settings))


def test_our_module_utils_imports_become_the_collection_package():
    source = ("from ansible.module_utils.basic import AnsibleModule\n"
              "from ansible.module_utils.coordinator_probe import first_line\n")
    assert collection_source(source, {"coordinator_probe"}) == (
        "from ansible.module_utils.basic import AnsibleModule\n"
        f"from {PACKAGE}.coordinator_probe import first_line\n")


def test_our_doc_fragments_become_the_collection_names():
    source = ("extends_documentation_fragment:\n  - coordinator_api\n  - other.ns.frag\n"
              "options:\n  - coordinator_api\n")
    assert collection_fragments(source, {"coordinator_api"}) == (
        f"extends_documentation_fragment:\n  - {NAMESPACE}.{NAME}.coordinator_api\n"
        "  - other.ns.frag\noptions:\n  - coordinator_api\n")


def test_ansible_core_is_pinned_to_the_one_installed():
    # ansible pins only a range of ansible-core; the sanity tests' requirements are those of
    # the ansible-core release, so requirements-dev.txt names the one they ran with.
    pins = dict(line.split("==") for line in
                (REPO / "requirements-dev.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    core = importlib.metadata.version("ansible-core")
    assert (pins.get("ansible"), pins.get("ansible-core")) == (
        importlib.metadata.version("ansible"), core)
    wanted = [Requirement(text) for text in importlib.metadata.requires("ansible") or ()]
    assert all(core in want.specifier for want in wanted if want.name == "ansible-core")


@pytest.mark.timeout(SANITY_TIMEOUT + 60)
def test_ansible_test_sanity_passes(tmp_path):
    collection = build(tmp_path)
    seed_pip_bootstrap(HOME)
    write_pip_config(HOME)
    result = subprocess.run(
        [str(VENV_BIN / "ansible-test"), "sanity", "--local", "--python", PYTHON,
         "--color", "no"],
        cwd=collection, env={"HOME": str(HOME), "PATH": f"{VENV_BIN}:/usr/bin:/bin",
                             "LC_ALL": "C.UTF-8"},
        capture_output=True, text=True, check=False, timeout=SANITY_TIMEOUT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    # Every test ran; none was skipped for a missing tool or requirement.
    assert "Running sanity test \"validate-modules\"" in output
    assert "Running sanity test \"pylint\"" in output
    assert "Skipping" not in output, output[-8000:]
