"""What ties the workers to the rest of the project, checked without any server."""

from __future__ import annotations

import ast
import inspect
import sys

import pytest
import worker_base
import worker_infer
import worker_web

from coordinator import routing

from .conftest import FILES

SHARED_SQL = ("CLAIM_SQL", "RECLAIM_SQL", "RESULT_SQL", "STATE_SQL", "WRITE_CHECK_SQL",
              "LOCK_SQL", "HOLDER_SQL", "LOCK_SESSION_OPTIONS")


def test_web_queue_is_the_coordinators_routing_table_value() -> None:
    assert routing.ROUTES["web_search"].queue == worker_web.QUEUE
    assert routing.ROUTES["web_search"].kind == worker_web.KIND
    assert worker_web.TASK_TYPE == "web_search"
    assert worker_web.RESULT_WORKER == routing.WEB_RESULT_WORKER


def test_inference_task_types_are_the_routed_ones() -> None:
    assert set(worker_infer.TASK_TYPES) == set(routing.INFERENCE_TYPES)
    assert worker_infer.InferenceWorker.kind == routing.ROUTES["generate"].kind


@pytest.mark.parametrize("name", SHARED_SQL)
def test_duplicated_sql_is_identical_in_worker_web_and_worker_base(name: str) -> None:
    assert getattr(worker_web, name) == getattr(worker_base, name)


# worker_web.py's own versions of these differ from worker_base.py's on purpose.
WEB_OWN_METHODS = {"__init__", "start", "register", "execute", "result_worker"}


def _shared_names(web: dict, base: dict) -> list[str]:
    return sorted(name for name, obj in web.items()
                  if name in base and (inspect.isfunction(obj) or inspect.isclass(obj))
                  and getattr(obj, "__module__", "worker_web") == "worker_web"
                  and name not in WEB_OWN_METHODS | {"main"})


@pytest.mark.parametrize("name", _shared_names(vars(worker_web), vars(worker_base)))
def test_duplicated_helpers_are_identical(name: str) -> None:
    assert inspect.getsource(getattr(worker_web, name)) == \
        inspect.getsource(getattr(worker_base, name))


@pytest.mark.parametrize("name", _shared_names(vars(worker_web.WebWorker),
                                               vars(worker_base.Worker)))
def test_duplicated_worker_methods_are_identical(name: str) -> None:
    """worker_web.py is shipped alone, so it repeats worker_base.py's machinery; this keeps
    the two copies from drifting apart."""
    assert inspect.getsource(getattr(worker_web.WebWorker, name)) == \
        inspect.getsource(getattr(worker_base.Worker, name))


def _imported_modules(path: str) -> set[str]:
    tree = ast.parse((FILES / path).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import in {path}"
            names.add(node.module.split(".")[0])
    return names


def test_worker_web_imports_no_project_module() -> None:
    third_party = _imported_modules("worker_web.py") - set(sys.stdlib_module_names)
    assert third_party == {"psycopg2", "redis", "requests"}


def test_worker_dependencies_are_pinned_for_the_node() -> None:
    pinned = {line.split("==")[0] for line in
              (FILES / "requirements-worker.txt").read_text().splitlines()
              if "==" in line and not line.startswith("#")}
    imported = (_imported_modules("worker_web.py") | _imported_modules("worker_base.py")
                | _imported_modules("worker_infer.py")) - set(sys.stdlib_module_names)
    packages = {"psycopg2": "psycopg2-binary"}
    assert {packages.get(m, m) for m in imported - {"worker_base"}} <= pinned


def test_missing_variables_are_all_named() -> None:
    with pytest.raises(worker_web.ConfigError) as error:
        worker_web.Config.from_env({"REDIS_HOST": "r", "PG_DSN": "host=db",
                                    "WORKER_ID": "w", "WORKER_HOST": "h"})
    assert str(error.value) == ("missing required environment variables: SEARXNG_URL, "
                                "OLLAMA_HOST, OLLAMA_MODEL, COORDINATOR_URL "
                                "(see docs/workers.md)")


def test_bad_timeout_is_named() -> None:
    env = dict.fromkeys(worker_web.REQUIRED_ENV, "x") | {"OLLAMA_TIMEOUT": "soon"}
    with pytest.raises(worker_web.ConfigError) as error:
        worker_web.Config.from_env(env)
    assert str(error.value) == "OLLAMA_TIMEOUT must be a number of seconds, got 'soon'"


def test_ollama_host_without_scheme_is_accepted() -> None:
    env = dict.fromkeys(worker_web.REQUIRED_ENV, "x") | {"OLLAMA_HOST": "localhost:11434/"}
    assert worker_web.Config.from_env(env).ollama_host == "http://localhost:11434"


def test_dsn_password_is_masked() -> None:
    dsn = "host=192.168.0.40 dbname=coordinator user=coordinator password=s3cret"
    shown = worker_web.masked_dsn(dsn)
    assert "s3cret" not in shown
    assert "password=***" in shown and "host=192.168.0.40" in shown
    assert "s3cret" not in worker_web.masked_dsn("postgresql://coordinator:s3cret@db/coordinator")


@pytest.mark.parametrize(("client", "line"), [
    ("192.168.0.43", "host coordinator coordinator 192.168.0.43/32 scram-sha-256"),
    ("fd00::43", "host coordinator coordinator fd00::43/128 scram-sha-256"),
])
def test_pg_hba_line_is_built_from_the_servers_message(client: str, line: str) -> None:
    error = (f'connection to server at "192.168.0.40", port 5432 failed: FATAL: no pg_hba.conf '
             f'entry for host "{client}", user "coordinator", database "coordinator", no '
             "encryption")
    expected = f"fix: add `{line}` to pg_hba.conf on the PostgreSQL server, then reload it"
    assert worker_web.postgres_login_hint(error, "host=db", "ignored") == expected


def test_pg_hba_line_falls_back_to_worker_host() -> None:
    hint = worker_web.postgres_login_hint("FATAL: no pg_hba.conf entry for host",
                                          "host=db dbname=coordinator user=coordinator",
                                          "192.168.0.43")
    assert hint == ("fix: add `host coordinator coordinator 192.168.0.43/32 scram-sha-256` to "
                    "pg_hba.conf on the PostgreSQL server, then reload it")


def test_model_names_without_tag_mean_latest() -> None:
    assert worker_web.has_model(["llama3.2:latest"], "llama3.2")
    assert worker_web.has_model(["hf.co/a/b:Q4_K_M"], "hf.co/A/b:Q4_K_M")
    assert not worker_web.has_model(["llama3.2:3b"], "llama3.2")
