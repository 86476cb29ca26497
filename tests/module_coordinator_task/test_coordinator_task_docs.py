"""DOCUMENTATION, EXAMPLES and RETURN of coordinator_task agree with the code.

The documentation is read as ``ansible-doc --json`` parses it; the argument spec and the
returned keys come from the module and module_utils themselves.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from coordinator_task_harness import PYTHON, REPO

import module_utils.coordinator_pg
import module_utils.coordinator_probe
from module_utils.coordinator_probe import TaskRow, result_fields


@pytest.fixture(scope="module")
def doc() -> dict:
    out = subprocess.run(
        [str(Path(PYTHON).parent / "ansible-doc"), "-M", str(REPO / "library"), "--json",
         "coordinator_task"],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout)["coordinator_task"]


@pytest.fixture(scope="module")
def module() -> ModuleType:
    """library/coordinator_task.py imported with its module_utils where Ansible puts them."""
    saved = {name: sys.modules.get(name) for name in (
        "ansible.module_utils.coordinator_probe", "ansible.module_utils.coordinator_pg")}
    sys.modules["ansible.module_utils.coordinator_probe"] = module_utils.coordinator_probe
    sys.modules["ansible.module_utils.coordinator_pg"] = module_utils.coordinator_pg
    try:
        spec = importlib.util.spec_from_file_location(
            "coordinator_task_module", REPO / "library" / "coordinator_task.py")
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return loaded
    finally:
        for name, value in saved.items():
            if value is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = value


def test_every_option_is_documented_as_coded(doc, module):
    spec = module.argument_spec()
    options = doc["doc"]["options"]
    assert sorted(options) == sorted(spec)
    for name, coded in spec.items():
        documented = options[name]
        assert documented["type"] == coded["type"], name
        assert documented.get("default") == coded.get("default"), name
        assert documented.get("choices") == coded.get("choices"), name
        assert bool(documented.get("required")) == bool(coded.get("required")), name


def test_secrets_are_no_log(module):
    spec = module.argument_spec()
    assert {name for name, option in spec.items() if option.get("no_log")} == {
        "coordinator_token", "login_password", "pg_dsn",
    }


def test_examples_use_only_real_options(doc, module):
    spec = module.argument_spec()
    tasks = yaml.safe_load(doc["examples"])
    probes = [task["coordinator_task"] for task in tasks if "coordinator_task" in task]
    assert len(probes) == 3
    for args in probes:
        assert set(args) <= set(spec), set(args) - set(spec)
        assert {name for name, option in spec.items() if option.get("required")} <= set(args)


def test_return_documents_every_returned_key(doc):
    now = datetime.now(UTC)
    row = TaskRow("id", "web_search", "done", "tasks:web", "web-worker", "w", "h", "answer",
                  False, None, now, now, now)
    assert set(result_fields(row)) | {"msg"} == set(doc["return"])
