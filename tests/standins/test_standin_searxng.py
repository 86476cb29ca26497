"""The SearXNG stand-in, spoken to with ``requests`` as the web-search worker does."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest
import requests

QUERY = "今日の東京の天気は？"
RESULT_KEYS = {"url", "title", "content", "engine", "engines", "score", "category"}
TOP_KEYS = {
    "query",
    "number_of_results",
    "results",
    "answers",
    "corrections",
    "infoboxes",
    "suggestions",
    "unresponsive_engines",
}


def search(base: str, query: str = QUERY, **params: str) -> requests.Response:
    return requests.get(f"{base}/search", params={"q": query, **params}, timeout=10)


@pytest.fixture
def searxng(launch):
    return launch("searxng")


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


def test_json_disabled_at_start_answers_403_like_searxng_then_runtime_enable(launch):
    searxng = launch("searxng", "--json-enabled", "false")

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

    searxng.config(fail="empty")
    empty = search(searxng.url, format="json").json()
    assert empty["results"] == []
    assert empty["number_of_results"] == 0
    assert ["duckduckgo", "timeout"] in empty["unresponsive_engines"]

    assert searxng.config(fail=None)["fail"] is None
    assert len(search(searxng.url, format="json").json()["results"]) == 5


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
        "unknown setting 'colour'; the settings are: "
        "fail, hang_seconds, json_enabled, latency, results"
    )
    assert wrong.json()["error"] == "latency: expected a number >= 0, got -1"
    assert mode.json()["error"] == (
        'fail: expected null (no failure) or one of "error", "timeout", "empty", got \'boom\''
    )
    assert searxng.config()["latency"] == 0.0


def test_a_config_read_back_can_be_posted_again(searxng):
    current = searxng.config()
    current["results"] = 3

    assert searxng.config(**current)["results"] == 3


def test_environment_variables_set_the_start_settings(launch):
    searxng = launch("searxng", env={"STANDIN_LATENCY": "0.25", "STANDIN_JSON_ENABLED": "off"})

    config = searxng.config()
    assert config["standin"] == "searxng-standin"
    assert config["latency"] == 0.25
    assert config["json_enabled"] is False
