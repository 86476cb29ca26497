#!/usr/bin/env python3
"""Inference Worker: runs the Coordinator's generate/chat/summarize tasks on its Ollama.

It serves its own queue `tasks:<WORKER_DEVICE>:<WORKER_ID>` (e.g. `tasks:cpu:macbookair`),
registers as kind "inference" with its device and the models its Ollama has, and answers each
task with the task's model or OLLAMA_MODEL. If it dies mid-task the Coordinator's Reaper
gives the task to another inference worker. Everything else (checks, lock, heartbeat,
reliable take, guarded writes) is worker_base.py. Configuration: docs/workers.md.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import coordinator_contract as contract
import requests
import worker_base
from worker_base import (
    BaseConfig,
    EnvReader,
    Outcome,
    Task,
    Worker,
    error_text,
    http_url,
    log,
    ollama_models,
    one_line,
)

# The one place the version lives: the banner, --version and registration all read it.
VERSION = "1.0"
TASK_TYPES = contract.INFERENCE_TYPES
SUMMARIZE_PROMPT = ("Summarise the following text in a few sentences, in the language it is "
                    "written in.\n\n")


@dataclass(frozen=True)
class InferConfig(BaseConfig):
    ollama_host: str
    ollama_model: str
    device: str
    ollama_timeout: float

    @classmethod
    def own_fields(cls, env: EnvReader) -> dict[str, Any]:
        return {
            "ollama_host": http_url(env.required("OLLAMA_HOST")),
            "ollama_model": env.required("OLLAMA_MODEL"),
            "device": env.optional("WORKER_DEVICE", "cpu") or "cpu",
            "ollama_timeout": env.seconds("OLLAMA_TIMEOUT", 300),
        }


class OllamaError(Exception):
    """Ollama did not answer; the task fails with this message."""


class InferenceWorker(Worker):
    program = "worker_infer"
    title = "Inference Worker"
    kind = "inference"
    version = VERSION
    cfg: InferConfig

    @property
    def queues(self) -> list[str]:
        return [contract.inference_queue(self.cfg.device, self.cfg.worker_id)]

    def models(self) -> list[str]:
        return ollama_models(self.cfg.ollama_host, min(self.cfg.ollama_timeout, 10))

    def check_backends(self) -> None:
        self.check_ollama_model(self.cfg.ollama_host, self.cfg.ollama_model,
                                min(self.cfg.ollama_timeout, 10))

    def registration_extra(self) -> dict[str, Any]:
        # Read again at each (re-)registration, so a model pulled since shows up.
        try:
            models = self.models()
        except (requests.RequestException, ValueError) as error:
            log.warning("Could not list Ollama's models (%s); registering %s only",
                        one_line(error), self.cfg.ollama_model)
            models = [self.cfg.ollama_model]
        return {"device": self.cfg.device, "models": models}

    def execute(self, task: Task) -> Outcome:
        if task.task_type not in TASK_TYPES:
            return Outcome("failed", error=f"worker_infer answers {', '.join(TASK_TYPES)} "
                                           f"tasks, not {task.task_type}")
        model = task.model or self.cfg.ollama_model
        try:
            if task.task_type == "chat":
                answer = self.ollama("/api/chat", {
                    "model": model, "stream": False,
                    "messages": [{"role": "user", "content": task.prompt}],
                })["message"]["content"]
            else:
                prompt = task.prompt
                if task.task_type == "summarize":
                    prompt = SUMMARIZE_PROMPT + prompt
                answer = self.ollama("/api/generate", {
                    "model": model, "prompt": prompt, "stream": False,
                })["response"]
        except OllamaError as error:
            return Outcome("failed", error=str(error))
        except (KeyError, TypeError):
            return Outcome("failed", error=f"Ollama at {self.cfg.ollama_host} answered "
                                           "without the expected fields")
        return Outcome("done", result=str(answer))

    def ollama(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.cfg.ollama_host
        try:
            response = requests.post(f"{url}{path}", json=body,
                                     timeout=(5, self.cfg.ollama_timeout))
        except requests.Timeout:
            raise OllamaError(f"Ollama at {url} did not answer within "
                              f"{self.cfg.ollama_timeout:g}s") from None
        except requests.RequestException as error:
            raise OllamaError(f"Ollama at {url} is not reachable: {one_line(error)}") from None
        if response.status_code == 404:
            raise OllamaError(f"model {body['model']} is not on Ollama at {url}: "
                              f"{self.pull_hint(url, body['model'])}")
        if response.status_code != 200:
            raise OllamaError(f"Ollama at {url} answered HTTP {response.status_code} "
                              f"{error_text(response)}".rstrip())
        try:
            return response.json()
        except ValueError:
            raise OllamaError(f"Ollama at {url} did not answer JSON") from None


if __name__ == "__main__":
    sys.exit(worker_base.main(InferenceWorker, InferConfig))
