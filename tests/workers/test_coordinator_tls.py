"""A worker and a Coordinator that serves HTTPS (the coordinator role with the cluster's
certificate): the worker verifies the certificate against COORDINATOR_CA_FILE, and every
way of getting it wrong stops the start with the line that says what to fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import throwaway
from lab.throwaway import Certificates, ThrowawayPostgres, ThrowawayRedis

from .conftest import WAITING, Coordinator, WorkerFactory
from .test_web import error_of


@pytest.fixture(scope="module")
def cluster_certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return throwaway.make_certificates(tmp_path_factory.mktemp("coordinator-tls"))


@pytest.fixture(scope="module")
def https_coordinator(pg: ThrowawayPostgres, redis_server: ThrowawayRedis,
                      cluster_certificates: Certificates,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    with Coordinator(pg, redis_server, tmp_path_factory.mktemp("https-coordinator"),
                     tls=cluster_certificates) as coordinator:
        yield coordinator


def test_a_worker_registers_with_an_https_coordinator_it_verifies(
        web_env: dict[str, str], https_coordinator: Coordinator,
        start_worker: WorkerFactory) -> None:
    assert https_coordinator.ca_file is not None
    env = {**web_env, "COORDINATOR_URL": https_coordinator.url,
           "COORDINATOR_CA_FILE": https_coordinator.ca_file}
    worker = start_worker(env)
    worker.wait_for(WAITING)
    registered = https_coordinator.worker(env["WORKER_ID"])
    assert registered is not None and registered["alive"]


def _failed_start(start_worker: WorkerFactory, env: dict[str, str]) -> tuple[int, str]:
    worker = start_worker(env)
    return worker.wait_exit(60), error_of(worker)


def test_an_http_url_with_a_ca_file_is_refused_before_anything_is_sent(
        web_env: dict[str, str], https_coordinator: Coordinator,
        start_worker: WorkerFactory) -> None:
    plain = https_coordinator.url.replace("https://", "http://")
    code, error = _failed_start(start_worker, {
        **web_env, "COORDINATOR_URL": plain, "COORDINATOR_CA_FILE": str(https_coordinator.ca_file)})
    assert (code, error) == (2, (
        f"COORDINATOR_URL {plain} is http://, and COORDINATOR_CA_FILE is set: the Coordinator "
        f"serves HTTPS, use {https_coordinator.url}"))


def test_a_plain_http_worker_is_told_the_coordinator_serves_https(
        web_env: dict[str, str], https_coordinator: Coordinator,
        start_worker: WorkerFactory) -> None:
    plain = https_coordinator.url.replace("https://", "http://")
    code, error = _failed_start(start_worker, {**web_env, "COORDINATOR_URL": plain})
    assert code == 1
    assert error.startswith(f"Coordinator check FAILED: not reachable at {plain} (")
    assert error.endswith(
        f"fix: the Coordinator at {plain} closed the connection without an answer, as one "
        "that serves HTTPS only does: use https:// and the cluster CA's certificate "
        "(COORDINATOR_CA_FILE, docs/tls.md)")


def test_a_coordinator_certificate_from_another_ca_is_refused(
        web_env: dict[str, str], https_coordinator: Coordinator, start_worker: WorkerFactory,
        tmp_path: Path) -> None:
    other = throwaway.make_certificates(tmp_path / "other", ca_name="another CA")
    code, error = _failed_start(start_worker, {
        **web_env, "COORDINATOR_URL": https_coordinator.url, "COORDINATOR_CA_FILE": str(other.ca)})
    assert code == 1
    assert "certificate verify failed" in error
    assert error.endswith(
        f"fix: the Coordinator's certificate is not from the CA in {other.ca} or does not name "
        f"the host of {https_coordinator.url}: use the cluster CA's ca.crt, and the address "
        "site.yml gave the Coordinator's certificate (docs/tls.md)")


def test_a_missing_coordinator_ca_file_says_to_run_site_yml(
        web_env: dict[str, str], https_coordinator: Coordinator, start_worker: WorkerFactory,
        tmp_path: Path) -> None:
    missing = tmp_path / "absent" / "ca.crt"
    code, error = _failed_start(start_worker, {
        **web_env, "COORDINATOR_URL": https_coordinator.url, "COORDINATOR_CA_FILE": str(missing)})
    assert code == 1
    assert error.endswith(
        f"fix: COORDINATOR_CA_FILE {missing} does not exist: run site.yml, which puts the "
        "cluster CA's certificate there (docs/tls.md)")
