"""The SearXNG stand-in, spoken to with ``requests`` as the web-search worker does."""

from __future__ import annotations

import socket
import time
from urllib.parse import quote_plus, urlsplit

import pytest
import requests

QUERY = "今日の東京の天気は？"
# Headers SearXNG's bot detection lets through (a browser's, in the parts it checks).
BROWSER = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101",
           "Accept": "text/html,application/xhtml+xml,*/*;q=0.8",
           "Accept-Encoding": "gzip, deflate", "Accept-Language": "ja,en;q=0.5"}
RESULT_KEYS = {"url", "title", "content", "engine", "engines", "score", "category"}
# searx/webutils.py get_json_response (number_of_results is gone upstream).
TOP_KEYS = {
    "query",
    "results",
    "answers",
    "corrections",
    "infoboxes",
    "suggestions",
    "unresponsive_engines",
}


def search(base: str, query: str = QUERY, **params: str) -> requests.Response:
    # Never to the third-party site an external bang redirects to.
    return requests.get(f"{base}/search", params={"q": query, **params}, timeout=10,
                        allow_redirects=False)


@pytest.fixture
def searxng(launch):
    return launch("searxng", "--json-enabled")


def test_json_search_has_searxng_shape_and_mentions_the_japanese_query(searxng):
    response = search(searxng.url, format="json")

    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers["Server"] == "searxng-standin"
    answer = response.json()
    assert set(answer) == TOP_KEYS
    assert answer["query"] == QUERY
    assert len(answer["results"]) == 5
    for result in answer["results"]:
        assert set(result) >= RESULT_KEYS
        assert QUERY in result["title"] and QUERY in result["content"]
        assert urlsplit(result["url"]).hostname in {"example.org", "example.com", "example.net"}
        assert result["engine"] in result["engines"]
        assert result["category"] == "general"
    assert answer["unresponsive_engines"] == []


def test_results_are_deterministic_and_differ_between_queries_and_pages(searxng):
    first = search(searxng.url, format="json").json()
    again = search(searxng.url, format="json").json()
    other = search(searxng.url, "weather in Tokyo", format="json").json()
    page2 = search(searxng.url, format="json", pageno="2").json()

    assert first == again
    assert [r["url"] for r in first["results"]] != [r["url"] for r in other["results"]]
    assert [r["url"] for r in first["results"]] != [r["url"] for r in page2["results"]]
    assert "weather in Tokyo" in other["results"][0]["content"]


def test_post_form_search_works_like_get(searxng):
    posted = requests.post(
        f"{searxng.url}/search", data={"q": QUERY, "format": "json"}, timeout=10
    ).json()

    assert posted == search(searxng.url, format="json").json()


def test_html_format_and_no_format_answer_an_html_page(searxng):
    for params in ({"format": "html"}, {}):
        response = search(searxng.url, **params)
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/html")
        assert QUERY in response.text
        assert "https://example." in response.text


def test_index_healthz_and_unknown_path(searxng):
    index = requests.get(f"{searxng.url}/", timeout=5)
    health = requests.get(f"{searxng.url}/healthz", timeout=5)
    missing = requests.get(f"{searxng.url}/nowhere", timeout=5)

    assert index.status_code == 200 and "<form" in index.text
    assert "stand-in" in index.text
    assert (health.status_code, health.text) == (200, "OK")
    assert missing.status_code == 404


def test_missing_query_in_json_is_400_no_query(searxng):
    response = requests.get(f"{searxng.url}/search", params={"format": "json"}, timeout=5)

    assert response.status_code == 400
    assert response.json() == {"error": "No query"}


def test_json_is_off_by_default_as_in_searxng_settings_then_runtime_enable(launch):
    searxng = launch("searxng")

    refused = search(searxng.url, format="json")
    assert refused.status_code == 403
    assert "<title>403 Forbidden</title>" in refused.text
    assert search(searxng.url, format="html").status_code == 200

    assert searxng.config(json_enabled=True)["json_enabled"] is True
    assert search(searxng.url, format="json").status_code == 200


def test_csv_and_rss_are_not_enabled_formats(searxng):
    assert search(searxng.url, format="csv").status_code == 403
    assert search(searxng.url, format="rss").status_code == 403


def test_failure_toggles_at_runtime(searxng):
    assert searxng.config(fail="error")["fail"] == "error"
    failed = search(searxng.url, format="json")
    assert failed.status_code == 500
    assert "Internal Server Error" in failed.text

    assert searxng.config(fail=None)["fail"] is None
    assert len(search(searxng.url, format="json").json()["results"]) == 5


def test_unresponsive_engines_find_nothing_and_are_listed_with_the_reason(searxng):
    answered = search(searxng.url, format="json").json()["results"]
    searxng.config(unresponsive={"qwant": "too many requests", "brave": "CAPTCHA"})

    some = search(searxng.url, format="json").json()
    assert some["unresponsive_engines"] == [["brave", "CAPTCHA"], ["qwant", "too many requests"]]
    assert [result["url"] for result in some["results"]] == [
        result["url"] for result in answered if set(result["engines"]) - {"brave", "qwant"}]
    assert some["results"]
    for result in some["results"]:
        assert not {"brave", "qwant"} & set(result["engines"])
        assert result["engine"] == result["engines"][0]

    every = dict.fromkeys(("duckduckgo", "brave", "wikipedia", "startpage", "qwant"), "timeout")
    searxng.config(unresponsive={**every, "brave": "Suspended: CAPTCHA"})
    none = search(searxng.url, format="json")
    assert none.status_code == 200
    assert none.json()["results"] == [] and none.json()["suggestions"] == []
    assert none.json()["unresponsive_engines"] == [
        ["brave", "Suspended: CAPTCHA"], ["duckduckgo", "timeout"], ["qwant", "timeout"],
        ["startpage", "timeout"], ["wikipedia", "timeout"]]


@pytest.mark.parametrize("how", ["get", "post", "html"])
def test_an_external_bang_is_a_302_to_that_site_whatever_the_format(searxng, how):
    query = "天気 !!g 東京"
    if how == "post":
        response = requests.post(f"{searxng.url}/search", data={"q": query, "format": "json"},
                                 allow_redirects=False, timeout=5)
    else:
        response = requests.get(f"{searxng.url}/search", allow_redirects=False, timeout=5,
                                params={"q": query, "format": "json" if how == "get" else "html"})

    # The bang's word left out, the rest of the query in the site's URL (quote_plus).
    location = f"https://www.google.com/search?q={quote_plus('天気 東京')}"
    assert response.status_code == 302
    assert response.headers["Location"] == location
    assert f'<a href="{location}">' in response.text


def test_a_bang_alone_goes_to_the_site_and_an_unknown_bang_is_searched(searxng):
    alone = search(searxng.url, "!!ddg", format="json")
    unknown = search(searxng.url, "!!nosuchbang 東京", format="json")

    assert (alone.status_code, alone.headers["Location"]) == (302, "http://duckduckgo.com")
    assert unknown.status_code == 200 and unknown.json()["results"]


def test_the_limiter_is_off_by_default_and_then_turns_scripts_away(searxng):
    assert searxng.config()["limiter"] is False
    assert search(searxng.url, format="json").status_code == 200  # python-requests' headers

    searxng.config(limiter=True)
    refused = search(searxng.url, format="json")
    assert (refused.status_code, refused.text) == (429, "Too Many Requests")
    for missing in ("Accept-Language", "Accept-Encoding", "Accept"):
        headers = {**BROWSER, missing: "identity" if missing == "Accept-Encoding" else ""}
        answer = requests.post(f"{searxng.url}/search", data={"q": QUERY, "format": "json"},
                               headers=headers, timeout=5)
        assert answer.status_code == 429, missing
    assert requests.get(f"{searxng.url}/healthz", timeout=5).status_code == 200
    allowed = requests.post(f"{searxng.url}/search", data={"q": QUERY, "format": "json"},
                            headers=BROWSER, timeout=5)
    assert allowed.status_code == 200 and allowed.json()["results"]
    assert "limiter: BLOCK 127.0.0.1: bot detected, HTTP header User-Agent: python-requests/" \
        in searxng.log.read_text()


def test_the_limiter_counts_requests_per_address(searxng):
    searxng.config(limiter=True)

    def get_json() -> int:
        return requests.get(f"{searxng.url}/search", params={"q": QUERY, "format": "json"},
                            headers=BROWSER, timeout=5).status_code

    def post_json() -> int:
        return requests.post(f"{searxng.url}/search", data={"q": QUERY, "format": "json"},
                             headers=BROWSER, timeout=5).status_code

    # API_WINDOW: 4 an hour asking format=json in the URL; a POSTed format is not counted.
    assert [get_json() for _ in range(5)] == [200] * 4 + [429]
    # BURST_WINDOW: 15 in 20 s, whatever the format (the 4 let through above count).
    assert [post_json() for _ in range(12)] == [200] * 11 + [429]


def test_a_request_head_over_uwsgi_buffer_size_is_dropped_unanswered(searxng):
    # 900 Japanese characters: about 8100 bytes percent-encoded, twice in uWSGI's block.
    long_query = "東" * 900
    with pytest.raises(requests.ConnectionError):
        search(searxng.url, long_query, format="json")
    assert "invalid request block size: " in searxng.log.read_text()
    assert "(max 8192)...skip" in searxng.log.read_text()
    assert search(searxng.url, "東" * 300, format="json").status_code == 200

    posted = requests.post(f"{searxng.url}/search", data={"q": long_query, "format": "json"},
                           timeout=10)
    assert posted.status_code == 200 and posted.json()["query"] == long_query

    searxng.config(uwsgi_buffer_size=0)
    assert search(searxng.url, long_query, format="json").status_code == 200


def test_a_request_line_over_what_any_server_reads_is_dropped_too(searxng):
    with socket.create_connection(("127.0.0.1", int(searxng.url.rsplit(":", 1)[1]))) as conn:
        conn.sendall(b"GET /search?q=" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = conn.recv(100)
        except ConnectionResetError:  # closed with the rest of the line unread
            answer = b""
    assert answer == b""


def test_timeout_failure_outlasts_the_client_timeout(searxng):
    searxng.config(fail="timeout", hang_seconds=5)

    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(f"{searxng.url}/search", params={"q": QUERY, "format": "json"}, timeout=0.5)
    searxng.config(fail=False)
    assert search(searxng.url, format="json").status_code == 200


def test_latency_is_at_least_the_setting(searxng):
    searxng.config(latency=0.6)

    started = time.monotonic()
    assert search(searxng.url, format="json").status_code == 200
    assert time.monotonic() - started >= 0.6


def test_result_count_setting(searxng):
    searxng.config(results=2)
    assert len(search(searxng.url, format="json").json()["results"]) == 2


def test_requests_are_counted_per_endpoint(searxng):
    search(searxng.url, format="json")
    search(searxng.url, format="json")
    requests.get(f"{searxng.url}/healthz", timeout=5)

    counts = searxng.config()["requests"]
    assert counts == {"/search": 2, "/healthz": 1}


def test_bad_settings_are_refused_with_a_one_line_reason(searxng):
    unknown = requests.post(f"{searxng.url}/_standin/config", json={"colour": 1}, timeout=5)
    wrong = requests.post(f"{searxng.url}/_standin/config", json={"latency": -1}, timeout=5)
    mode = requests.post(f"{searxng.url}/_standin/config", json={"fail": "boom"}, timeout=5)

    assert unknown.status_code == 400
    assert unknown.json()["error"] == (
        "unknown setting 'colour'; the settings are: fail, hang_seconds, json_enabled, "
        "latency, limiter, results, unresponsive, uwsgi_buffer_size"
    )
    assert wrong.json()["error"] == "latency: expected a number >= 0, got -1"
    assert mode.json()["error"] == (
        'fail: expected null (no failure) or one of "error", "timeout", got \'boom\''
    )
    assert searxng.config()["latency"] == 0.0


def test_a_config_read_back_can_be_posted_again(searxng):
    current = searxng.config()
    current["results"] = 3

    assert searxng.config(**current)["results"] == 3


def test_environment_variables_set_the_start_settings(launch):
    searxng = launch("searxng", env={"STANDIN_LATENCY": "0.25", "STANDIN_JSON_ENABLED": "on",
                                     "STANDIN_UNRESPONSIVE": '{"brave": "CAPTCHA"}'})

    config = searxng.config()
    assert config["standin"] == "searxng-standin"
    assert config["latency"] == 0.25
    assert config["json_enabled"] is True
    assert config["unresponsive"] == {"brave": "CAPTCHA"}
