"""DOCUMENTATION, EXAMPLES and RETURN of coordinator_task agree with the code.

The documentation is read as ``ansible-doc --json`` parses it; the argument spec and the
returned keys come from the module and module_utils themselves.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import ModuleType

import pytest
import yaml

from module_utils.coordinator_probe import TaskRow, result_fields

from ..library_kit import load_module, module_doc


@pytest.fixture(scope="module")
def doc() -> dict:
    return module_doc("coordinator_task")


@pytest.fixture(scope="module")
def module() -> ModuleType:
    return load_module("coordinator_task")


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
