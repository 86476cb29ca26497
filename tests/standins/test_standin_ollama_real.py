"""The Ollama stand-in serving real models (its ``--registry``: lab/inference.py's GGUF
files, run by llama.cpp), driven by the official ``ollama`` client: real answers, Ollama's
counts and durations from llama.cpp, digests that follow the file, and a file that does
not load failing as Ollama's runner does."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from pathlib import Path

import ollama
import pytest

from lab import inference
from lab.standins.ollama import NAME

MODEL, Q8 = inference.MODEL, "lab/smollm2-135m-instruct:q8_0"
# Greedy decoding: the same prompt gives the same answer, however it is asked for.
GREEDY = {"temperature": 0, "seed": 7}


@pytest.fixture(scope="module")
def kit() -> Path:
    return inference.ensure()


@pytest.fixture
def serve(launch, kit):
    """Start a stand-in with the kit's registry (or ``registry``), llama.cpp importable."""
    def start(*models: str, registry: Path = inference.INDEX):
        standin = launch("ollama", "--registry", str(registry), "--models", ",".join(models),
                         "--pullable", "", env={"PYTHONPATH": str(inference.SITE)})
        return ollama.Client(host=standin.url, timeout=120)
    return start


def test_a_generation_is_the_models_own_with_llama_cpps_counts(serve):
    client = serve(MODEL)
    whole = client.generate(model=MODEL, prompt="What is the capital of France?",
                            options=GREEDY)
    assert whole.done and whole.done_reason == "stop"
    assert whole.response.strip() and NAME not in whole.response
    assert whole.prompt_eval_count > 10 and whole.eval_count > 1
    assert whole.load_duration > 0 and whole.prompt_eval_duration > 0 and whole.eval_duration > 0
    assert whole.total_duration >= whole.prompt_eval_duration + whole.eval_duration
    # Streamed, the same answer arrives in the model's tokens, one by one.
    pieces = list(client.generate(model=MODEL, prompt="What is the capital of France?",
                                  options=GREEDY, stream=True))
    assert "".join(piece.response for piece in pieces) == whole.response
    assert len(pieces) > 2 and pieces[-1].done and pieces[-1].eval_count == whole.eval_count
    # Loaded by the first request: the second loads nothing.
    assert pieces[-1].load_duration < whole.load_duration


def test_num_predict_ends_the_answer_there_with_done_reason_length(serve):
    client = serve(MODEL)
    answer = client.generate(model=MODEL, prompt="Tell me a long story about Tokyo.",
                             options={**GREEDY, "num_predict": 5})
    assert (answer.done_reason, answer.eval_count) == ("length", 5)
    assert answer.response


def test_num_predict_counts_tokens_not_characters_and_drops_a_character_it_cuts(serve):
    """Japanese takes several tokens a character: Ollama stops at num_predict tokens all the
    same, and leaves out the bytes of a character the last one did not finish."""
    client = serve(MODEL)
    prompt = "東京について日本語で教えてください。"
    whole = client.generate(model=MODEL, prompt=prompt, options={**GREEDY, "num_predict": 24})
    answers = [client.generate(model=MODEL, prompt=prompt, options={**GREEDY, "num_predict": n})
               for n in range(1, 13)]
    assert [(a.done_reason, a.eval_count) for a in answers] == [("length", n)
                                                                for n in range(1, 13)]
    assert all(whole.response.startswith(a.response) for a in answers)
    # Some token ended inside a character: one more token, no more text.
    assert any(a.response == b.response for a, b in itertools.pairwise(answers)), [
        a.response for a in answers]


def test_chat_answers_through_the_models_template(serve):
    client = serve(MODEL)
    answer = client.chat(model=MODEL, options=GREEDY, messages=[
        {"role": "system", "content": "You answer with one word."},
        {"role": "user", "content": "What colour is the sky on a clear day?"},
    ])
    assert answer.message.role == "assistant"
    assert "blue" in answer.message.content.lower()


def test_the_digest_is_the_real_files_so_two_hosts_serving_it_agree(serve, tmp_path):
    index = json.loads(inference.INDEX.read_text())["models"]
    # Another host: the same file under another directory and index.
    copy = tmp_path / "registry"
    copy.mkdir()
    os.link(inference.MODELS / index[MODEL]["file"], copy / "model.gguf")
    (copy / "index.json").write_text(json.dumps(
        {"models": {MODEL: {**index[MODEL], "file": "model.gguf"}}}))
    first, second = serve(MODEL, Q8), serve(MODEL, registry=copy / "index.json")
    digests = {model.model: model.digest for model in first.list().models}
    assert second.list().models[0].digest == digests[MODEL]
    assert digests[Q8] != digests[MODEL]
    shown = first.show(MODEL)
    assert (shown.details.family, shown.details.quantization_level) == ("llama", "Q4_1")
    # A pull fetches the file itself: its first layer is the file's sha256, whole size.
    fresh = serve(registry=inference.INDEX)
    file = inference.MODELS / index[Q8]["file"]
    digest = "sha256:" + hashlib.sha256(file.read_bytes()).hexdigest()
    weights = [event for event in fresh.pull(Q8, stream=True) if event.digest == digest]
    assert weights[-1].completed == weights[0].total == file.stat().st_size
    assert {model.digest for model in fresh.list().models} == {digests[Q8]}


def test_a_file_llama_cpp_cannot_load_fails_as_ollamas_runner_does(serve):
    client = serve(inference.TRUNCATED)
    with pytest.raises(ollama.ResponseError) as raised:
        client.generate(model=inference.TRUNCATED, prompt="hello")
    assert raised.value.status_code == 500
    assert raised.value.error.startswith(
        "llama runner process has terminated: error loading model: ")
    assert client.ps().models == []


def test_an_empty_prompt_loads_the_model_and_keep_alive_0_unloads_it(serve):
    client = serve(MODEL)
    loaded = client.generate(model=MODEL, prompt="")
    assert (loaded.done_reason, [model.model for model in client.ps().models]) == (
        "load", [MODEL])
    unloaded = client.generate(model=MODEL, prompt="", keep_alive=0)
    assert (unloaded.done_reason, client.ps().models) == ("unload", [])


def test_a_registry_that_cannot_be_read_is_refused_at_start(launch, tmp_path):
    broken = tmp_path / "index.json"
    broken.write_text("{}")
    with pytest.raises(RuntimeError) as raised:
        launch("ollama", "--registry", str(broken))
    assert f"registry {broken} cannot be read (KeyError: 'models')" in str(raised.value)


def test_the_kit_is_made_once(kit):
    before = {path: path.stat().st_mtime_ns for path in kit.rglob("*.gguf")}
    assert inference.ensure() == kit
    assert {path: path.stat().st_mtime_ns for path in kit.rglob("*.gguf")} == before
