"""worker_infer.py (on worker_base.py): its checks, its version, and the Reaper handing the
task of a killed inference worker to another one."""

from __future__ import annotations

import signal
import subprocess
import uuid

import worker_infer

from lab.standins.ollama import PIECES, compose_answer

from .conftest import FILES, MODEL, PYTHON, wait_until
from .test_web import error_of, messages


def infer_env(web_env: dict[str, str], name: str) -> dict[str, str]:
    env = {k: v for k, v in web_env.items() if k != "SEARXNG_URL"}
    env.update(WORKER_ID=f"{name}-{uuid.uuid4().hex[:6]}", WORKER_HOST=f"host-{name}",
               WORKER_DEVICE="cpu")
    return env


def test_killed_inference_worker_task_is_done_by_another(web_env, start_worker, coordinator,
                                                          tasks, ollama, rds):
    env_a = infer_env(web_env, "infer-a")
    env_b = infer_env(web_env, "infer-b")
    a = start_worker(env_a, "worker_infer.py")
    a.wait_for(f"Waiting on queues ['tasks:cpu:{env_a['WORKER_ID']}']")
    lines = messages(a)
    assert lines[0] == f"INFO Inference Worker starting (v{worker_infer.VERSION})."
    shipped = subprocess.run([PYTHON, str(FILES / "worker_infer.py"), "--version"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert shipped == worker_infer.VERSION
    registered = wait_until(lambda: coordinator.worker(env_a["WORKER_ID"]), 10,
                            "worker a in GET /workers")
    assert (registered["version"], registered["kind"]) == (shipped, "inference")

    ollama.config(latency=30)
    # Not pinned with "worker": a pinned task waits for its worker instead of moving on.
    task_id = coordinator.route("Say hello in Japanese.", "generate")
    row = tasks.wait_status(task_id, "running")
    assert row["worker_id"] == env_a["WORKER_ID"]
    a.signal(signal.SIGKILL)
    a.wait_exit()
    ollama.config(latency=0)
    b = start_worker(env_b, "worker_infer.py")
    b.wait_for("Waiting on queues")

    row = tasks.wait_status(task_id, "done", "failed", timeout=30)
    assert row["status"] == "done", row["error"]
    assert row["worker_id"] == env_b["WORKER_ID"]
    assert row["worker_host"] == "host-infer-b"
    assert row["attempts"] == 2
    assert row["result"].startswith("要約: 「Say hello in Japanese.」")


def test_inference_model_missing(web_env, start_worker, ollama):
    env = {**infer_env(web_env, "infer-c"), "OLLAMA_MODEL": "qwen3:8b"}
    worker = start_worker(env, "worker_infer.py")
    assert worker.wait_exit() == 1
    assert error_of(worker) == (
        f"Ollama check FAILED at {ollama.url}: model qwen3:8b is not there (it has: "
        f"{MODEL}); fix: run `ollama pull qwen3:8b` on host-infer-c")


def test_chat_and_summarize_with_the_tasks_model_or_the_default(web_env, start_worker,
                                                                coordinator, tasks, ollama):
    other = "qwen3:0.6b"
    ollama.config(models=[MODEL, other])
    env = infer_env(web_env, "infer-d")
    worker = start_worker(env, "worker_infer.py")
    worker.wait_for("Waiting on queues")
    registered = wait_until(lambda: coordinator.worker(env["WORKER_ID"]), 10, "registration")
    assert sorted(registered["models"]) == sorted([MODEL, other])

    chat = coordinator.route("こんにちは", "chat", model=other, worker=env["WORKER_ID"])
    summary = coordinator.route("A long text about Tokyo weather.", "summarize",
                                worker=env["WORKER_ID"])
    chat_row = tasks.wait_status(chat, "done", "failed")
    summary_row = tasks.wait_status(summary, "done", "failed")
    # The stand-in names the model it answered with and quotes the prompt it got.
    assert chat_row["result"].startswith("要約: 「こんにちは」")
    assert f"が {other} の代わりに生成" in chat_row["result"]
    assert summary_row["result"].startswith(f"要約: 「{worker_infer.SUMMARIZE_PROMPT.split()[0]}")
    assert f"が {MODEL} の代わりに生成" in summary_row["result"]
    assert (chat_row["worker"], summary_row["worker"]) == (env["WORKER_ID"], env["WORKER_ID"])
    assert (chat_row["answered_model"], summary_row["answered_model"]) == (other, MODEL)

    # A task's Ollama options reach its model: num_predict cuts the made-up answer to its
    # first pieces, as Ollama's runner stops there.
    capped = tasks.wait_status(coordinator.route("こんにちは", "chat", worker=env["WORKER_ID"],
                                                 options={"num_predict": 2, "temperature": 0}),
                               "done", "failed")
    assert capped["result"] == "".join(PIECES.findall(compose_answer("こんにちは", MODEL))[:2])
