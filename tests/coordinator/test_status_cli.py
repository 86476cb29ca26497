"""``python -m coordinator status``: its formatting (pure), and the command run as a subprocess
from files/ against an in-process Coordinator with a token."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from coordinator import status_cli as cli
from coordinator.config import DEFAULT
from lab.throwaway import free_port

from .coordkit import FILES

TOKEN = "t"
TASK_ID = "0b7e2f4c-1111-4222-8333-444455556666"


def worker(**fields: object) -> dict:
    row = {"worker_id": "w1", "host": "node-a", "kind": "inference", "state": "alive",
           "seconds_since_heartbeat": 1.24, "in_flight": 2, "version": "0.3.1",
           "last_error": None, "probe_at": "2026-12-01T10:00:00+00:00", "probe_ok": True,
           "probe_seconds": 0.42, "probe_error": None}
    return row | fields


def failed_task(**fields: object) -> dict:
    row = {"task_id": TASK_ID, "task_type": "web_search", "status": "failed",
           "worker": "web-worker", "worker_id": "web1",
           "error": "SearXNG did not answer\nTraceback ...",
           "attempts": 3, "max_attempts": 3, "created_at": "2026-12-01T10:00:00+00:00",
           "finished_at": "2026-12-01T11:00:05.123+01:00"}
    return row | fields


# -- formatting --------------------------------------------------------------------------------


def test_the_workers_table_has_its_columns_aligned() -> None:
    text = cli.format_workers([
        worker(),
        worker(worker_id="a-much-longer-worker", host="h", kind="web", state="draining",
               seconds_since_heartbeat=300, in_flight=10, version=None, probe_at=None,
               probe_ok=None, probe_seconds=None,
               last_error="Ollama at http://x:11434 refused the connection"),
    ])
    lines = text.splitlines()
    assert lines[0].split() == ["id", "host", "kind", "state", "heartbeat", "in", "flight",
                                "version", "last", "probe", "(UTC)", "probe", "last", "error"]
    starts = [lines[0].index(h) for h in ("host", "kind", "state", "heartbeat", "version",
                                          "last probe (UTC)", "probe  ", "last error")]
    for line, (host, kind, state, heartbeat, version, probed, probe) in zip(lines[1:], [
            ("node-a", "inference", "alive", "1.2 s ago", "0.3.1", "2026-12-01 10:00:00",
             "ok in 0.4 s"),
            ("h", "web", "draining", "5 min ago", "-", "-", "not probed yet")], strict=True):
        assert [line[s:].split("  ")[0] for s in starts[:7]] == [
            host, kind, state, heartbeat, version, probed, probe]
    assert lines[2][starts[7]:] == "Ollama at http://x:11434 refused the connection"
    assert lines[1][starts[7]:] == "-"
    # in flight is right-aligned under its header
    end = lines[0].index("in flight") + len("in flight")
    assert lines[1][:end].endswith(" 2") and lines[2][:end].endswith("10")
    assert all(line == line.rstrip() for line in lines)


def test_a_long_or_multiline_error_is_cut_to_one_short_line() -> None:
    long = "x" * 200
    text = cli.format_workers([worker(last_error=long)])
    cell = text.splitlines()[1].split("  ")[-1]
    assert len(cell) == cli.ERROR_WIDTH and cell.endswith("...")
    text = cli.format_workers([worker(last_error="\n  first line\n second line\x1b[31m")])
    assert text.splitlines()[1].endswith("first line")
    # control characters from the server never reach the terminal
    text = cli.format_workers([worker(last_error="red \x1b[31mtext", host="a\tb\rc")])
    assert "\x1b" not in text and "\r" not in text and "\t" not in text
    assert "red ?[31mtext" in text and "a b c" in text


def test_cut_and_first_line() -> None:
    assert cli.cut("abc", 3) == "abc"
    assert cli.cut("abcdef", 5) == "ab..."
    assert cli.clean(cli.first_line(None, cli.DASH)) == "-"
    assert cli.clean(cli.first_line("\n\n", cli.DASH)) == "-"
    assert cli.clean(cli.first_line("\n  one  two \nthree", cli.DASH)) == "one two"
    # An exception without a message is named by its type.
    assert cli.first_line(TimeoutError()) == "TimeoutError"
    assert cli.first_line(TimeoutError("late\nand more")) == "late"


def test_empty_lists_say_so() -> None:
    assert cli.format_workers([]) == "no worker has registered"
    assert cli.format_failures({"tasks": [], "more": False}) == "no failed task"
    assert cli.format_queues({"queues": [], "waiting": 0}).splitlines()[0] == "no queue"


def test_the_queues_table_and_the_waiting_count() -> None:
    text = cli.format_queues({"queues": [
        {"queue": "tasks:web", "depth": 3, "in_flight": 1, "queued": 4},
        {"queue": "tasks:cpu:w1", "depth": 12, "in_flight": 0, "queued": 12}], "waiting": 7})
    lines = text.splitlines()
    assert lines[0].split() == ["queue", "depth", "in", "flight", "queued"]
    assert lines[1].split() == ["tasks:web", "3", "1", "4"]
    assert lines[2].split() == ["tasks:cpu:w1", "12", "0", "12"]
    assert lines[1].index("3") == lines[2].index("12") + 1  # numbers right-aligned
    assert lines[3] == "waiting for a worker (no queue yet): 7"
    assert cli.format_queues({"queues": [], "waiting": 0}).endswith(": none")


def test_the_failures_show_time_short_id_type_worker_and_the_error_first_line() -> None:
    text = cli.format_failures({"tasks": [
        failed_task(), failed_task(worker_id=None, worker="default", finished_at=None,
                                   error="x" * 300)], "more": True})
    lines = text.splitlines()
    assert lines[0].split() == ["time", "(UTC)", "id", "type", "worker", "attempts", "error"]
    assert lines[1].split("  ")[0] == "2026-12-01 10:00:05"  # UTC
    assert lines[1].split()[2:] == ["0b7e2f4c", "web_search", "web1", "3/3", "SearXNG", "did",
                                    "not", "answer"]
    assert lines[2].startswith("2026-12-01 10:00:00") and " default " in lines[2]
    assert lines[2].endswith("...") and len(lines[2].split()[-1]) == cli.FAILURE_WIDTH
    assert "older failures exist" in lines[3]


def test_the_summary_counts_workers_by_state() -> None:
    line = cli.format_summary("http://c:8000", {"workers": [
        worker(), worker(state="dead"), worker(state="alive")], "heartbeat_ttl": 15.0})
    assert line == ("Coordinator at http://c:8000: 3 worker(s) (2 alive, 1 dead); "
                    "heartbeat TTL 15 s")


def test_the_default_url_comes_from_the_config_defaults_or_the_service_environment() -> None:
    assert cli.default_url({}) == f"http://{DEFAULT.bind}:{DEFAULT.port}"
    assert cli.default_url({"COORDINATOR_BIND": "0.0.0.0", "COORDINATOR_PORT": "9001"}) == \
        "http://127.0.0.1:9001"
    assert cli.default_url({"COORDINATOR_BIND": "::1"}) == f"http://[::1]:{DEFAULT.port}"


def test_the_token_file_is_the_token_or_the_service_environment_file(tmp_path) -> None:
    plain = tmp_path / "token"
    plain.write_text("s3cret\n")
    assert cli.read_token_file(str(plain)) == "s3cret"
    env = tmp_path / "coordinator.env"
    env.write_text('# managed\nPG_DSN="host=x password=\'p\'"\nCOORDINATOR_TOKEN="a\\"b"\n')
    assert cli.read_token_file(str(env)) == 'a"b'
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no token"):
        cli.read_token_file(str(empty))


def test_an_http_error_shows_the_servers_error_text() -> None:
    assert cli.http_error_line(422, "Unprocessable", b'{"error": "limit: too big"}',
                               "/tasks") == "GET /tasks answered 422: limit: too big"
    assert cli.http_error_line(502, "Bad Gateway", b"", "/workers") == \
        "GET /workers answered 502: Bad Gateway"
    assert "refused the token (401)" in cli.http_error_line(401, "", b"{}", "/workers")


@pytest.mark.parametrize("url", ["ftp://host", "not a url", "http://host:port"])
def test_an_invalid_url_is_one_line_and_exit_1(url: str) -> None:
    err = io.StringIO()
    assert cli.main(["--url", url], {}, out=io.StringIO(), err=err) == 1
    assert err.getvalue().count("\n") == 1
    assert err.getvalue().startswith(f"coordinator status: invalid Coordinator URL {url!r}")


def test_bad_arguments_exit_2(capsys) -> None:
    for argv in (["--failures", "x"], ["--failures", "501"], ["--token", "x"], ["--nope"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv, {})
        assert exited.value.code == 2
    assert "--failures" in capsys.readouterr().err


# -- the command against a running Coordinator -------------------------------------------------


def run_status(url: str, *args: str, token: str | None = TOKEN, **env: str
               ) -> subprocess.CompletedProcess:
    """``python -m coordinator status`` from files/, as an operator runs it."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("PG_", "REDIS_", "COORDINATOR_"))}
    full |= {"COORDINATOR_URL": url, **env}
    if token is not None:
        full["COORDINATOR_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "coordinator", "status", *args], cwd=FILES,
                          env=full, capture_output=True, text=True, timeout=60)


@dataclass
class Busy:
    url: str
    port: int
    task_id: str


@pytest.fixture
def busy(start_server, make_worker) -> Busy:
    """A Coordinator with a token, an inference worker drained, a web worker, and a failed
    web task."""
    server = start_server(COORDINATOR_TOKEN=TOKEN)
    make_worker(server, "w1", device="cpu", token=TOKEN).start()
    web = make_worker(server, "web1", kind="web", token=TOKEN).start()
    with server.client(TOKEN) as client:
        assert client.post("/workers/w1/drain").status_code == 200
        resp = client.post("/route", json={"prompt": "p", "task_type": "web_search"})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]
    assert web.take() == task_id
    assert web.finish(task_id, web.claim(task_id), result=None, status="failed",
                      error="SearXNG at http://searx:8080 timed out\nsecond line")
    return Busy(server.url, server.cfg.port, task_id)


def test_status_lists_the_workers_with_their_state_the_queues_and_the_failure(
        busy: Busy) -> None:
    done = run_status(busy.url)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = done.stdout
    assert out.startswith(f"Coordinator at {busy.url}: 2 worker(s) (1 alive, 1 draining)")
    lines = out.splitlines()
    workers = lines[lines.index("WORKERS") + 1:lines.index("QUEUES") - 1]
    assert workers[0].split()[:5] == ["id", "host", "kind", "state", "heartbeat"]
    assert workers[1].split()[:4] == ["w1", "host-w1", "inference", "draining"]
    assert workers[2].split()[:4] == ["web1", "host-web1", "web", "alive"]
    queues = lines[lines.index("QUEUES") + 1:]
    assert any(line.split()[:1] == ["tasks:web"] for line in queues)
    failures = lines[lines.index("RECENT FAILURES (newest first)") + 1:]
    assert failures[1].split()[2:5] == [busy.task_id.split("-")[0], "web_search", "web1"]
    assert failures[1].endswith("SearXNG at http://searx:8080 timed out")
    assert "second line" not in out


def test_status_json_is_the_three_answers(busy: Busy) -> None:
    done = run_status(busy.url, "--json", "--failures", "1")
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert set(answers) == {"workers", "queues", "tasks"}
    assert {w["worker_id"]: w["state"] for w in answers["workers"]["workers"]} == {
        "w1": "draining", "web1": "alive"}
    assert [t["task_id"] for t in answers["tasks"]["tasks"]] == [busy.task_id]
    assert "waiting" in answers["queues"]


def test_status_reads_the_token_from_a_file(busy: Busy, tmp_path) -> None:
    env_file = tmp_path / "coordinator.env"
    env_file.write_text(f'REDIS_HOST="x"\nCOORDINATOR_TOKEN="{TOKEN}"\n')
    done = run_status(busy.url, "--token-file", str(env_file), "--failures", "0", token=None)
    assert done.returncode == 0, done.stderr
    assert "RECENT FAILURES" not in done.stdout and "draining" in done.stdout


@pytest.mark.parametrize("token", ["wrong", None])
def test_a_wrong_or_missing_token_is_the_401_line_and_exit_1(busy: Busy,
                                                             token: str | None) -> None:
    done = run_status(busy.url, token=token)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == ("coordinator status: the Coordinator refused the token (401): set "
                           "COORDINATOR_TOKEN or --token-file to its token\n")


def test_an_unreachable_coordinator_is_one_line_and_exit_1() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = run_status(url)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (f"coordinator status: coordinator not reachable at {url} "
                           "(Connection refused): check COORDINATOR_URL (or --url) and that "
                           "the service runs\n")


def test_the_url_defaults_to_the_service_environment(busy: Busy) -> None:
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("PG_", "REDIS_", "COORDINATOR_"))}
    full |= {"COORDINATOR_TOKEN": TOKEN, "COORDINATOR_BIND": "0.0.0.0",
             "COORDINATOR_PORT": str(busy.port)}
    done = subprocess.run([sys.executable, "-m", "coordinator", "status"], cwd=FILES, env=full,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Coordinator at http://127.0.0.1:{busy.port}:")
