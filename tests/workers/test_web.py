"""worker_web.py as a user runs it: the real Coordinator, PostgreSQL and Redis, and the
SearXNG and Ollama stand-ins, all on 127.0.0.1."""

from __future__ import annotations

import signal
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote_plus

import coordinator_contract as contract
import psycopg2
import pytest
import requests
import worker_web

from coordinator.config import Config
from lab.processes import CoordinatorProcess
from lab.throwaway import free_port
from tests.conftest import create_schema

from .conftest import FILES, MODEL, PYTHON, TOKYO, WAITING, Coordinator, wait_until

START_LINES = ["Redis OK", "PostgreSQL OK", "SearXNG OK", "Ollama OK", "register",
               "Waiting on queues ['tasks:web']"]


def messages(service) -> list[str]:
    """Log lines without their timestamp: 'LEVEL message'."""
    return [line.split(" ", 2)[2] for line in service.lines() if line[:2] == "20"]


def error_of(service) -> str:
    """The message of the last ERROR line, as the operator reads it."""
    return [m for m in messages(service) if m.startswith("ERROR ")][-1][len("ERROR "):]


def line_index(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(f"INFO {text}"))


def search_results(searxng, query: str) -> list[dict]:
    response = requests.post(f"{searxng.url}/search", data={"q": query, "format": "json"},
                             timeout=5)
    return response.json()["results"]


def first_search_result(searxng, query: str) -> dict:
    return search_results(searxng, query)[0]


# --- the happy path ------------------------------------------------------------------------

def test_japanese_query_end_to_end(web_env, start_worker, coordinator, tasks, rds, pg,
                                   redis_server):
    worker = start_worker(web_env)
    worker.wait_for(WAITING)
    task_id = coordinator.route(TOKYO, "web_search")

    row = tasks.wait_status(task_id, "done", "failed")
    assert row["status"] == "done", row["error"]
    assert row["worker"] == "web-worker"
    assert row["worker_id"] == web_env["WORKER_ID"]
    assert row["worker_host"] == "worker-host-a"
    assert row["fallback"] is False
    assert row["answered_model"] == web_env["OLLAMA_MODEL"]
    shown = requests.get(f"{coordinator.url}/task/{task_id}", timeout=10).json()
    assert shown["answered_model"] == web_env["OLLAMA_MODEL"]
    assert row["attempts"] == 1
    assert row["error"] is None
    # The stand-in's "summary" quotes the start of the prompt it was given, whole.
    assert row["result"].startswith("要約: 「Question: 今日の東京の天気は？")
    assert not row["result"].endswith("…")
    assert not [line for line in messages(worker) if "summary cut" in line]
    answer = requests.get(f"{coordinator.url}/task/{task_id}", timeout=5).json()
    assert (answer["status"], answer["result"]) == ("done", row["result"])
    # The worker removes the id from its processing list just after the row is written.
    wait_until(lambda: rds.llen(f"processing:{web_env['WORKER_ID']}") == 0, 10,
               "the id to leave the processing list")
    output = worker.output()
    for secret in (pg.password, redis_server.password):
        assert secret not in output
    assert "password=***" in output


def test_a_summary_cut_at_its_token_limit_says_so(web_env, start_worker, coordinator, tasks):
    """Ollama stops at options.num_predict with done_reason "length" (the stand-in, made-up
    answer or real, as its runner does): the summary ends in an ellipsis and the log says why,
    where a whole one has neither."""
    worker = start_worker(web_env | {"SUMMARY_MAX_TOKENS": "3"})
    worker.wait_for(WAITING)
    row = tasks.wait_status(coordinator.route(TOKYO, "web_search"), "done", "failed")
    assert row["status"] == "done", row["error"]
    # The made-up answer's first three pieces ("要約: ", "「Questio", "n: ").
    assert row["result"] == "要約: 「Question: …"
    assert row["fallback"] is False
    assert "WARNING summary cut at 3 tokens (SUMMARY_MAX_TOKENS=3)" in messages(worker)
    # A task's own options reach the summary, its num_predict bounded by the worker's.
    fewer = tasks.wait_status(coordinator.route(TOKYO, "web_search",
                                                options={"num_predict": 2, "seed": 7}),
                              "done", "failed")
    assert fewer["result"] == "要約: 「Questio …", fewer["error"]
    assert "WARNING summary cut at 2 tokens (SUMMARY_MAX_TOKENS=3)" in messages(worker)
    more = tasks.wait_status(coordinator.route(TOKYO, "web_search",
                                               options={"num_predict": 500}), "done", "failed")
    assert more["result"] == row["result"], more["error"]


def test_start_up_lines_in_order_and_one_version(web_env, start_worker, coordinator):
    worker = start_worker(web_env)
    worker.wait_for(WAITING)
    lines = messages(worker)
    positions = [line_index(lines, text) for text in START_LINES]
    assert positions == sorted(positions)
    assert lines[0] == f"INFO Web Search Worker starting (v{worker_web.VERSION})."

    shipped = subprocess.run([PYTHON, str(FILES / "worker_web.py"), "--version"],
                             capture_output=True, text=True, check=True).stdout
    assert shipped == f"{worker_web.VERSION}\n"
    assert shipped.strip() == "2.1"
    registered = wait_until(lambda: coordinator.worker(web_env["WORKER_ID"]), 10,
                            "the worker in GET /workers")
    assert registered["version"] == shipped.strip()
    assert registered["host"] == "worker-host-a"
    assert registered["kind"] == "web"
    assert registered["queues"] == ["tasks:web"]
    # The model it serves: what a move of the web worker keeps (migrate-web.yml).
    assert registered["models"] == [web_env["OLLAMA_MODEL"]]
    assert registered["pid"] == worker.pid


# --- failures while working ----------------------------------------------------------------

@pytest.mark.parametrize("how", ["error", "timeout"])
def test_summary_failure_falls_back_to_the_search_results(how, web_env, start_worker,
                                                          coordinator, tasks, searxng, ollama):
    if how == "timeout":
        web_env["OLLAMA_TIMEOUT"] = "1"
    worker = start_worker(web_env)
    worker.wait_for(WAITING)
    if how == "error":
        ollama.config(fail="error", fail_generate_only=True)
        reason = (f"Ollama at {ollama.url} answered HTTP 500 llama runner process has "
                  "terminated: exit status 2")
    else:
        ollama.config(latency=3)
        reason = f"Ollama at {ollama.url} did not answer within 1s"
    task_id = coordinator.route(TOKYO, "web_search")

    row = tasks.wait_status(task_id, "done", "failed")
    assert row["status"] == "done"
    assert row["fallback"] is True
    assert row["answered_model"] is None
    assert row["worker"] == "web-worker"
    first = first_search_result(searxng, TOKYO)
    assert row["result"].startswith(
        f"Summary failed ({reason}); here are the search results instead.\n"
        f"1. {first['title']} <{first['url']}>\n   {first['content']}\n2. ")


@pytest.mark.parametrize("how", ["json_disabled", "error", "external_bang"])
def test_search_failure_fails_the_task_with_the_reason(how, web_env, start_worker, coordinator,
                                                      tasks, searxng, rds):
    worker = start_worker(web_env)
    worker.wait_for(WAITING)
    prompt = TOKYO
    if how == "json_disabled":
        searxng.config(json_enabled=False)
        expected = (f"SearXNG at {searxng.url} answered 403 to format=json: its JSON API is "
                    "disabled; add json to search.formats in its settings.yml and restart it")
    elif how == "error":
        searxng.config(fail="error")
        expected = f"SearXNG at {searxng.url} answered HTTP 500"
    else:
        prompt = f"!!g {TOKYO}"
        expected = (f"SearXNG at {searxng.url} answered 302 with a redirect to "
                    f"https://www.google.com/search?q={quote_plus(TOKYO)} (not followed): a word "
                    "of the query starting with !! is an external bang, which SearXNG answers "
                    "by sending the client to that search site instead of searching; leave it "
                    "out of the prompt")
    task_id = coordinator.route(prompt, "web_search")

    row = tasks.wait_status(task_id, "done", "failed")
    assert row["status"] == "failed"
    assert row["error"] == expected
    assert row["result"] is None
    # The worker removes the id from its processing list just after the row is written.
    wait_until(lambda: rds.llen(f"processing:{web_env['WORKER_ID']}") == 0, 10,
               "the id to leave the processing list")


def test_the_limiter_lets_the_worker_through_and_its_429_names_the_setting(
        web_env, start_worker, coordinator, tasks, searxng):
    worker = start_worker(web_env)
    worker.wait_for(WAITING)
    searxng.config(limiter=True)
    let_through = tasks.wait_status(coordinator.route(TOKYO, "web_search"), "done", "failed")
    assert (let_through["status"], let_through["error"]) == ("done", None)

    # A burst from the worker's address (the test's, 127.0.0.1 too) uses up BURST_WINDOW.
    burst = [requests.post(f"{searxng.url}/search", data={"q": "burst", "format": "json"},
                           headers=worker_web.SEARCH_HEADERS, timeout=5).status_code
             for _ in range(16)]
    assert burst[0] == 200 and burst[-1] == 429
    turned_away = tasks.wait_status(coordinator.route(TOKYO, "web_search"), "done", "failed")
    assert (turned_away["status"], turned_away["result"]) == ("failed", None)
    assert turned_away["error"] == (
        f"SearXNG at {searxng.url} answered 429 Too Many Requests: its limiter turned this "
        "worker away; set server.limiter (and server.public_instance) to false in its "
        "settings.yml, or add this host to pass_ip in its limiter.toml, and restart it")


def test_engines_that_did_not_answer_are_named_and_none_answering_is_flagged(
        web_env, start_worker, coordinator, tasks, searxng, ollama):
    worker = start_worker(web_env)
    worker.wait_for(WAITING)
    searxng.config(unresponsive={"brave": "CAPTCHA", "qwant": "too many requests"})
    assert search_results(searxng, TOKYO)
    some = tasks.wait_status(coordinator.route(TOKYO, "web_search"), "done", "failed")
    assert (some["status"], some["fallback"]) == ("done", False)
    assert some["answered_model"] == MODEL
    assert some["result"].startswith("要約: 「Question: 今日の東京の天気は？")
    assert some["result"].endswith("\n\n(SearXNG: these engines did not answer: brave (CAPTCHA), "
                                   "qwant (too many requests))")

    # SearXNG's answer when every engine fails: 200, no results, the engines and reasons.
    searxng.config(unresponsive={"brave": "Suspended: CAPTCHA", "duckduckgo": "timeout",
                                 "qwant": "too many requests", "startpage": "access denied",
                                 "wikipedia": "timeout"})
    none = tasks.wait_status(coordinator.route(TOKYO, "web_search"), "done", "failed")
    assert (none["status"], none["fallback"], none["answered_model"]) == ("done", True, None)
    assert none["result"] == (
        "No search results: SearXNG's engines did not answer: brave (Suspended: CAPTCHA), "
        "duckduckgo (timeout), qwant (too many requests), startpage (access denied), "
        "wikipedia (timeout)")
    assert f"INFO Task {none['id']} done (fallback answer)" in messages(worker)


def test_a_prompt_as_long_as_the_coordinator_takes_is_searched(web_env, start_worker,
                                                             coordinator, tasks, searxng):
    # Every byte of the largest prompt the Coordinator accepts: Japanese, 3 bytes a character,
    # 9 once percent-encoded, far over the 8 KiB URL uWSGI (the stand-in's default) lets in.
    prompt = "東" * (Config.max_prompt_bytes // len("東".encode()))
    worker = start_worker(web_env)
    worker.wait_for(WAITING)
    row = tasks.wait_status(coordinator.route(prompt, "web_search"), "done", "failed",
                            timeout=60)
    assert (row["status"], row["fallback"], row["error"]) == ("done", False, None)
    assert row["result"].startswith("要約: 「Question: 東東東")
    assert "invalid request block size" not in searxng.log.read_text()


def test_db_write_failure_is_retried_and_shown_in_the_heartbeat(web_env, busy_worker,
                                                                coordinator, tasks, ollama,
                                                                pg, rds):
    worker, task_id = busy_worker(web_env, latency=3)
    processing = f"processing:{web_env['WORKER_ID']}"
    pg.psql("REVOKE UPDATE ON tasks FROM coordinator")
    try:
        seen = wait_until(
            lambda: (w if (w := coordinator.worker(web_env["WORKER_ID"]))
                     and w["db_write_failures"] > 0 else None),
            20, "db_write_failures in GET /workers")
        assert seen["last_error"] == (f"result write of task {task_id} failed: permission "
                                      "denied for table tasks")
        assert tasks.get(task_id)["status"] == "running"
        assert rds.lrange(processing, 0, -1) == [task_id]
    finally:
        pg.psql("GRANT UPDATE ON tasks TO coordinator")
    row = tasks.wait_status(task_id, "done", "failed")
    assert (row["status"], row["fallback"]) == ("done", False)
    assert (f"ERROR result write of task {task_id} failed: permission denied for table tasks "
            f"(attempt 1); task stays in {processing}, retrying in 0.5s") in messages(worker)
    try:
        wait_until(lambda: rds.llen(processing) == 0, what="the id to leave the processing list")
    except TimeoutError as error:
        # The worker's own account of what it did after the write is the diagnosis.
        raise AssertionError(f"{error}; the worker's log:\n{worker.output()[-4000:]}") from None


def test_coordinator_outage_is_logged_once_and_work_goes_on(web_env, start_worker, coordinator,
                                                            tasks, pg, redis_server, tmp_path):
    # The worker heartbeats to a second Coordinator (same database) that then goes away.
    second = Coordinator(pg, redis_server, tmp_path)
    try:
        worker = start_worker({**web_env, "COORDINATOR_URL": second.url})
        worker.wait_for(WAITING)
        pg.psql(f"DELETE FROM workers WHERE worker_id = '{web_env['WORKER_ID']}'")
        worker.wait_for(f"INFO Coordinator does not know {web_env['WORKER_ID']}; registering "
                        "again")
        wait_until(lambda: coordinator.worker(web_env["WORKER_ID"]), 10, "re-registration")
    finally:
        second.stop()
    worker.wait_for(f"WARNING Heartbeat to {second.url} failed (")
    task_id = coordinator.route(TOKYO, "web_search")
    assert tasks.wait_status(task_id, "done", "failed")["status"] == "done"
    second = Coordinator(pg, redis_server, tmp_path, port=second.port)
    try:
        worker.wait_for(f"INFO Heartbeat to {second.url} works again")
    finally:
        second.stop()
    # Seconds of failed heartbeats (one every 2/3 s), one line.
    assert len([m for m in messages(worker) if "Heartbeat to" in m and "failed" in m]) == 1


# --- process life --------------------------------------------------------------------------

def test_kill_9_mid_task_then_restart_finishes_it_once(web_env, busy_worker, start_worker,
                                                      tasks, ollama, rds):
    worker, task_id = busy_worker(web_env, latency=30)
    worker.signal(signal.SIGKILL)
    worker.wait_exit()
    processing = f"processing:{web_env['WORKER_ID']}"
    assert rds.lrange(processing, 0, -1) == [task_id]

    ollama.config(latency=0)
    again = start_worker(web_env)
    row = tasks.wait_status(task_id, "done", "failed")
    assert row["status"] == "done"
    assert row["attempts"] == 2
    assert row["worker_id"] == web_env["WORKER_ID"]
    assert row["fallback"] is False
    assert row["result"].startswith("要約:")
    assert f"INFO {processing} holds 1 task(s) from a previous run; finishing them first" \
        in messages(again)
    wait_until(lambda: rds.llen(processing) == 0, 10, "the id to leave the processing list")
    # Exactly one result: nothing left that could write another.
    assert tasks.get(task_id)["finished_at"] == row["finished_at"]


def test_sigterm_finishes_the_current_task_then_exits_0(web_env, busy_worker, coordinator,
                                                       tasks, ollama):
    worker, task_id = busy_worker(web_env, latency=2)
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(40) == 0
    row = tasks.get(task_id)
    assert (row["status"], row["fallback"]) == ("done", False)
    lines = messages(worker)
    asked = lines.index("INFO SIGTERM: finishing the current task (at most 30s), then exiting")
    said_goodbye = lines.index(f"INFO Deregistered {web_env['WORKER_ID']} from "
                               f"{coordinator.url}")
    assert asked < lines.index(f"INFO Task {task_id} done") < said_goodbye
    # The registry knows at once, not after the heartbeat TTL.
    registered = coordinator.worker(web_env["WORKER_ID"])
    assert (registered["alive"], registered["live_instances"]) == (False, [])
    assert registered["stopped_at"] is not None


def test_sigterm_gives_up_after_the_shutdown_timeout(web_env, busy_worker, coordinator, tasks,
                                                     ollama, rds):
    worker, task_id = busy_worker({**web_env, "SHUTDOWN_TIMEOUT": "1"}, latency=30)
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 1
    processing = f"processing:{web_env['WORKER_ID']}"
    assert (f"ERROR The current task did not finish within 1s; exiting, it stays in "
            f"{processing} and is finished at the next start") in messages(worker)
    assert rds.lrange(processing, 0, -1) == [task_id]
    assert coordinator.worker(web_env["WORKER_ID"])["alive"] is False


def test_a_heartbeat_after_the_goodbye_makes_it_alive_again(web_env, start_worker,
                                                           coordinator):
    # A second process of the same worker id (a restart) registers and heartbeats: alive.
    worker = start_worker(web_env)
    worker.wait_for(WAITING)
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(40) == 0
    assert coordinator.worker(web_env["WORKER_ID"])["alive"] is False
    again = start_worker(web_env)
    again.wait_for(WAITING)
    registered = coordinator.worker(web_env["WORKER_ID"])
    assert (registered["alive"], registered["stopped_at"], registered["pid"]) == (
        True, None, again.pid)


def test_second_copy_of_a_worker_id_is_refused_naming_the_first(web_env, start_worker,
                                                               coordinator):
    first = start_worker(web_env)
    first.wait_for(WAITING)
    second = start_worker({**web_env, "WORKER_HOST": "worker-host-b"})
    assert second.wait_exit() == 1
    assert error_of(second) == (
        f"Another worker_web with WORKER_ID={web_env['WORKER_ID']} is already running on "
        f"host worker-host-a pid {first.pid}; stop it there first: two copies would race "
        "for tasks:web")

    first.signal(signal.SIGKILL)
    first.wait_exit()
    third = start_worker(web_env)
    third.wait_for(WAITING, timeout=30)


def test_lost_lock_connection_is_retaken_or_the_worker_exits(web_env, start_worker, pg,
                                                            coordinator):
    worker = start_worker(web_env)
    worker.wait_for(WAITING)
    lock_key = f"hashtext('worker:{web_env['WORKER_ID']}')::bigint & 4294967295"
    terminate = ("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                 f"AND objid::bigint = {lock_key}")
    pg.psql(terminate)
    worker.wait_for("WARNING Lost the lock connection to PostgreSQL")
    wait_until(lambda: len([m for m in messages(worker) if m.startswith("INFO Lock worker:")])
               == 2, 10, "the lock to be taken again")

    # This time another process grabs the lock first: the worker must give way.
    intruder = psycopg2.connect(pg.dsn, application_name=f"worker_web {web_env['WORKER_ID']} "
                                                         "worker-host-z pid=4242")
    intruder.autocommit = True

    def grab() -> bool:
        pg.psql(terminate)
        with intruder.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtext('worker:' || %s))",
                        (web_env["WORKER_ID"],))
            return cur.fetchone()[0]

    try:
        wait_until(grab, 10, "the intruder to get the lock")
        assert worker.wait_exit() == 1
    finally:
        intruder.close()
    assert (f"ERROR Another worker_web with WORKER_ID={web_env['WORKER_ID']} is already "
            "running on host worker-host-z pid 4242; stop it there first: two copies would "
            "race for tasks:web; exiting after the current task") in messages(worker)


# --- start-up checks -----------------------------------------------------------------------

def test_missing_variable_stops_it_at_once(web_env, start_worker):
    env = dict(web_env)
    del env["WORKER_ID"]
    worker = start_worker(env)
    assert worker.wait_exit() == 2
    assert error_of(worker) == ("missing required environment variable: WORKER_ID "
                                "(see docs/workers.md)")


def _fails_at_start(start_worker, env, ok_before: list[str]) -> str:
    worker = start_worker(env)
    assert worker.wait_exit() == 1
    lines = messages(worker)
    for text in ok_before:
        line_index(lines, text)
    assert not any(line.startswith("INFO register") for line in lines)
    return error_of(worker)


def test_wrong_redis_password(web_env, start_worker, redis_server):
    error = _fails_at_start(start_worker, {**web_env, "REDIS_PASSWORD": "not-the-password"}, [])
    assert error == (f"Redis check FAILED at 127.0.0.1:{redis_server.port}: user 'default' "
                     "refused: invalid username-password pair or user is disabled.; fix: "
                     "check REDIS_USERNAME and REDIS_PASSWORD (the worker role derives them "
                     "for this host, worker_<host>, from worker_redis_password_key; run "
                     "site.yml so the redis role has the same user)")


def test_redis_unreachable(web_env, start_worker):
    port = free_port()
    error = _fails_at_start(start_worker, {**web_env, "REDIS_PORT": str(port)}, [])
    assert error.startswith(f"Redis check FAILED at 127.0.0.1:{port}: ")
    assert error.endswith("; fix: check REDIS_HOST/REDIS_PORT, and in redis.conf on that host "
                          "`bind` (must include its LAN address) and `protected-mode`, and "
                          "the firewall")


def test_postgres_login_rejected_names_the_pg_hba_line(web_env, start_worker, pg):
    pg.write_hba(["host all postgres 127.0.0.1/32 scram-sha-256"])
    pg.reload()
    try:
        error = _fails_at_start(start_worker, web_env, ["Redis OK"])
    finally:
        pg.write_hba(["host all all 127.0.0.1/32 scram-sha-256"])
        pg.reload()
    assert error.startswith("PostgreSQL check FAILED at ")
    assert "password=***" in error and pg.password not in error
    assert 'no pg_hba.conf entry for host "127.0.0.1", user "coordinator"' in error
    assert error.endswith("; fix: add `host coordinator coordinator 127.0.0.1/32 "
                          "scram-sha-256` to pg_hba.conf on the PostgreSQL server, then "
                          "reload it")


def test_postgres_wrong_password(web_env, start_worker, pg):
    dsn = pg.dsn.replace(f"password={pg.password}", "password=wrong-password")
    error = _fails_at_start(start_worker, {**web_env, "PG_DSN": dsn}, ["Redis OK"])
    assert 'password authentication failed for user "coordinator"' in error
    assert "wrong-password" not in error
    assert error.endswith("; fix: the password in PG_DSN is wrong; use the role's password")


def test_postgres_user_who_cannot_write_tasks(web_env, start_worker, pg):
    pg.psql("REVOKE UPDATE ON tasks FROM coordinator")
    try:
        error = _fails_at_start(start_worker, web_env, ["Redis OK"])
    finally:
        pg.psql("GRANT UPDATE ON tasks TO coordinator")
    assert error.endswith("cannot write the tasks table: permission denied for table tasks; "
                          "fix: GRANT coordinator_workers TO coordinator, as site.yml does for "
                          "each worker host's login")


def test_searxng_json_disabled_at_start(web_env, start_worker, searxng):
    searxng.config(json_enabled=False)
    error = _fails_at_start(start_worker, web_env, ["Redis OK", "PostgreSQL OK"])
    assert error == (f"SearXNG check FAILED: SearXNG at {searxng.url} answered 403 to "
                     "format=json: its JSON API is disabled; add json to search.formats in "
                     "its settings.yml and restart it")


def test_a_redirect_at_start_is_not_followed(web_env, start_worker):
    # Something other than SearXNG at SEARXNG_URL that redirects (an http -> https proxy).
    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(301)
            self.send_header("Location", "https://searx.example/search")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        error = _fails_at_start(start_worker, {**web_env, "SEARXNG_URL": url},
                                ["Redis OK", "PostgreSQL OK"])
    finally:
        server.shutdown()
    assert error == (f"SearXNG check FAILED: SearXNG at {url} answered 301 with a redirect to "
                     "https://searx.example/search (not followed); check SEARXNG_URL")


def test_ollama_model_missing(web_env, start_worker, ollama):
    env = {**web_env, "OLLAMA_MODEL": "llama3.2:3b"}
    error = _fails_at_start(start_worker, env, ["Redis OK", "PostgreSQL OK", "SearXNG OK"])
    assert error == (f"Ollama check FAILED at {ollama.url}: model llama3.2:3b is not there "
                     f"(it has: {MODEL}); fix: run `ollama pull llama3.2:3b` on worker-host-a")


def test_coordinator_unreachable(web_env, start_worker):
    url = f"http://127.0.0.1:{free_port()}"
    error = _fails_at_start(start_worker, {**web_env, "COORDINATOR_URL": url},
                            ["Redis OK", "PostgreSQL OK", "SearXNG OK", "Ollama OK"])
    assert error.startswith(f"Coordinator check FAILED: not reachable at {url} (")
    assert error.endswith("); fix: check COORDINATOR_URL and that the Coordinator runs")


def test_coordinator_token(web_env, start_worker, pg, redis_server, tmp_path):
    token = "coordinator-test-token-4711"
    guarded = Coordinator(pg, redis_server, tmp_path, token=token)
    try:
        env = {**web_env, "COORDINATOR_URL": guarded.url}
        error = _fails_at_start(start_worker, env, ["Ollama OK"])
        assert error == (f"Coordinator check FAILED at {guarded.url}: 401, fix: set "
                         "COORDINATOR_TOKEN to the Coordinator's token")
        worker = start_worker({**env, "COORDINATOR_TOKEN": token})
        worker.wait_for(WAITING)

        def last_heartbeat() -> str:
            listing = requests.get(f"{guarded.url}/workers", timeout=5,
                                   headers={"Authorization": f"Bearer {token}"}).json()
            me = next(w for w in listing["workers"] if w["worker_id"] == env["WORKER_ID"])
            return me["last_heartbeat"]

        registered = last_heartbeat()
        wait_until(lambda: last_heartbeat() != registered, 10, "a heartbeat with the token")
    finally:
        guarded.stop()
    assert token not in worker.output()


# Last in the file: it restarts the session's PostgreSQL.
def test_postgres_restart_mid_task_lock_retaken_and_result_written(web_env, busy_worker,
                                                                   coordinator, tasks, ollama,
                                                                   pg, rds):
    worker, task_id = busy_worker(web_env, latency=3)
    pg.restart()
    row = tasks.wait_status(task_id, "done", "failed", timeout=30)
    assert (row["status"], row["attempts"]) == ("done", 1)
    assert any(line.startswith(f"ERROR result write of task {task_id} failed: ")
               for line in messages(worker))
    wait_until(lambda: len([m for m in messages(worker) if m.startswith("INFO Lock worker:")])
               == 2, 15, "the lock to be taken again after the restart")
    wait_until(lambda: rds.llen(f"processing:{web_env['WORKER_ID']}") == 0, 10,
               "the id to leave the processing list")



def slow_beats_state(url: str, worker_id: str) -> str:
    body = requests.get(f"{url}/workers", timeout=10).json()
    workers = body["workers"] if isinstance(body, dict) else body
    return next(w["state"] for w in workers if w["worker_id"] == worker_id)


def test_a_drain_reaches_an_idle_worker_at_once_not_at_its_next_heartbeat(
        web_env, start_worker, pg, redis_server, rds, tmp_path):
    # Heartbeats every 100 s (a TTL of 300 s), the first one 100 s after the registration:
    # without the Coordinator's hint in Redis the worker would hear of the drain only then.
    # A database of its own: the session's Coordinator (TTL 2 s) would count this worker dead
    # between two heartbeats.
    dsn = pg.database("drain_hint")
    create_schema(dsn)
    with CoordinatorProcess(dsn, redis_server, tmp_path / "coordinator.log",
                            heartbeat_ttl=300) as slow_beats:
        worker_id = web_env["WORKER_ID"]
        worker = start_worker({**web_env, "PG_DSN": dsn, "COORDINATOR_URL": slow_beats.url})
        worker.wait_for(WAITING)
        hint = contract.drain_hint(worker_id)
        answer = requests.post(f"{slow_beats.url}/workers/{worker_id}/drain", timeout=10)
        assert answer.status_code == 200, answer.text
        assert 0 < rds.ttl(hint) <= 300
        worker.wait_for("INFO Drained: holding no task, taking none until undrained", timeout=10)
        wait_until(lambda: slow_beats_state(slow_beats.url, worker_id) == "drained", 10,
                   "the Coordinator to list the worker drained")
        answer = requests.post(f"{slow_beats.url}/workers/{worker_id}/undrain", timeout=10)
        assert answer.status_code == 200, answer.text
        assert not rds.exists(hint)


def test_a_drained_worker_finishes_its_task_takes_nothing_new_until_undrained(
        web_env, busy_worker, start_worker, coordinator, tasks, ollama):
    worker_id = web_env["WORKER_ID"]
    worker, held = busy_worker(web_env, latency=2)
    answer = requests.post(f"{coordinator.url}/workers/{worker_id}/drain", timeout=10)
    assert answer.status_code == 200 and answer.json()["state"] == "draining"
    worker.wait_for("INFO Drained by the Coordinator: finishing the task held, taking no new "
                    "task from tasks:web until undrained")
    assert tasks.wait_status(held, "done", "failed")["status"] == "done"
    worker.wait_for("INFO Drained: holding no task, taking none until undrained")
    wait_until(lambda: coordinator.worker(worker_id)["state"] == "drained", 10,
               "the Coordinator to list the worker as drained")
    ollama.config(latency=0)
    waiting = coordinator.route("drained", "web_search")
    # A restarted process stays drained: the state is the Coordinator's, not the process's.
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(40) == 0
    again = start_worker(web_env)
    again.wait_for("INFO Drained by the Coordinator: finishing nothing held, taking no new "
                   "task from tasks:web until undrained")
    again.wait_for("INFO Drained: holding no task, taking none until undrained")
    assert tasks.get(waiting)["status"] == "queued"
    answer = requests.post(f"{coordinator.url}/workers/{worker_id}/undrain", timeout=10)
    assert answer.status_code == 200 and answer.json()["changed"] is True
    assert tasks.wait_status(waiting, "done", "failed")["status"] == "done"
    assert "INFO Undrained by the Coordinator: taking tasks from tasks:web again" in \
        messages(again)
