"""The Ollama stand-in, spoken to with ``requests`` as the workers and the module do."""

from __future__ import annotations

import json
import time

import pytest
import requests

from lab.standins.ollama import DEFAULT_MODEL

LFM = DEFAULT_MODEL
PROMPT = "今日の東京の天気は？ 次の検索結果を短く要約してください。"


def post(base: str, path: str, body: dict, timeout: float = 10) -> requests.Response:
    return requests.post(f"{base}{path}", json=body, timeout=timeout)


def ndjson(response: requests.Response) -> list[dict]:
    assert response.headers["Content-Type"] == "application/x-ndjson"
    return [json.loads(line) for line in response.iter_lines() if line]


def tag_names(base: str) -> list[str]:
    response = requests.get(f"{base}/api/tags", timeout=5)
    assert response.status_code == 200, response.text
    return [model["name"] for model in response.json()["models"]]


@pytest.fixture
def ollama(launch):
    return launch("ollama", "--pull-seconds", "0.2")


def test_root_version_and_server_header(ollama):
    root = requests.get(f"{ollama.url}/", timeout=5)
    version = requests.get(f"{ollama.url}/api/version", timeout=5)

    assert (root.status_code, root.text) == (200, "Ollama is running")
    assert root.headers["Server"] == "ollama-standin"
    assert version.json() == {"version": "0.13.0"}
    assert requests.head(f"{ollama.url}/", timeout=5).status_code == 200


def test_tags_lists_the_default_model_with_ollama_fields(ollama):
    models = requests.get(f"{ollama.url}/api/tags", timeout=5).json()["models"]

    assert len(models) == 1
    model = models[0]
    assert model["name"] == model["model"] == LFM
    assert set(model) == {"name", "model", "modified_at", "size", "digest", "details"}
    assert model["size"] > 0 and len(model["digest"]) == 64
    details = model["details"]
    assert details["format"] == "gguf"
    assert details["parameter_size"] == "1.2B"
    assert details["quantization_level"] == "Q4_K_M"
    assert details["family"]


def digest_of(base: str, name: str) -> str:
    return next(model["digest"] for model in requests.get(f"{base}/api/tags", timeout=5)
                .json()["models"] if model["name"] == name)


def test_digests_are_stable_and_other_weights_under_the_same_name_change_only_them(launch):
    first, second = launch("ollama"), launch("ollama")
    assert digest_of(first.url, LFM) == digest_of(second.url, LFM)

    second.config(weights={LFM: "retrained"})
    moved = digest_of(second.url, LFM)
    assert moved != digest_of(first.url, LFM) and len(moved) == 64
    post(second.url, "/api/generate", {"model": LFM, "prompt": "", "stream": False})
    running = requests.get(f"{second.url}/api/ps", timeout=5).json()["models"]
    assert [model["digest"] for model in running] == [moved]
    weights = ndjson(post(second.url, "/api/pull", {"model": LFM}))[1]["digest"]
    assert weights != ndjson(post(first.url, "/api/pull", {"model": LFM}))[1]["digest"]
    assert tag_names(second.url) == [LFM]

    second.config(weights={})
    assert digest_of(second.url, LFM) == digest_of(first.url, LFM)


def test_the_digest_is_the_manifests_whatever_the_spelling_of_the_name(ollama):
    pulled = ["registry.ollama.ai/library/Llama3.2", "LLAMA3.2:latest", "HF.co/LiquidAI/x:Q4"]
    ollama.config(models=[LFM, "llama3.2"])
    llama = digest_of(ollama.url, "llama3.2:latest")
    lfm = digest_of(ollama.url, LFM)
    # Not any blob's digest: sha256 of the manifest file naming the blobs (config, layers).
    blobs = [event["digest"] for event in ndjson(post(ollama.url, "/api/pull", {"model": LFM}))
             if "digest" in event]
    assert len(set(blobs)) == 4 and f"sha256:{lfm}" not in blobs

    for name in pulled:
        assert post(ollama.url, "/api/pull", {"model": name, "stream": False}).status_code == 200
    # Listed as Ollama lists names, each part spelt as a present model spells it.
    assert sorted(tag_names(ollama.url)) == sorted([LFM, "llama3.2:latest", "hf.co/LiquidAI/x:Q4"])
    assert digest_of(ollama.url, "llama3.2:latest") == llama
    for name, listed, digest in ((LFM.upper(), LFM.upper(), lfm),
                                 ("registry.ollama.ai/library/llama3.2", "llama3.2:latest", llama),
                                 ("library/llama3.2:latest", "llama3.2:latest", llama)):
        ollama.config(models=[name])
        assert tag_names(ollama.url) == [listed] and digest_of(ollama.url, listed) == digest


def test_a_model_can_be_slower_or_fail_to_load_while_the_others_answer(ollama):
    ollama.config(models=[LFM, "llama3.2:3b"], model_latency={"llama3.2:3b": 0.4},
                  load_errors={LFM: "llama runner process has terminated: exit status 2"})
    started = time.monotonic()
    slow = post(ollama.url, "/api/generate", {"model": "llama3.2:3b", "prompt": PROMPT,
                                              "stream": False})
    assert slow.status_code == 200 and time.monotonic() - started >= 0.4
    for path, body in (("/api/generate", {"prompt": PROMPT}), ("/api/chat", {"messages": []})):
        broken = post(ollama.url, path, {"model": LFM, "stream": False, **body})
        assert broken.status_code == 500
        assert broken.json() == {"error": "llama runner process has terminated: exit status 2"}
    assert LFM in tag_names(ollama.url)


def test_show_present_and_absent(ollama):
    shown = post(ollama.url, "/api/show", {"model": LFM})
    absent = post(ollama.url, "/api/show", {"model": "llama3.2"})

    assert shown.status_code == 200
    assert shown.json()["details"]["quantization_level"] == "Q4_K_M"
    assert "completion" in shown.json()["capabilities"]
    assert absent.status_code == 404
    assert absent.json() == {"error": "model 'llama3.2' not found"}


def test_streamed_pull_reports_progress_then_the_model_is_present(ollama):
    response = post(ollama.url, "/api/pull", {"model": "llama3.2:3b"})

    assert response.status_code == 200
    events = ndjson(response)
    statuses = [event.get("status") for event in events]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    progress = [event for event in events if "digest" in event]
    assert len(progress) >= 4
    assert all(event["status"] == f"pulling {event['digest'][7:19]}" for event in progress)
    assert all(event["digest"].startswith("sha256:") and event["total"] > 0 for event in progress)
    completed = [event["completed"] for event in progress if "completed" in event]
    assert completed[0] < progress[0]["total"]
    assert "llama3.2:3b" in tag_names(ollama.url)
    assert post(ollama.url, "/api/show", {"model": "llama3.2:3b"}).status_code == 200


def test_unstreamed_pull_with_legacy_name_field(ollama):
    response = post(ollama.url, "/api/pull", {"name": "qwen2.5:7b", "stream": False})

    assert response.status_code == 200
    assert response.json() == {"status": "success"}
    assert tag_names(ollama.url)[0] == "qwen2.5:7b"  # most recently modified first


def test_pull_without_a_tag_means_latest_and_is_idempotent(ollama):
    post(ollama.url, "/api/pull", {"model": "llama3.2", "stream": False})
    post(ollama.url, "/api/pull", {"model": "llama3.2", "stream": False})

    assert sorted(tag_names(ollama.url)) == sorted([LFM, "llama3.2:latest"])


def test_pull_error_is_streamed_or_500_with_ollamas_message(ollama):
    message = "pull model manifest: 412: this model requires macOS"
    ollama.config(pull_errors={"mlx-only:8b": message})

    streamed = post(ollama.url, "/api/pull", {"model": "mlx-only:8b"})
    assert streamed.status_code == 200
    assert ndjson(streamed) == [{"status": "pulling manifest"}, {"error": message}]

    whole = post(ollama.url, "/api/pull", {"model": "mlx-only:8b", "stream": False})
    assert whole.status_code == 500
    assert whole.json() == {"error": message}
    assert "mlx-only:8b" not in tag_names(ollama.url)


def test_models_outside_pullable_have_no_manifest(ollama):
    ollama.config(pullable=["llama3.2"])

    refused = post(ollama.url, "/api/pull", {"model": "mistral", "stream": False})
    allowed = post(ollama.url, "/api/pull", {"model": "llama3.2", "stream": False})

    assert refused.status_code == 500
    assert refused.json() == {"error": "pull model manifest: file does not exist"}
    assert allowed.json() == {"status": "success"}


def test_generate_unstreamed_quotes_the_prompt_and_reports_statistics(ollama):
    response = post(ollama.url, "/api/generate", {"model": LFM, "prompt": PROMPT, "stream": False})

    assert response.status_code == 200
    answer = response.json()
    assert answer["model"] == LFM
    assert answer["done"] is True and answer["done_reason"] == "stop"
    assert "今日の東京の天気は？" in answer["response"]
    for key in ("total_duration", "load_duration", "prompt_eval_count", "eval_count"):
        assert answer[key] > 0
    again = post(ollama.url, "/api/generate", {"model": LFM, "prompt": PROMPT, "stream": False})
    assert again.json()["response"] == answer["response"]


def test_generate_stream_joins_to_the_unstreamed_answer(ollama):
    whole = post(ollama.url, "/api/generate", {"model": LFM, "prompt": PROMPT, "stream": False})
    chunks = ndjson(post(ollama.url, "/api/generate", {"model": LFM, "prompt": PROMPT}))

    assert len(chunks) > 2
    assert all(chunk["done"] is False for chunk in chunks[:-1])
    final = chunks[-1]
    assert final["done"] is True and final["done_reason"] == "stop"
    assert final["response"] == ""
    assert final["eval_count"] == len(chunks) - 1
    assert "".join(chunk["response"] for chunk in chunks) == whole.json()["response"]


def test_chat_streamed_and_unstreamed(ollama):
    body = {
        "model": LFM,
        "messages": [
            {"role": "system", "content": "日本語で答えてください。"},
            {"role": "user", "content": PROMPT},
        ],
    }
    whole = post(ollama.url, "/api/chat", {**body, "stream": False}).json()
    chunks = ndjson(post(ollama.url, "/api/chat", body))

    assert whole["message"]["role"] == "assistant"
    assert "今日の東京の天気は？" in whole["message"]["content"]
    assert whole["done_reason"] == "stop"
    streamed = "".join(chunk["message"]["content"] for chunk in chunks)
    assert streamed == whole["message"]["content"]
    assert chunks[-1]["done"] is True and chunks[-1]["eval_count"] > 0


def test_json_format_answers_valid_json(ollama):
    body = {"model": LFM, "prompt": PROMPT, "format": "json", "stream": False}
    answer = post(ollama.url, "/api/generate", body).json()

    assert "今日の東京の天気は？" in json.loads(answer["response"])["summary"]


def test_missing_model_is_404_for_generate_and_chat(ollama):
    generate = post(ollama.url, "/api/generate", {"model": "llama3.2", "prompt": "hi"})
    chat = post(ollama.url, "/api/chat", {"model": "llama3.2", "messages": []})

    assert generate.status_code == chat.status_code == 404
    assert generate.json() == chat.json() == {"error": "model 'llama3.2' not found"}


def test_empty_prompt_loads_the_model(ollama):
    answer = post(ollama.url, "/api/generate", {"model": LFM}).json()

    assert answer["done"] is True and answer["done_reason"] == "load"


def test_delete_removes_a_model_and_a_second_delete_is_404(ollama):
    first = requests.delete(f"{ollama.url}/api/delete", json={"model": LFM}, timeout=5)
    second = requests.delete(f"{ollama.url}/api/delete", json={"model": LFM}, timeout=5)

    assert first.status_code == 200
    assert tag_names(ollama.url) == []
    assert second.status_code == 404
    assert second.json() == {"error": f"model '{LFM}' not found"}


def test_unknown_path_and_wrong_method_answer_like_ollama(ollama):
    missing = requests.get(f"{ollama.url}/api/nothing", timeout=5)
    wrong = requests.get(f"{ollama.url}/api/generate", timeout=5)

    assert (missing.status_code, missing.text) == (404, "404 page not found")
    assert (wrong.status_code, wrong.text) == (405, "405 method not allowed")


def test_missing_body_is_400(ollama):
    response = requests.post(f"{ollama.url}/api/generate", timeout=5)

    assert response.status_code == 400
    assert response.json() == {"error": "missing request body"}


def test_error_failure_flips_at_runtime_everywhere_or_generation_only(ollama):
    body = {"model": LFM, "prompt": PROMPT, "stream": False}
    ollama.config(fail="error")
    failed = post(ollama.url, "/api/generate", body)
    assert failed.status_code == 500
    assert failed.json() == {"error": "llama runner process has terminated: exit status 2"}
    assert requests.get(f"{ollama.url}/api/tags", timeout=5).status_code == 500

    ollama.config(fail_generate_only=True, fail_message="out of memory")
    assert tag_names(ollama.url) == [LFM]
    chat = post(ollama.url, "/api/chat", {**body, "messages": [{"role": "user", "content": "x"}]})
    assert (chat.status_code, chat.json()) == (500, {"error": "out of memory"})
    assert post(ollama.url, "/api/generate", body).json() == {"error": "out of memory"}

    ollama.config(fail=None)
    assert post(ollama.url, "/api/generate", body).status_code == 200


def test_timeout_failure_outlasts_the_client_timeout(ollama):
    ollama.config(fail="timeout", fail_generate_only=True, hang_seconds=5)

    with pytest.raises(requests.exceptions.ReadTimeout):
        post(ollama.url, "/api/generate", {"model": LFM, "prompt": PROMPT}, timeout=0.5)
    assert tag_names(ollama.url) == [LFM]


def test_latency_is_at_least_the_setting_streamed_or_not(ollama):
    ollama.config(latency=0.6)
    body = {"model": LFM, "prompt": PROMPT}

    started = time.monotonic()
    post(ollama.url, "/api/generate", {**body, "stream": False}).raise_for_status()
    assert time.monotonic() - started >= 0.6

    started = time.monotonic()
    chunks = ndjson(post(ollama.url, "/api/generate", body))
    assert time.monotonic() - started >= 0.6
    assert chunks[-1]["total_duration"] >= 600_000_000


def test_num_predict_cuts_the_answer_there_in_its_share_of_the_latency(ollama):
    ollama.config(latency=1.2)
    body = {"model": LFM, "prompt": PROMPT, "stream": False}
    whole = post(ollama.url, "/api/generate", body).json()

    started = time.monotonic()
    one = post(ollama.url, "/api/generate", {**body, "options": {"num_predict": 1}}).json()
    took = time.monotonic() - started
    assert (one["done_reason"], one["eval_count"]) == ("length", 1), one
    assert whole["response"].startswith(one["response"]) and one["response"], one
    # The whole answer takes its 1.2 s; one of its pieces, that share of them.
    assert whole["eval_count"] > 3 and took < 1.2 / 2, (took, whole["eval_count"])
    chunks = ndjson(post(ollama.url, "/api/generate",
                         {**body, "stream": True, "options": {"num_predict": 2}}))
    assert [c["done"] for c in chunks] == [False, False, True]
    assert (chunks[-1]["done_reason"], chunks[-1]["eval_count"]) == ("length", 2)
    # Ollama's own "no limit" values, and a cap the answer does not reach, change nothing.
    for options in ({"num_predict": -1}, {"num_predict": 0}, {"num_predict": 10_000}):
        answer = post(ollama.url, "/api/generate", {**body, "options": options}).json()
        assert (answer["response"], answer["done_reason"]) == (whole["response"], "stop")


def test_requests_are_counted_per_endpoint(ollama):
    requests.get(f"{ollama.url}/api/tags", timeout=5)
    post(ollama.url, "/api/generate", {"model": LFM, "prompt": "x", "stream": False})
    post(ollama.url, "/api/generate", {"model": LFM, "prompt": "y", "stream": False})

    assert ollama.config()["requests"] == {"/api/tags": 1, "/api/generate": 2}


def test_models_setting_replaces_the_models_present(ollama):
    config = ollama.config(models="llama3.2, qwen2.5:7b")

    assert config["models"] == ["llama3.2:latest", "qwen2.5:7b"]
    assert sorted(tag_names(ollama.url)) == ["llama3.2:latest", "qwen2.5:7b"]


def test_state_file_keeps_pulled_and_deleted_models_across_restarts(launch, tmp_path):
    state = tmp_path / "state" / "ollama-standin.json"
    ollama = launch("ollama", "--state-file", str(state), "--pull-seconds", "0")
    post(ollama.url, "/api/pull", {"model": "llama3.2", "stream": False}).raise_for_status()
    requests.delete(f"{ollama.url}/api/delete", json={"model": LFM}, timeout=5).raise_for_status()
    before = requests.get(f"{ollama.url}/api/tags", timeout=5).json()

    ollama.restart()

    assert requests.get(f"{ollama.url}/api/tags", timeout=5).json() == before
    assert tag_names(ollama.url) == ["llama3.2:latest"]
    assert json.loads(state.read_text())["models"][0]["name"] == "llama3.2:latest"


def test_state_file_wins_over_models_and_a_broken_one_stops_the_start(launch, tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"models": [{"name": "phi3", "modified_at": "2026-01-01"}]}))
    ollama = launch("ollama", "--state-file", str(state), "--models", "llama3.2")
    assert tag_names(ollama.url) == ["phi3:latest"]
    ollama.stop()

    state.write_text("{not json")
    with pytest.raises(RuntimeError, match=f"state file {state} cannot be read"):
        launch("ollama", "--state-file", str(state))


def test_environment_variables_set_the_start_settings(launch):
    ollama = launch(
        "ollama",
        env={
            "STANDIN_MODELS": "llama3.2,phi3",
            "STANDIN_LATENCY": "3",
            "STANDIN_FAIL_GENERATE_ONLY": "yes",
            "STANDIN_PULL_ERRORS": '{"mlx-only": "needs macOS"}',
        },
    )

    config = ollama.config()
    assert config["models"] == ["llama3.2:latest", "phi3:latest"]
    assert config["latency"] == 3.0
    assert config["fail_generate_only"] is True
    assert config["pull_errors"] == {"mlx-only:latest": "needs macOS"}


def test_a_keep_alive_that_is_no_duration_is_refused(ollama):
    answer = post(ollama.url, "/api/generate", {"model": LFM, "prompt": PROMPT,
                                                "keep_alive": "soon", "stream": False})
    assert answer.status_code == 400
    assert answer.json() == {"error": 'time: invalid duration "soon"'}
    assert requests.get(f"{ollama.url}/api/ps", timeout=5).json() == {"models": []}
