"""Unit tests of ollama_model's pure functions: names, tags, progress stream, decisions."""

from __future__ import annotations

import json

import pytest
from coordinator_contract import canonical_model_name

from lab.standins.ollama import DEFAULT_MODEL
from library import ollama_model as om

HF = DEFAULT_MODEL


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("llama3.2", "registry.ollama.ai/library/llama3.2:latest"),
        ("llama3.2:latest", "registry.ollama.ai/library/llama3.2:latest"),
        ("llama3.2:3b", "registry.ollama.ai/library/llama3.2:3b"),
        ("library/llama3.2:3b", "registry.ollama.ai/library/llama3.2:3b"),
        ("registry.ollama.ai/library/llama3.2:3b", "registry.ollama.ai/library/llama3.2:3b"),
        ("jmorgan/tiny", "registry.ollama.ai/jmorgan/tiny:latest"),
        (HF, "hf.co/liquidai/lfm2.5-1.2b-jp-gguf:q4_k_m"),
        ("hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF", "hf.co/liquidai/lfm2.5-1.2b-jp-gguf:latest"),
        # A port in the host is not a tag: the last ":" comes before a "/".
        ("localhost:5000/team/model", "localhost:5000/team/model:latest"),
        ("localhost:5000/team/model:v1", "localhost:5000/team/model:v1"),
        ("  Llama3.2:3B ", "registry.ollama.ai/library/llama3.2:3b"),
    ],
)
def test_canonical_name(name, canonical):
    assert canonical_model_name(name) == canonical


@pytest.mark.parametrize(
    "name", ["", "llama3.2:", "a/b/c/d", "/llama", "ns//model", ":3b", "llama 3"]
)
def test_canonical_name_rejects_malformed(name):
    with pytest.raises(ValueError) as exc:
        canonical_model_name(name)
    assert str(exc.value) == (
        f"invalid model name {name!r}: expected [host/][namespace/]model[:tag], "
        "for example llama3.2:3b or hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M"
    )


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
        ("http://127.0.0.1:11434/", "http://127.0.0.1:11434"),
        ("127.0.0.1:11434", "http://127.0.0.1:11434"),
        ("https://ollama.lan", "https://ollama.lan"),
    ],
)
def test_normalize_url(host, url):
    assert om.normalize_url(host) == url


TAGS = {
    "models": [
        {"name": "llama3.2:latest", "model": "llama3.2:latest", "digest": "aa", "size": 10},
        {"name": HF, "model": HF, "digest": "bb", "size": 20},
    ]
}


@pytest.mark.parametrize(
    ("name", "digest"),
    [
        ("llama3.2", "aa"),
        ("llama3.2:latest", "aa"),
        ("registry.ollama.ai/library/llama3.2", "aa"),
        (HF, "bb"),
        (HF.lower(), "bb"),
    ],
)
def test_find_model_matches_any_spelling(name, digest):
    entry = om.find_model(name, TAGS)
    assert entry is not None
    assert entry["digest"] == digest


@pytest.mark.parametrize("name", ["llama3.2:3b", "hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q8_0"])
def test_find_model_other_tag_is_missing(name):
    assert om.find_model(name, TAGS) is None


def test_find_model_empty_server():
    # Ollama answers {"models": []} on a fresh install; older versions sent null.
    assert om.find_model("llama3.2", {"models": []}) is None
    assert om.find_model("llama3.2", {"models": None}) is None
    assert om.find_model("llama3.2", {}) is None


def test_find_model_uses_name_when_model_field_missing():
    assert om.find_model("llama3.2", {"models": [{"name": "llama3.2:latest"}]}) == {
        "name": "llama3.2:latest"
    }


@pytest.mark.parametrize(
    ("state", "present", "action"),
    [
        ("present", False, "pull"),
        ("present", True, "none"),
        ("absent", True, "delete"),
        ("absent", False, "none"),
    ],
)
def test_decide(state, present, action):
    entry = {"name": "x:latest"} if present else None
    assert om.decide(state, entry) == action


def _lines(*events: dict) -> list[bytes]:
    return [json.dumps(e).encode() + b"\n" for e in events]


def test_parse_pull_stream_success_sums_layers():
    stream = _lines(
        {"status": "pulling manifest"},
        {"status": "pulling aaa", "digest": "sha256:aaa", "total": 1000},
        {"status": "pulling aaa", "digest": "sha256:aaa", "total": 1000, "completed": 400},
        {"status": "pulling aaa", "digest": "sha256:aaa", "total": 1000, "completed": 1000},
        {"status": "pulling bbb", "digest": "sha256:bbb", "total": 50, "completed": 50},
        {"status": "verifying sha256 digest"},
        {"status": "writing manifest"},
        {"status": "success"},
    )
    progress = om.parse_pull_stream([b"\n", *stream])
    assert progress.as_result() == {
        "status": "success",
        "total_bytes": 1050,
        "completed_bytes": 1050,
        "layers": 2,
    }


def test_parse_pull_stream_accepts_text_lines():
    progress = om.parse_pull_stream(['{"status": "success"}'])
    assert progress.status == "success"


def test_parse_pull_stream_error_line_carries_ollamas_message():
    stream = _lines(
        {"status": "pulling manifest"},
        {"error": "pull model manifest: file does not exist"},
        {"status": "success"},
    )
    with pytest.raises(om.OllamaError) as exc:
        om.parse_pull_stream(stream)
    assert str(exc.value) == "pull model manifest: file does not exist"


def test_parse_pull_stream_that_stops_early_is_an_error():
    with pytest.raises(om.OllamaError) as exc:
        om.parse_pull_stream(_lines({"status": "pulling manifest"}))
    assert str(exc.value) == "the pull stream ended before success (last status: pulling manifest)"


def test_parse_pull_stream_empty_is_an_error():
    with pytest.raises(om.OllamaError) as exc:
        om.parse_pull_stream([])
    assert str(exc.value) == "the pull stream ended before success (last status: nothing)"


@pytest.mark.parametrize("line", [b"<html>proxy error</html>", b"[1, 2]"])
def test_parse_pull_stream_rejects_non_json(line):
    with pytest.raises(om.OllamaError) as exc:
        om.parse_pull_stream([line])
    assert str(exc.value) == f"unexpected line in Ollama's pull progress: {line.decode()}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": "model \\"x\\" not found"}', 'model "x" not found'),
        (b"plain text failure\n", "plain text failure"),
        (b"", "HTTP 500 Internal Server Error"),
        (b'{"detail": 1}', '{"detail": 1}'),
    ],
)
def test_error_from_body(body, message):
    assert om.error_from_body(body, "HTTP 500 Internal Server Error") == message


def test_unreachable_message_uses_the_plain_reason():
    reason = ConnectionRefusedError(111, "Connection refused")
    assert om.unreachable_message("http://127.0.0.1:9", reason) == (
        "Ollama not reachable at http://127.0.0.1:9: is the service running / "
        "is OLLAMA_HOST right? (Connection refused)"
    )


class StartingServer:
    """A client whose server refuses ``refusals`` times, then lists its models."""

    def __init__(self, refusals: int) -> None:
        self.refusals, self.asked = refusals, 0

    def tags(self) -> dict:
        self.asked += 1
        if self.asked <= self.refusals:
            raise om.OllamaUnreachable(
                "Ollama not reachable at http://127.0.0.1:11434: is the service running / is "
                "OLLAMA_HOST right? (Connection refused)")
        return TAGS


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_tags_are_asked_again_each_second_while_the_server_starts():
    clock, server = Clock(), StartingServer(refusals=3)
    assert om.tags_when_reachable(server, 10, clock, clock.sleep) == TAGS
    assert (server.asked, clock.now) == (4, 3.0)


def test_a_server_that_never_answers_fails_saying_how_long_it_waited():
    clock, server = Clock(), StartingServer(refusals=100)
    with pytest.raises(om.OllamaUnreachable) as failure:
        om.tags_when_reachable(server, 5, clock, clock.sleep)
    assert str(failure.value) == (
        "Ollama not reachable at http://127.0.0.1:11434: is the service running / is "
        "OLLAMA_HOST right? (Connection refused); waited 5 s")
    assert server.asked == 6


def test_without_a_wait_the_tags_are_asked_once():
    clock, server = Clock(), StartingServer(refusals=1)
    with pytest.raises(om.OllamaUnreachable) as failure:
        om.tags_when_reachable(server, 0, clock, clock.sleep)
    assert str(failure.value).endswith("(Connection refused)")
    assert server.asked == 1


def test_model_summary():
    assert om.model_summary(None) is None
    assert om.model_summary(TAGS["models"][1]) == {"name": HF, "digest": "bb", "size": 20}


class FakeResponse:
    """A streamed HTTP response: readline() hands out lines, then raises or ends."""

    def __init__(self, lines: list[bytes], then: Exception | None = None) -> None:
        self.lines = list(lines)
        self.then = then

    def readline(self) -> bytes:
        if self.lines:
            return self.lines.pop(0)
        if self.then is not None:
            raise self.then
        return b""

    def __enter__(self) -> FakeResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _client_answering(monkeypatch, response: FakeResponse) -> om.OllamaClient:
    client = om.OllamaClient("http://127.0.0.1:9", timeout=5, validate_certs=True)
    monkeypatch.setattr(client, "_open", lambda *args: response)
    return client


def test_pull_past_the_deadline_fails(monkeypatch):
    # The clock jumps past the 5 s deadline between the first and the second line.
    clock = iter([0.0, 1.0, 10.0])
    monkeypatch.setattr(om.time, "monotonic", lambda: next(clock))
    response = FakeResponse(_lines({"status": "pulling manifest"}, {"status": "pulling x"}))
    with pytest.raises(om.OllamaError) as exc:
        _client_answering(monkeypatch, response).pull("llama3.2", insecure=False)
    assert str(exc.value) == (
        "the pull did not finish within 5 s (last status: pulling x); raise timeout"
    )


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            TimeoutError("timed out"),
            "no progress from http://127.0.0.1:9 for 5 s; raise timeout if the download is slow",
        ),
        (
            ConnectionResetError(104, "Connection reset by peer"),
            "the pull stream from http://127.0.0.1:9 broke off: "
            "[Errno 104] Connection reset by peer",
        ),
    ],
)
def test_pull_stream_that_breaks_off(monkeypatch, error, message):
    response = FakeResponse(_lines({"status": "pulling manifest"}), then=error)
    with pytest.raises(om.OllamaError) as exc:
        _client_answering(monkeypatch, response).pull("llama3.2", insecure=False)
    assert str(exc.value) == message


def test_pull_success_through_the_client(monkeypatch):
    response = FakeResponse(
        _lines({"status": "pulling a", "digest": "sha256:a", "total": 7, "completed": 7})
        + _lines({"status": "success"})
    )
    progress = _client_answering(monkeypatch, response).pull("llama3.2", insecure=False)
    assert progress.as_result() == {
        "status": "success",
        "total_bytes": 7,
        "completed_bytes": 7,
        "layers": 1,
    }


def test_a_pin_is_normalized_to_how_tags_lists_digests():
    digest = "ab" * 32
    assert om.normalize_digest(f" sha256:{digest.upper()} ") == digest
    with pytest.raises(ValueError, match="64 hex digits"):
        om.normalize_digest("sha256:" + "g" * 64)


def test_pin_mismatch_names_both_short_digests_and_only_when_they_differ():
    pin, other = "a" * 64, "b" * 64
    assert om.pin_mismatch("m", "http://h", {"digest": pin}, pin) is None
    assert om.pin_mismatch("m", "http://h", None, pin) is None
    assert om.pin_mismatch("m", "http://h", {"digest": other}, None) is None
    assert om.pin_mismatch("m", "http://h", {"digest": other}, pin) == (
        f"m on http://h has digest {other[:12]}, pinned {pin[:12]}: same name, other weights; "
        "pull the pinned weights there, or change the pin")


def test_the_proof_asks_for_one_token_in_one_answer():
    # api.md: options.num_predict caps the tokens generated; stream false gives one object.
    assert om.one_token_request(HF) == {"model": HF, "prompt": "Say OK.", "stream": False,
                                        "options": {"num_predict": 1}}


def test_a_finished_generation_is_summarized():
    answer = {"model": HF, "response": "OK", "done": True, "done_reason": "length",
              "eval_count": 1, "load_duration": 1523000000, "total_duration": 1600000000}
    assert om.generated_summary(answer) == {"response": "OK", "done_reason": "length",
                                            "eval_count": 1, "load_duration": 1523000000}


@pytest.mark.parametrize("answer", [None, [], {"response": "O", "done": False}])
def test_an_unfinished_generation_is_an_error(answer):
    with pytest.raises(om.OllamaError) as raised:
        om.generated_summary(answer)
    assert str(raised.value) == f"it answered {json.dumps(answer)}"
