"""Unit tests of coordinator_task's pure functions: requests, DSNs, verdicts, messages."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import worker_base as base
import worker_web
from coordinator_sql import PROBE_COLUMNS, SQL, parameters

from module_utils import coordinator_probe as probe

TID = "2f0c1d9e-8a4b-4c55-9d1e-6b7f3a2c9e10"
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
TARGET = "user coordinator at 127.0.0.1:5432, database coordinator"


def done_row(**changes: object) -> probe.TaskRow:
    row = probe.TaskRow(
        id=TID,
        task_type="web_search",
        status="done",
        queue="tasks:web",
        worker="web-worker",
        worker_id="web-worker-macbookair",
        worker_host="macbookair",
        result="Sunny, 14 degrees",
        fallback=False,
        error=None,
        created_at=T0,
        started_at=T0 + timedelta(seconds=0.25),
        finished_at=T0 + timedelta(seconds=4.125),
        claimed_by="worker_macbookair",
        claimed_by_worker_login=True,
    )
    return replace(row, **changes)


STRICT = probe.Expectation(worker_host="macbookair", allow_fallback=False)
# The host as the database knows it: its own login must have claimed the task.
PROVEN = probe.Expectation(worker_host="macbookair", allow_fallback=False,
                           claimed_by_host="macbookair")


# -- route request ---------------------------------------------------------------------------


def test_route_request_minimal_body_without_token():
    req = probe.build_route_request(
        coordinator_url="http://127.0.0.1:8000/",
        coordinator_token=None,
        prompt="What is the weather in Tokyo today?",
        task_type="web_search",
        model=None,
        target_worker=None,
    )
    assert req.url == "http://127.0.0.1:8000/route"
    assert json.loads(req.body) == {
        "prompt": "What is the weather in Tokyo today?",
        "task_type": "web_search",
    }
    assert "Authorization" not in req.headers
    assert req.headers["Content-Type"] == "application/json"


def test_route_request_with_token_model_and_worker():
    req = probe.build_route_request(
        coordinator_url="http://127.0.0.1:8000",
        coordinator_token="s3cret",
        prompt="hi",
        task_type="generate",
        model="llama3.2:3b",
        target_worker="macbookair",
    )
    assert req.headers["Authorization"] == "Bearer s3cret"
    assert json.loads(req.body) == {
        "prompt": "hi", "task_type": "generate", "model": "llama3.2:3b", "worker": "macbookair",
    }


def test_route_request_keeps_non_ascii_prompt():
    req = probe.build_route_request(
        coordinator_url="http://127.0.0.1:8000", coordinator_token=None,
        prompt="今日の東京の天気は？", task_type="web_search", model=None, target_worker=None,
    )
    assert json.loads(req.body)["prompt"] == "今日の東京の天気は？"


def test_parse_route_answer_returns_task_id():
    body = json.dumps({"task_id": TID, "queue": "tasks:web", "status": "queued"}).encode()
    assert probe.parse_route_answer("http://127.0.0.1:8000", body) == TID


@pytest.mark.parametrize("body", [b"<html>hello</html>", b'{"queue": "tasks:web"}', b"[]"])
def test_parse_route_answer_without_task_id(body):
    with pytest.raises(probe.ProbeError) as err:
        probe.parse_route_answer("http://127.0.0.1:8000", body)
    assert str(err.value) == (
        f"Coordinator at http://127.0.0.1:8000 answered POST /route without a task_id "
        f"({body.decode()}); check coordinator_url points at the Coordinator API"
    )


# -- HTTP failures ---------------------------------------------------------------------------


def test_http_401_with_token_says_check_token():
    assert probe.describe_http_error("http://127.0.0.1:8000", 401, b'{"error": "x"}', True) == (
        "Coordinator at http://127.0.0.1:8000 refused the token (401 on POST /route): "
        "check coordinator_token"
    )


def test_http_401_without_token_says_set_token():
    assert probe.describe_http_error("http://127.0.0.1:8000", 401, b"", False) == (
        "Coordinator at http://127.0.0.1:8000 needs a token (401 on POST /route): "
        "set coordinator_token"
    )


def test_http_404_says_check_url():
    assert probe.describe_http_error("http://127.0.0.1:8000/api", 404, b"Not Found", False) == (
        "Coordinator at http://127.0.0.1:8000/api answered 404 on POST /route (Not Found): "
        "check coordinator_url points at the Coordinator API"
    )


def test_http_4xx_shows_coordinator_error_line():
    body = json.dumps({"error": "unknown task_type 'x': use web_search, rag, generate"}).encode()
    assert probe.describe_http_error("http://127.0.0.1:8000", 422, body, False) == (
        "Coordinator at http://127.0.0.1:8000 answered 422 on POST /route: "
        "unknown task_type 'x': use web_search, rag, generate"
    )


def test_http_5xx_with_empty_body():
    assert probe.describe_http_error("http://127.0.0.1:8000", 503, b"", False) == (
        "Coordinator at http://127.0.0.1:8000 answered 503 on POST /route: (empty answer)"
    )


def test_unreachable_says_check_url():
    assert probe.describe_unreachable("http://127.0.0.1:9", "[Errno 111] Connection refused") == (
        "Coordinator unreachable at http://127.0.0.1:9 ([Errno 111] Connection refused): "
        "check coordinator_url"
    )


# -- PostgreSQL options and failures ---------------------------------------------------------


def pg_options(**changes: object) -> dict[str, object]:
    options: dict[str, object] = {
        "pg_dsn": None, "login_host": "127.0.0.1", "login_unix_socket": "", "login_port": 5432,
        "login_user": "coordinator", "login_password": "pw", "login_db": "coordinator",
        "ssl_mode": "prefer",
    }
    options.update(changes)
    return options


def test_conninfo_from_login_options():
    assert probe.build_conninfo(**pg_options()) == (
        "host='127.0.0.1' port='5432' dbname='coordinator' user='coordinator' "
        "password='pw' sslmode='prefer'"
    )


def test_conninfo_quotes_spaces_quotes_and_backslashes():
    conninfo = probe.build_conninfo(**pg_options(login_password="a b'c\\d"))
    assert "password='a b\\'c\\\\d'" in conninfo


def test_conninfo_psycopg_parses_quoted_values_back():
    from psycopg.conninfo import conninfo_to_dict

    parsed = conninfo_to_dict(probe.build_conninfo(**pg_options(login_password="a b'c\\d")))
    assert parsed["password"] == "a b'c\\d"


def test_conninfo_without_host_or_password_uses_libpq_defaults():
    conninfo = probe.build_conninfo(**pg_options(login_host="", login_password=""))
    assert "host=" not in conninfo
    assert "password=" not in conninfo


def test_conninfo_unix_socket_wins_over_host():
    conninfo = probe.build_conninfo(**pg_options(login_unix_socket="/run/postgresql"))
    assert conninfo.startswith("host='/run/postgresql' ")


def test_conninfo_with_a_ca_cert_names_it_as_the_root_certificate():
    conninfo = probe.build_conninfo(**pg_options(ssl_mode="verify-full",
                                                 ca_cert="/etc/coordinator-cluster/tls/ca.crt"))
    assert conninfo.endswith(
        " sslmode='verify-full' sslrootcert='/etc/coordinator-cluster/tls/ca.crt'")


def test_conninfo_pg_dsn_wins():
    dsn = "host=127.0.0.1 dbname=coordinator user=coordinator password=x"
    assert probe.build_conninfo(**pg_options(pg_dsn=dsn)) == dsn


def test_describe_target_never_shows_password():
    params = {"host": "127.0.0.1", "port": "5433", "user": "coordinator",
              "dbname": "coordinator", "password": "s3cret"}
    assert probe.describe_target(params) == (
        "user coordinator at 127.0.0.1:5433, database coordinator")


def test_describe_target_defaults():
    assert probe.describe_target({"user": "coordinator"}) == (
        "user coordinator at the default Unix socket, port 5432, database coordinator"
    )


def test_pg_password_refused():
    error = (
        'connection to server at "127.0.0.1", port 5432 failed: FATAL:  password '
        'authentication failed for user "coordinator"\n'
    )
    assert probe.describe_pg_connect_error(TARGET, error) == (
        f"PostgreSQL refused login for {TARGET}: {error.strip()}; check "
        "login_user/login_password (or pg_dsn), and that a pg_hba.conf line allows this host"
    )


def test_pg_hba_line_missing():
    error = (
        'connection to server at "127.0.0.1", port 5432 failed: FATAL:  no pg_hba.conf entry '
        'for host "192.168.0.43", user "coordinator", database "coordinator", no encryption'
    )
    assert probe.describe_pg_connect_error(TARGET, error) == (
        f"PostgreSQL refused login for {TARGET}: {error}; a pg_hba.conf line allowing this "
        "host is missing on the database server"
    )


def test_pg_database_missing():
    error = (
        'connection to server at "127.0.0.1", port 5432 failed: FATAL:  database "x" does not '
        "exist"
    )
    assert probe.describe_pg_connect_error(TARGET, error) == (
        f"PostgreSQL refused login for {TARGET}: {error}; check login_db/login_user"
    )


def test_pg_unreachable_keeps_first_line_only():
    error = (
        'connection to server at "127.0.0.1", port 1 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?\n"
    )
    assert probe.describe_pg_connect_error(TARGET, error) == (
        f'PostgreSQL unreachable for {TARGET}: connection to server at "127.0.0.1", port 1 '
        "failed: Connection refused; check login_host/login_port (or pg_dsn) and that the "
        "server listens on that address"
    )


def test_missing_table():
    assert probe.describe_missing_table(TARGET, 'relation "tasks" does not exist\nLINE 1: ...') == (
        f'no tasks table for {TARGET} (relation "tasks" does not exist): the Coordinator '
        "writes to another database; point login_host/login_db (or pg_dsn) at the "
        "Coordinator's PG_DSN"
    )


def test_row_not_found():
    assert probe.describe_row_not_found(TID, TARGET) == (
        f"task {TID} not found in PostgreSQL ({TARGET}): the Coordinator writes to another "
        "database than the one checked; point login_host/login_db (or pg_dsn) at the "
        "Coordinator's PG_DSN"
    )


def test_first_line():
    assert probe.first_line("\n  FATAL: x \nDETAIL: y", probe.NO_MESSAGE) == "FATAL: x"
    assert probe.first_line("", probe.NO_MESSAGE) == "(no message)"


# -- the row ---------------------------------------------------------------------------------


def test_select_reads_every_taskrow_field_in_order():
    assert len(PROBE_COLUMNS) == len(probe.TaskRow.__dataclass_fields__)
    assert SQL.PROBE_TASK.startswith("SELECT id::text, task_type, status, queue, worker,")
    assert parameters(SQL.PROBE_TASK) == ["group", "id"]
    assert probe.task_query(TID) == {"id": TID, "group": "coordinator_workers"}
    row = probe.row_from_tuple([TID, "web_search", "queued", "tasks:web", "default", None, None,
                                None, False, None, T0, None, None])
    assert row.worker == "default"
    assert row.created_at == T0


@pytest.mark.parametrize(("status", "final"),
                         [("queued", False), ("running", False), ("done", True), ("failed", True)])
def test_is_final(status, final):
    assert probe.is_final(done_row(status=status)) is final


def test_done_on_expected_host_is_ok():
    assert probe.judge_final(done_row(), STRICT) is None


def test_host_comparison_ignores_case():
    assert probe.judge_final(done_row(worker_host="MacBookAir"), STRICT) is None


def test_any_host_when_none_expected():
    row = done_row(worker_host="ai-core")
    assert probe.judge_final(row, probe.Expectation(None, False)) is None


def test_done_on_wrong_host():
    assert probe.judge_final(done_row(worker_host="ai-core"), STRICT) == (
        f"task {TID} done on ai-core, expected macbookair"
    )


def test_done_without_host_names_the_worker_id():
    assert probe.judge_final(done_row(worker_host=None), STRICT) == (
        f"task {TID} done on web-worker-macbookair, expected macbookair"
    )


def web_worker_answer(found: worker_web.Found, summary_error: str = "") -> base.Outcome:
    """What worker_web writes for a search that ``found`` this, its summary failing with
    ``summary_error``: its own execute, with the search and the summary stubbed."""
    worker = object.__new__(worker_web.WebWorker)
    worker.search = lambda prompt: found

    def summarise(prompt: str, results: list[dict], options: dict | None = None) -> str:
        raise worker_web.SummaryError(summary_error)

    worker.summarise = summarise
    return worker.execute(base.Task(TID, "claim", "web_search", "今日の東京の天気は？", None))


def fallback_row(outcome: base.Outcome) -> probe.TaskRow:
    assert outcome.fallback, outcome
    return done_row(fallback=True, result=outcome.result)


def test_a_refused_fallback_quotes_why_the_summary_failed():
    results = [{"title": "東京の天気", "url": "https://example.jp/tenki", "content": "晴れ"}]
    outcome = web_worker_answer(worker_web.Found(results, []), "Ollama at "
                                "http://127.0.0.1:11434 answered 500: model failed to load")
    assert probe.judge_final(fallback_row(outcome), STRICT) == (
        f"task {TID} done with fallback on macbookair: Summary failed (Ollama at "
        "http://127.0.0.1:11434 answered 500: model failed to load); here are the search "
        "results instead."
    )


def test_a_refused_fallback_quotes_the_searxng_engines_that_did_not_answer():
    outcome = web_worker_answer(worker_web.Found([], ["brave (Suspended: CAPTCHA)",
                                                      "duckduckgo (timeout)"]))
    assert probe.judge_final(fallback_row(outcome), STRICT) == (
        f"task {TID} done with fallback on macbookair: No search results: SearXNG's engines "
        "did not answer: brave (Suspended: CAPTCHA), duckduckgo (timeout)"
    )


def test_a_refused_fallback_quotes_a_long_reason_cut_and_an_empty_one_as_none():
    outcome = web_worker_answer(worker_web.Found([{"title": "t", "url": "u"}], []), "x" * 500)
    message = probe.judge_final(fallback_row(outcome), STRICT)
    start = f"task {TID} done with fallback on macbookair: "
    assert message.startswith(start + "Summary failed (xxx") and message.endswith("x…")
    assert len(message) == len(start) + probe.FALLBACK_REASON_CHARS
    assert probe.judge_final(done_row(fallback=True, result=" \n"), STRICT) == (
        f"task {TID} done with fallback on macbookair: no answer recorded")


def test_fallback_allowed():
    assert probe.judge_final(done_row(fallback=True), probe.Expectation("macbookair", True)) is None


def test_the_model_that_answered_must_be_the_expected_one():
    expect = probe.Expectation(None, False, answered_model="new:q4")
    assert probe.judge_final(done_row(answered_model="NEW:Q4"), expect) is None
    assert probe.judge_final(done_row(answered_model="old:q4"), expect) == (
        f"task {TID} done on macbookair by model old:q4, expected model new:q4")
    assert probe.judge_final(done_row(fallback=True), probe.Expectation(None, True, "new:q4")
                             ) == (f"task {TID} done on macbookair by no model (a fallback "
                                   "answer), expected model new:q4")


def test_wrong_host_is_reported_before_fallback():
    row = done_row(worker_host="ai-core", fallback=True)
    assert probe.judge_final(row, STRICT) == f"task {TID} done on ai-core, expected macbookair"


def test_claimed_by_the_expected_hosts_own_login_is_ok_and_warns_nothing():
    assert probe.judge_final(done_row(), PROVEN) is None
    assert probe.identity_warning(done_row(), PROVEN) is None
    # The login follows the host's inventory name as the database side names it.
    expect = replace(PROVEN, worker_host=None, claimed_by_host="Mac-Book.lan")
    assert probe.judge_final(done_row(claimed_by="worker_mac_book_lan"), expect) is None


def test_a_row_naming_the_expected_host_but_claimed_by_another_hosts_login_fails():
    # What a compromised host's login would leave: the worker columns say macbookair.
    forged = done_row(claimed_by="worker_ai_core")
    assert probe.judge_final(forged, STRICT) is None  # the worker's own word alone passes
    assert probe.judge_final(forged, PROVEN) == (
        f"task {TID} is done, and the row claims host macbookair but was claimed by login "
        "worker_ai_core, not macbookair's own worker_macbookair: worker_id and worker_host "
        "are what a worker wrote, the login is what the database established")


def test_a_wrong_host_in_the_row_is_named_before_the_login():
    row = done_row(worker_host="ai-core", claimed_by="worker_ai_core")
    assert probe.judge_final(row, PROVEN) == f"task {TID} done on ai-core, expected macbookair"


def test_a_login_shared_by_every_host_passes_with_a_warning_that_it_proves_no_host():
    shared = done_row(claimed_by="coordinator", claimed_by_worker_login=False)
    assert probe.judge_final(shared, PROVEN) is None
    assert probe.identity_warning(shared, PROVEN) == (
        f"task {TID} was claimed by login coordinator, no worker host's own (without "
        "postgresql_access_worker_password_key every worker host logs in as the Coordinator's "
        "login): the database cannot tell hosts apart, so that macbookair did the work rests "
        "on the worker's own word (worker_host macbookair)")
    unrecorded = done_row(claimed_by=None, claimed_by_worker_login=False)
    assert probe.identity_warning(unrecorded, PROVEN).startswith(
        f"task {TID} was claimed by a login the database did not record, no worker host's own")
    # Nothing to warn of when no host's login was asked for.
    assert probe.identity_warning(shared, STRICT) is None


def test_failed_task():
    row = done_row(status="failed", result=None, error="SearXNG at http://127.0.0.1:8888 timed out")
    assert probe.judge_final(row, STRICT) == (
        f"task {TID} failed on macbookair: SearXNG at http://127.0.0.1:8888 timed out"
    )


def test_failed_task_without_error_or_host():
    row = done_row(status="failed", worker_host=None, worker_id=None, error=None)
    assert probe.judge_final(row, STRICT) == (
        f"task {TID} failed on an unknown host: no error recorded")


def test_timeout_still_queued_web():
    row = done_row(status="queued", worker="default", worker_id=None, worker_host=None,
                   started_at=None, finished_at=None)
    expected = f"task {TID} still 'queued' after 30s: no web worker took it"
    assert probe.describe_timeout(row, 30) == expected


def test_timeout_still_queued_rag():
    row = done_row(task_type="rag", status="queued", worker_id=None, worker_host=None)
    expected = f"task {TID} still 'queued' after 30s: no RAG worker took it"
    assert probe.describe_timeout(row, 30) == expected


@pytest.mark.parametrize("task_type", ["generate", "chat", "summarize"])
def test_timeout_still_queued_inference(task_type):
    row = done_row(task_type=task_type, status="queued", queue=None, worker="macbookair",
                   worker_id=None, worker_host=None)
    assert probe.describe_timeout(row, 60) == (
        f"task {TID} still 'queued' after 60s: no worker took it")


def test_timeout_still_running():
    row = done_row(status="running", finished_at=None, result=None)
    assert probe.describe_timeout(row, 30) == (
        f"task {TID} still 'running' after 30s on web-worker-macbookair (macbookair)"
    )


def test_timeout_still_running_without_names():
    row = done_row(status="running", worker_id=None, worker_host=None)
    assert probe.describe_timeout(row, 30) == (
        f"task {TID} still 'running' after 30s on an unknown worker (an unknown host)"
    )


def test_timeout_unknown_status_is_named():
    row = done_row(status="paused")
    assert probe.describe_timeout(row, 5) == f"task {TID} still 'paused' after 5s"


def test_durations_from_table_timestamps():
    assert probe.durations(done_row()) == (4.125, 0.25)


def test_durations_unknown_until_set():
    assert probe.durations(done_row(started_at=None, finished_at=None)) == (None, None)


def test_result_fields():
    fields = probe.result_fields(done_row())
    assert fields == {
        "task_id": TID, "task_type": "web_search", "status": "done", "queue": "tasks:web",
        "worker": "web-worker", "worker_id": "web-worker-macbookair", "worker_host": "macbookair",
        "fallback": False, "answered_model": None, "claimed_by": "worker_macbookair",
        "answer": "Sunny, 14 degrees", "error": None,
        "seconds": 4.125, "start_delay_seconds": 0.25,
        "created_at": "2026-11-30T03:00:00+00:00",
        "started_at": "2026-11-30T03:00:00.250000+00:00",
        "finished_at": "2026-11-30T03:00:04.125000+00:00",
    }


def test_success_message():
    assert probe.describe_success(done_row()) == (
        f"task {TID} done on web-worker-macbookair (macbookair) in 4.125s"
    )


def test_probe_error_carries_fields():
    assert probe.ProbeError("x", {"task_id": TID}).fields == {"task_id": TID}
    assert probe.ProbeError("x").fields == {}


def test_check_options():
    url = "http://127.0.0.1:8000"
    assert probe.check_options(url, 60, 1.0) is None
    assert probe.check_options("https://127.0.0.1", 60, 1.0) is None
    assert probe.check_options("127.0.0.1:8000", 60, 1.0) == (
        "coordinator_url='127.0.0.1:8000' is not an http(s) URL: use e.g. http://ai-core:8000"
    )
    assert probe.check_options(url, 0, 1.0) == (
        "timeout=0 is too small: give the task at least 1 second (default 60)"
    )
    assert probe.check_options(url, 5, 0) == "poll_interval=0 must be above 0 seconds (default 1)"


def test_the_plan_of_check_mode_names_what_a_run_would_route_and_require():
    expect = probe.Expectation(worker_host=None, allow_fallback=True,
                               answered_model="llama3.2:3b")
    assert probe.describe_plan("https://ai-core:8000", "chat", "macbookair", 120, expect,
                               "user coordinator at 127.0.0.1:5432, database coordinator") == (
        "check mode: would route a chat task to worker macbookair through https://ai-core:8000 "
        "and require it done in PostgreSQL (user coordinator at 127.0.0.1:5432, database "
        "coordinator) within 120s, answered by llama3.2:3b; nothing was routed")
