"""The Ollama stand-in driven by the official ``ollama`` Python client (PyPI ``ollama``), a
client we did not write: what it sends and parses is what real tools send and parse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import ollama
import pytest

from lab.standins.ollama import DEFAULT_MODEL

OTHER = "llama3.2:3b"
PROMPT = "今日の東京の天気は？"


@pytest.fixture
def client(launch) -> ollama.Client:
    standin = launch("ollama", "--pull-seconds", "0.2", "--models", DEFAULT_MODEL,
                     "--pullable", OTHER)
    return ollama.Client(host=standin.url, timeout=15)


def test_list_and_show(client):
    listed = client.list()
    assert [model.model for model in listed.models] == [DEFAULT_MODEL]
    assert listed.models[0].digest and listed.models[0].size > 0
    shown = client.show(DEFAULT_MODEL)
    assert shown.details.format == "gguf"
    assert shown.details.quantization_level == "Q4_K_M"
    assert "completion" in shown.capabilities


def test_pull_streams_progress_and_then_the_model_is_listed(client):
    events = list(client.pull(OTHER, stream=True))
    assert events[0].status == "pulling manifest"
    assert events[-1].status == "success"
    assert any(event.total and event.completed == event.total for event in events)
    assert sorted(model.model for model in client.list().models) == sorted([DEFAULT_MODEL, OTHER])


def test_a_pull_of_an_unknown_model_raises_the_registry_error(client):
    with pytest.raises(ollama.ResponseError) as raised:
        client.pull("no-such-model:1b")
    assert raised.value.error == "pull model manifest: file does not exist"


def test_generate_whole_and_streamed_give_the_same_answer(client):
    whole = client.generate(model=DEFAULT_MODEL, prompt=PROMPT)
    pieces = list(client.generate(model=DEFAULT_MODEL, prompt=PROMPT, stream=True))
    assert whole.done and whole.done_reason == "stop" and whole.response
    assert "".join(piece.response for piece in pieces) == whole.response
    assert pieces[-1].done and pieces[-1].eval_count == len(pieces) - 1


def test_chat_answers_the_last_user_message(client):
    answer = client.chat(model=DEFAULT_MODEL, messages=[
        {"role": "system", "content": "短く答えてください。"},
        {"role": "user", "content": PROMPT},
    ])
    assert answer.message.role == "assistant"
    assert PROMPT in answer.message.content


def test_a_missing_model_is_a_404_response_error(client):
    with pytest.raises(ollama.ResponseError) as raised:
        client.generate(model=OTHER, prompt=PROMPT)
    assert raised.value.status_code == 404
    assert raised.value.error == f"model '{OTHER}' not found"


def test_ps_lists_what_a_generate_loaded_until_its_keep_alive(client):
    assert client.ps().models == []
    before = datetime.now(UTC)
    client.generate(model=DEFAULT_MODEL, prompt=PROMPT, keep_alive="10m")
    running = client.ps().models
    assert [model.model for model in running] == [DEFAULT_MODEL]
    expires = running[0].expires_at
    assert before + timedelta(minutes=10) <= expires <= datetime.now(UTC) + timedelta(minutes=10)
    assert running[0].size_vram == running[0].size > 0
    # keep_alive 0 with no prompt: Ollama's way to unload a model at once.
    unloaded = client.generate(model=DEFAULT_MODEL, keep_alive=0)
    assert unloaded.done_reason == "unload"
    assert client.ps().models == []


def test_a_deleted_model_is_unloaded_and_gone(client):
    client.chat(model=DEFAULT_MODEL, messages=[{"role": "user", "content": PROMPT}],
                keep_alive=-1)
    assert client.ps().models[0].expires_at.year > 2300  # kept loaded for ever
    client.delete(DEFAULT_MODEL)
    assert client.ps().models == []
    assert client.list().models == []
    with pytest.raises(ollama.ResponseError) as raised:
        client.delete(DEFAULT_MODEL)
    assert raised.value.status_code == 404
