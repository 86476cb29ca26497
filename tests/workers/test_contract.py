"""What ties the workers to the rest of the project, checked without any server."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import worker_base
import worker_infer
import worker_web
import yaml

from coordinator import routing

from .conftest import FILES, REPO


def test_each_worker_serves_the_queues_routing_sends_its_task_types_to() -> None:
    # Both sides read coordinator_contract; this checks how each program uses it.
    web = worker_web.WebWorker.__new__(worker_web.WebWorker)
    assert web.queues == [routing.ROUTES["web_search"].queue]
    assert set(worker_web.TASK_TYPES) == {t for t, r in routing.ROUTES.items() if r.kind == "web"}
    assert set(worker_infer.TASK_TYPES) == {t for t, r in routing.ROUTES.items()
                                            if r.kind == worker_infer.InferenceWorker.kind}


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


def test_worker_dependencies_are_pinned_for_the_node() -> None:
    pinned = {line.split("==")[0] for line in
              (FILES / "requirements-worker.txt").read_text().splitlines()
              if "==" in line and not line.startswith("#")}
    # The files the worker role ships beside the programs import each other.
    files = yaml.safe_load((REPO / "roles/worker/defaults/main.yml").read_text())["worker_files"]
    imported = set().union(*map(_imported_modules, files)) - set(sys.stdlib_module_names)
    packages = {"psycopg2": "psycopg2-binary"}
    shipped = {Path(name).stem for name in files}
    assert {packages.get(m, m) for m in imported - shipped} <= pinned


def test_missing_variables_are_all_named() -> None:
    with pytest.raises(worker_base.ConfigError) as error:
        worker_web.WebConfig.from_env({"REDIS_HOST": "r", "PG_DSN": "host=db",
                                       "WORKER_ID": "w", "WORKER_HOST": "h"})
    assert str(error.value) == ("missing required environment variables: COORDINATOR_URL, "
                                "SEARXNG_URL, OLLAMA_HOST, OLLAMA_MODEL "
                                "(see docs/workers.md)")


WEB_ENV = dict.fromkeys(("REDIS_HOST", "PG_DSN", "SEARXNG_URL", "OLLAMA_HOST", "OLLAMA_MODEL",
                         "COORDINATOR_URL", "WORKER_ID", "WORKER_HOST"), "x")


def test_bad_timeout_is_named() -> None:
    env = WEB_ENV | {"OLLAMA_TIMEOUT": "soon"}
    with pytest.raises(worker_base.ConfigError) as error:
        worker_web.WebConfig.from_env(env)
    assert str(error.value) == "OLLAMA_TIMEOUT must be a number of seconds, got 'soon'"


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_a_summary_limit_that_is_not_a_positive_count_is_named(value: str) -> None:
    with pytest.raises(worker_base.ConfigError) as error:
        worker_web.WebConfig.from_env(WEB_ENV | {"SUMMARY_MAX_TOKENS": value})
    assert str(error.value) == f"SUMMARY_MAX_TOKENS must be a positive whole number, got {value!r}"


def test_ollama_host_without_scheme_is_accepted() -> None:
    env = WEB_ENV | {"OLLAMA_HOST": "localhost:11434/"}
    assert worker_web.WebConfig.from_env(env).ollama_host == "http://localhost:11434"


def test_redis_port_is_range_checked() -> None:
    with pytest.raises(worker_base.ConfigError) as error:
        worker_web.WebConfig.from_env(WEB_ENV | {"REDIS_PORT": "70000"})
    assert str(error.value) == "REDIS_PORT must be a port number, got '70000'"


def test_dsn_password_is_masked() -> None:
    dsn = "host=192.168.0.40 dbname=coordinator user=coordinator password=s3cret"
    shown = worker_base.masked_dsn(dsn)
    assert "s3cret" not in shown
    assert "password=***" in shown and "host=192.168.0.40" in shown
    assert "s3cret" not in worker_base.masked_dsn("postgresql://coordinator:s3cret@db/coordinator")


@pytest.mark.parametrize(("client", "line"), [
    ("192.168.0.43", "host coordinator coordinator 192.168.0.43/32 scram-sha-256"),
    ("fd00::43", "host coordinator coordinator fd00::43/128 scram-sha-256"),
])
def test_pg_hba_line_is_built_from_the_servers_message(client: str, line: str) -> None:
    error = (f'connection to server at "192.168.0.40", port 5432 failed: FATAL: no pg_hba.conf '
             f'entry for host "{client}", user "coordinator", database "coordinator", no '
             "encryption")
    expected = f"fix: add `{line}` to pg_hba.conf on the PostgreSQL server, then reload it"
    assert worker_base.postgres_login_hint(error, "host=db", "ignored") == expected


def test_pg_hba_line_falls_back_to_worker_host() -> None:
    hint = worker_base.postgres_login_hint("FATAL: no pg_hba.conf entry for host",
                                          "host=db dbname=coordinator user=coordinator",
                                          "192.168.0.43")
    assert hint == ("fix: add `host coordinator coordinator 192.168.0.43/32 scram-sha-256` to "
                    "pg_hba.conf on the PostgreSQL server, then reload it")


def test_a_worker_hosts_login_refused_from_another_host_says_to_use_that_hosts_own() -> None:
    error = ('FATAL:  no pg_hba.conf entry for host "192.168.0.40", user "worker_macbookair", '
             'database "coordinator", no encryption')
    hint = worker_base.postgres_login_hint(error, "host=db", "ignored")
    assert hint == ("fix: worker_macbookair logs in from its own host only: on another host "
                    "use that host's own login (site.yml writes it to PG_DSN); if "
                    "192.168.0.40 is now worker_macbookair's host, run site.yml, which adds "
                    "`host coordinator worker_macbookair 192.168.0.40/32 scram-sha-256` to "
                    "pg_hba.conf")


def test_model_names_without_tag_mean_latest() -> None:
    assert worker_base.has_model(["llama3.2:latest"], "llama3.2")
    assert worker_base.has_model(["hf.co/a/b:Q4_K_M"], "hf.co/A/b:Q4_K_M")
    assert not worker_base.has_model(["llama3.2:3b"], "llama3.2")
