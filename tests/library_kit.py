"""What the tests of the modules of library/ share: their documentation as ansible-doc reads
it, the module imported as code (tests/conftest.py makes module_utils importable where
Ansible puts them), and the environment that runs them through Ansible."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
ANSIBLE_DOC = VENV_BIN / "ansible-doc"


def module_env(workdir: Path, **extra: str) -> dict[str, str]:
    """Ansible run from ``workdir`` with this repository's modules and plugins (as its
    ansible.cfg names them: the roles use its action and filter plugins) and the JSON
    callback, and none of this environment's ANSIBLE_* settings or any ansible.cfg (an empty
    one of its own), so a developer's configuration cannot change what a test sees."""
    config = workdir / "ansible.cfg"
    config.write_text("[defaults]\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update({
        "ANSIBLE_CONFIG": str(config),
        "ANSIBLE_HOME": str(workdir / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp"),
        "ANSIBLE_LIBRARY": str(REPO / "library"),
        "ANSIBLE_MODULE_UTILS": str(REPO / "module_utils"),
        "ANSIBLE_ACTION_PLUGINS": str(REPO / "action_plugins"),
        "ANSIBLE_FILTER_PLUGINS": str(REPO / "filter_plugins"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "true",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_NOCOLOR": "true",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    })
    env.update(extra)
    return env


def module_doc(name: str) -> dict:
    """A module's DOCUMENTATION, EXAMPLES and RETURN as ``ansible-doc --json`` parses them."""
    out = subprocess.run(
        [str(ANSIBLE_DOC), "-M", str(REPO / "library"), "--json", name],
        capture_output=True, text=True, check=True,
        env={**os.environ, "ANSIBLE_DOC_FRAGMENT_PLUGINS": str(REPO / "doc_fragments")},
    )
    return json.loads(out.stdout)[name]


def assert_options_documented(doc: dict, spec: dict) -> None:
    """A module's documented options are ``spec``: the same names, types, defaults and
    required flags."""
    options = doc["doc"]["options"]
    assert sorted(options) == sorted(spec)
    for name, coded in spec.items():
        assert options[name]["type"] == coded["type"], name
        assert options[name].get("default") == coded.get("default"), name
        assert options[name].get("required", False) == coded.get("required", False), name


def load_module(name: str) -> ModuleType:
    """library/<name>.py imported (tests/conftest.py makes module_utils importable where
    Ansible puts them)."""
    spec = importlib.util.spec_from_file_location(f"{name}_module",
                                                  REPO / "library" / f"{name}.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded  # dataclasses look their module up there
    spec.loader.exec_module(loaded)
    return loaded


def documented_as_coded(name: str) -> dict:
    """Assert that a module's documented options are its argument_spec (type, default,
    choices) and that its EXAMPLES use only those; return its documentation."""
    doc = module_doc(name)
    spec = load_module(name).argument_spec()
    options = doc["doc"]["options"]
    assert sorted(options) == sorted(spec)
    for option, coded in spec.items():
        assert options[option]["type"] == coded["type"], option
        assert options[option].get("default") == coded.get("default"), option
        assert options[option].get("choices") == coded.get("choices"), option
    for task in yaml.safe_load(doc["examples"]):
        if name in task:
            assert set(task[name]) <= set(spec)
    return doc


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free loopback port in a thread: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
