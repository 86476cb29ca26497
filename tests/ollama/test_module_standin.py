"""ollama_model run for real by Ansible against the Ollama stand-in (a subprocess)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from lab.standins.ollama import DEFAULT_MODEL, NO_MANIFEST, describe, layers_for

from ..library_kit import serving
from .conftest import model_names

HF = DEFAULT_MODEL


def test_pull_missing_model_then_nothing_to_do(standin, run_module):
    first = run_module({"name": "llama3.2:3b", "host": standin.url})
    assert first["changed"] is True
    assert first["operation"] == "pull"
    expected_bytes = sum(size for _, size in layers_for("llama3.2:3b"))
    assert first["pull"] == {
        "status": "success",
        "total_bytes": expected_bytes,
        "completed_bytes": expected_bytes,
        "layers": len(layers_for("llama3.2:3b")),
    }
    assert first["msg"] == f"pulled llama3.2:3b ({expected_bytes} bytes)"
    assert first["model"]["name"] == "llama3.2:3b"
    assert model_names(standin) == sorted([HF, "llama3.2:3b"])

    second = run_module({"name": "llama3.2:3b", "host": standin.url})
    assert second["changed"] is False
    assert second["operation"] == "none"
    assert second["msg"] == "llama3.2:3b is already present"
    assert "pull" not in second
    assert standin.config()["requests"]["/api/pull"] == 1


def test_implicit_latest_tag_matches(standin, run_module):
    assert run_module({"name": "tinyllama", "host": standin.url})["changed"] is True
    assert model_names(standin) == sorted([HF, "tinyllama:latest"])
    again = run_module({"name": "tinyllama:latest", "host": standin.url})
    assert again["changed"] is False
    assert again["model"]["name"] == "tinyllama:latest"


def test_present_model_in_another_spelling_is_not_pulled(standin, run_module):
    result = run_module({"name": HF.lower(), "host": standin.url})
    assert result["changed"] is False
    assert "/api/pull" not in standin.config()["requests"]


def test_check_mode_reports_the_pull_without_pulling(standin, run_module):
    before = model_names(standin)
    result = run_module({"name": "llama3.2:3b", "host": standin.url}, check=True)
    assert result["changed"] is True
    assert result["operation"] == "pull"
    assert result["msg"] == "would pull llama3.2:3b (check mode)"
    assert result["model"] is None
    assert model_names(standin) == before
    assert "/api/pull" not in standin.config()["requests"]


def test_pull_error_in_the_stream_fails_with_ollamas_message(standin, run_module):
    message = "pull model manifest: 412: this model requires macOS"
    standin.config(pull_errors={"mlx-only:1b": message})
    result = run_module({"name": "mlx-only:1b", "host": standin.url})
    assert result["failed"] is True
    assert result["msg"] == f"Ollama could not pull mlx-only:1b: {message}"
    assert model_names(standin) == [HF]


def test_unknown_model_fails_with_ollamas_message(standin, run_module):
    standin.config(pullable=[HF])
    result = run_module({"name": "no-such-model:7b", "host": standin.url})
    assert result["failed"] is True
    assert result["msg"] == f"Ollama could not pull no-such-model:7b: {NO_MANIFEST}"


def test_http_error_listing_models_fails_with_ollamas_message(standin, run_module):
    standin.config(fail="error", fail_message="something broke inside Ollama")
    result = run_module({"name": "llama3.2:3b", "host": standin.url})
    assert result["failed"] is True
    assert result["msg"] == (
        f"Ollama at {standin.url} could not list its models: something broke inside Ollama"
    )


def test_stalled_pull_fails_saying_what_to_raise(standin, run_module):
    # The stand-in sends a progress line every pull_seconds / 4 = 15 s; the module waits 3.
    standin.config(pull_seconds=60)
    result = run_module({"name": "llama3.2:3b", "host": standin.url, "timeout": 3})
    assert result["failed"] is True
    assert result["msg"] == (
        f"Ollama could not pull llama3.2:3b: no progress from {standin.url} for 3 s; "
        "raise timeout if the download is slow"
    )


class PullRefusingOllama(BaseHTTPRequestHandler):
    """Lists no models and answers every pull with an HTTP error, body as Ollama words it."""

    def do_GET(self) -> None:
        self.reply(200, {"models": []})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.reply(500, {"error": "max retries exceeded: unexpected EOF"})

    def reply(self, status: int, document: object) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the module's result, not the server's log."""


@pytest.fixture
def refusing_server() -> Iterator[str]:
    with serving(PullRefusingOllama) as url:
        yield url


def test_http_error_on_pull_fails_with_ollamas_message(refusing_server, run_module):
    result = run_module({"name": "llama3.2:3b", "host": refusing_server})
    assert result["failed"] is True
    assert (
        result["msg"] == "Ollama could not pull llama3.2:3b: max retries exceeded: unexpected EOF"
    )


# In check mode too: the ollama role's models.yml reads this line to tell a server its run
# did not start from one that is down.
@pytest.mark.parametrize("check", [False, True])
def test_unreachable_ollama_is_one_line(closed_url, run_module, check):
    result = run_module({"name": "llama3.2:3b", "host": closed_url}, check=check)
    assert result["failed"] is True
    assert result["msg"] == (
        f"Ollama not reachable at {closed_url}: is the service running / is OLLAMA_HOST right? "
        "(Connection refused)"
    )


def test_host_without_scheme_is_accepted(standin, run_module):
    result = run_module({"name": HF, "host": standin.url.removeprefix("http://")})
    assert result["changed"] is False


def test_absent_deletes_then_nothing_to_do(standin, run_module):
    checked = run_module({"name": HF, "state": "absent", "host": standin.url}, check=True)
    assert checked["changed"] is True
    assert checked["msg"] == f"would delete {HF} (check mode)"
    assert model_names(standin) == [HF]

    deleted = run_module({"name": HF.lower(), "state": "absent", "host": standin.url})
    assert deleted["changed"] is True
    assert deleted["operation"] == "delete"
    assert deleted["model"] is None
    assert model_names(standin) == []

    again = run_module({"name": HF, "state": "absent", "host": standin.url})
    assert again["changed"] is False
    assert again["msg"] == f"{HF} is already absent"


def test_invalid_name_fails_before_asking_ollama(standin, run_module):
    result = run_module({"name": "bad name", "host": standin.url})
    assert result["failed"] is True
    assert result["msg"] == (
        "invalid model name 'bad name': expected [host/][namespace/]model[:tag], "
        "for example llama3.2:3b or hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M"
    )
    assert standin.config()["requests"] == {}


def test_a_pinned_digest_is_returned_checked_and_kept(standin, run_module):
    listed = run_module({"name": HF, "host": standin.url})
    pin = listed["digest"]
    assert listed["model"]["digest"] == pin and len(pin) == 64

    same = run_module({"name": HF, "host": standin.url, "digest": f"sha256:{pin.upper()}"})
    assert (same["changed"], same["digest"]) == (False, pin)

    standin.config(weights={HF: "retrained"})
    moved = standin.get("/api/tags")["models"][0]["digest"]
    for check in (False, True):
        refused = run_module({"name": HF, "host": standin.url, "digest": pin}, check=check)
        assert refused["failed"] is True
        assert refused["msg"] == (
            f"{HF} on {standin.url} has digest {moved[:12]}, pinned {pin[:12]}: same name, "
            "other weights; pull the pinned weights there, or change the pin")
    assert "/api/pull" not in standin.config()["requests"]


def test_an_absent_model_pulled_with_other_weights_than_pinned_fails_saying_so(standin,
                                                                             run_module):
    expected = describe("llama3.2:3b")["digest"]  # as /api/tags lists the usual weights
    standin.config(weights={"llama3.2:3b": "moved-tag"})
    result = run_module({"name": "llama3.2:3b", "host": standin.url, "digest": expected})
    assert result["failed"] is True
    assert result["msg"].startswith(f"pulled, and it stays: llama3.2:3b on {standin.url} has "
                                    f"digest ")
    assert result["msg"].endswith(f", pinned {expected[:12]}: same name, other weights; pull "
                                  "the pinned weights there, or change the pin")
    assert "llama3.2:3b" in model_names(standin)


@pytest.mark.parametrize(("args", "message"), [
    ({"digest": "abc"}, "digest must be 64 hex digits (optionally after sha256:), got 'abc'"),
    ({"digest": "0" * 64, "state": "absent"},
     "digest applies to state=present only; leave it out to delete"),
])
def test_a_wrong_digest_option_fails_before_asking_ollama(standin, run_module, args, message):
    result = run_module({"name": HF, "host": standin.url, **args})
    assert (result["failed"], result["msg"]) == (True, message)
    assert "/api/tags" not in standin.config()["requests"]


# -- the one-token generation that proves a model serves --------------------------------------


def test_a_present_model_is_proven_by_one_generated_token(standin, run_module):
    result = run_module({"name": HF, "host": standin.url})
    assert result["changed"] is False
    assert result["generated"]["response"]
    assert result["generated"]["eval_count"] >= 1
    assert standin.config()["requests"]["/api/generate"] == 1


def test_a_pulled_model_is_proven_too(standin, run_module):
    result = run_module({"name": "llama3.2:3b", "host": standin.url})
    assert result["operation"] == "pull"
    assert result["generated"]["response"]
    assert standin.config()["requests"]["/api/generate"] == 1


def test_a_listed_model_that_does_not_load_fails_with_ollamas_words(standin, run_module):
    error = "llama runner process has terminated: exit status 2"
    standin.config(load_errors={HF: error})
    result = run_module({"name": HF, "host": standin.url})
    assert result["failed"] is True
    assert result["msg"] == (f"Ollama at {standin.url} lists {HF} but does not generate with "
                             f"it: {error}")
    # Ollama's words alone too, for a caller's own message (upgrade-model.yml's gate).
    assert result["generate_error"] == error


@pytest.mark.parametrize("args", [{"generate": False}, {"state": "absent"}])
def test_no_generation_when_not_asked_or_absent(standin, run_module, args):
    run_module({"name": HF, "host": standin.url, **args})
    assert "/api/generate" not in standin.config()["requests"]


def test_check_mode_sends_no_generation(standin, run_module):
    result = run_module({"name": HF, "host": standin.url}, check=True)
    assert "generated" not in result
    assert "/api/generate" not in standin.config()["requests"]
