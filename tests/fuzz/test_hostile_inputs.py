"""Hostile inputs sent by hand: huge and poisoned prompts, bad ids, absurd task types and a
flood of long-polls. The Coordinator must answer each with a 4xx that says what is wrong (or
serve it), stay up, and keep its memory bounded."""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg2
import pytest

from lab.throwaway import ThrowawayPostgres
from tests.fuzz.conftest import SERVICE_OPEN_FILES, TOKEN, assert_useful_error, rss_mb
from tests.workers.conftest import Coordinator

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def route(client: httpx.Client, prompt: str, task_type: str = "web_search") -> httpx.Response:
    return client.post("/route", json={"prompt": prompt, "task_type": task_type})


def test_ten_megabyte_prompts_get_413_without_growing_memory(guarded: Coordinator,
                                                             client: httpx.Client) -> None:
    huge = "x" * (10 * 1024 * 1024)
    route(client, "warm-up")
    before = rss_mb(guarded.process.pid)
    for _ in range(8):
        response = route(client, huge)
        assert response.status_code == 413
        assert "bytes or more, over the limit of" in assert_useful_error(response)
    grown = rss_mb(guarded.process.pid) - before
    # Refused from Content-Length before reading: 8 x 10 MB must not stay resident.
    assert grown < 50, f"RSS grew {grown:.0f} MB over eight 10 MB requests"
    assert client.get("/health").status_code == 200


def test_nul_bytes_in_a_prompt_are_refused_with_a_reason(client: httpx.Client) -> None:
    response = route(client, "before\x00after")
    assert response.status_code == 422
    assert assert_useful_error(response) == (
        "'prompt' contains a NUL character (\\u0000), which PostgreSQL text cannot store: "
        "remove it")


@pytest.mark.parametrize("prompt", ["'; DROP TABLE tasks; --", "\\x00 E'\\\\000' $$ $1 %s",
                                    "tabs\tand\r\nnewlines", "é" * 1000, "\u202e\ufeff zero width"])
def test_sql_and_odd_text_is_stored_verbatim(client: httpx.Client, pg: ThrowawayPostgres,
                                             prompt: str) -> None:
    response = route(client, prompt)
    assert response.status_code == 201, response.text
    task_id = response.json()["task_id"]
    assert client.get(f"/task/{task_id}").json()["status"] == "queued"
    with psycopg2.connect(pg.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT prompt FROM tasks WHERE id = %s", (task_id,))
        assert cur.fetchone() == (prompt,)
    conn.close()


@pytest.mark.parametrize("task_id", ["not-a-uuid", "0" * 36, "1' OR '1'='1", "%00",
                                     "x" * 5000, "00000000-0000-0000-0000-00000000000g"])
def test_invalid_task_ids_get_a_4xx_naming_the_problem(client: httpx.Client,
                                                       task_id: str) -> None:
    response = client.get(f"/task/{task_id}")
    message = assert_useful_error(response)
    assert response.status_code in (404, 422), response.text
    assert "UUID" in message or "no task" in message or "not found" in message.lower()


def test_a_task_type_of_a_thousand_characters_is_refused(client: httpx.Client) -> None:
    response = route(client, "p", "t" * 1000)
    assert response.status_code == 422
    message = assert_useful_error(response)
    assert "task_type" in message
    assert len(message) < 600, "the message should not echo the whole value"


@contextlib.contextmanager
def open_files(needed: int) -> Iterator[None]:
    """This (client) process's soft open-file limit raised to ``needed`` for the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= needed, f"the hard open-file limit {hard} is below the {needed} needed"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_file_limit(pid: int) -> int:
    """A process's soft open-file limit, from /proc."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError(f"no open-file limit for pid {pid}")


def test_thousands_of_concurrent_long_polls(guarded: Coordinator,
                                            client: httpx.Client) -> None:
    # Started with systemd's soft limit of 1024 files, the Coordinator raised its own: more
    # long-polls than that are served, and a new client still gets an answer.
    limit = open_file_limit(guarded.process.pid)
    assert limit > 2000 > SERVICE_OPEN_FILES
    assert f"(open-file limit {limit})" in guarded.process.wait_for("listening on")
    # A web task no worker takes (none runs here): every poll waits its full time.
    task_id = route(client, "nobody takes this").json()["task_id"]
    before = rss_mb(guarded.process.pid)

    def health() -> int:
        # Its own connection from another thread: the flood's event loop is busy.
        return httpx.get(f"{guarded.url}/health", timeout=20).status_code

    async def flood() -> tuple[list[int], list[int]]:
        limits = httpx.Limits(max_connections=2100, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=guarded.url, headers=AUTH, timeout=90,
                                     limits=limits) as http:
            polls = []
            for _ in range(8):  # ramp up as clients arriving do, 250 at a time
                polls += [asyncio.create_task(http.get(f"/task/{task_id}",
                                                       params={"wait": 25}))
                          for _ in range(250)]
                await asyncio.sleep(0.5)
            await asyncio.sleep(3)
            answers = [await asyncio.to_thread(health) for _ in range(3)]
            results = await asyncio.gather(*polls, return_exceptions=True)
        codes = [r.status_code if isinstance(r, httpx.Response) else repr(r) for r in results]
        return codes, answers

    with open_files(2200):
        codes, answers = asyncio.run(flood())
    assert answers == [200, 200, 200]
    assert codes.count(200) == 2000, {c: codes.count(c) for c in set(codes)}
    grown = rss_mb(guarded.process.pid) - before
    assert grown < 100, f"RSS grew {grown:.0f} MB for 2000 long-polls"
    assert client.get("/health").status_code == 200


def test_nul_bytes_in_worker_calls_are_refused_with_a_reason(client: httpx.Client) -> None:
    # Found by the fuzzer: these reached PostgreSQL and came back as a 503.
    body = {"worker_id": "fuzz-nul", "host": "box\x00", "kind": "web",
            "instance_id": "e3e70682-c209-4cac-629f-6fbed82c07cd"}
    response = client.post("/workers/register", json=body)
    assert response.status_code == 422
    assert assert_useful_error(response) == \
        "'host': NUL characters cannot be stored; remove them"
    response = client.post("/workers/fuzz%00nul/heartbeat",
                           json={"instance_id": body["instance_id"]})
    assert response.status_code == 422
    assert assert_useful_error(response) == (
        "'worker_id': not a name: use 1 to 128 letters, digits and . _ @ -, starting with a "
        "letter or digit")


def test_numbers_beyond_postgresql_integer_are_refused(client: httpx.Client) -> None:
    # Found by the fuzzer: a pid of 2**31 came back as a 503 (integer out of range).
    response = client.post("/workers/fuzz-big/heartbeat",
                           json={"instance_id": "e3e70682-c209-4cac-629f-6fbed82c07cd",
                                 "pid": 2**31})
    assert response.status_code == 422
    assert assert_useful_error(response).startswith("'pid': Input should be less than or "
                                                    "equal to 2147483647")


def test_a_field_name_with_a_newline_gets_a_one_line_error(client: httpx.Client) -> None:
    # Found by the fuzzer: the unknown key was echoed raw, newline included.
    response = client.post("/workers/fuzz-nl/heartbeat",
                           json={"instance_id": "e3e70682-c209-4cac-629f-6fbed82c07cd",
                                 "a\nb": 1})
    assert response.status_code == 422
    assert assert_useful_error(response) == \
        "unknown field 'a\\nb': see /docs for the allowed fields"
