#!/usr/bin/env python3
"""Inference Worker: runs the Coordinator's generate/chat/summarize tasks on its Ollama.

It serves its own queue `tasks:<WORKER_DEVICE>:<WORKER_ID>` (e.g. `tasks:cpu:macbookair`),
registers as kind "inference" with its device and the models its Ollama has, and answers each
task with the task's model or OLLAMA_MODEL; the Coordinator's probe asks that model for one
token. If it dies mid-task the Coordinator's Reaper gives the task to another inference
worker. Everything else (checks, lock, heartbeat, reliable take, guarded writes) is
worker_base.py. Configuration: docs/workers.md.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, ClassVar

import coordinator_contract as contract
import requests
import worker_base as base

# The one place the version lives: the banner, --version and registration all read it.
VERSION = "1.0"
TASK_TYPES = contract.INFERENCE_TYPES
SUMMARIZE_PROMPT = ("Summarise the following text in a few sentences, in the language it is "
                    "written in.\n\n")


@dataclass(frozen=True)
class InferConfig(base.OllamaConfig):
    device: str

    ollama_timeout_default: ClassVar[float] = 300

    @classmethod
    def own_fields(cls, env: base.EnvReader) -> dict[str, Any]:
        return {**super().own_fields(env),
                "device": env.optional("WORKER_DEVICE", "cpu") or "cpu"}


class InferenceWorker(base.OllamaWorker):
    program = "worker_infer"
    title = "Inference Worker"
    kind = "inference"
    version = VERSION
    cfg: InferConfig

    @property
    def queues(self) -> list[str]:
        return [contract.inference_queue(self.cfg.device, self.cfg.worker_id)]

    def registration_extra(self) -> dict[str, Any]:
        # Read again at each (re-)registration, so a model pulled since shows up.
        try:
            models = self.models()
        except (requests.RequestException, ValueError) as error:
            base.log.warning("Could not list Ollama's models (%s); registering %s only",
                        base.one_line(error), self.cfg.ollama_model)
            models = [self.cfg.ollama_model]
        return {"device": self.cfg.device, "models": models}

    def execute(self, task: base.Task) -> base.Outcome:
        if task.task_type not in TASK_TYPES:
            return base.Outcome("failed", error=f"worker_infer answers {', '.join(TASK_TYPES)} "
                                           f"tasks, not {task.task_type}")
        model = task.model or self.cfg.ollama_model
        # The task's Ollama options, as POST /route took them; none: Ollama's defaults.
        options = {"options": task.options} if task.options else {}
        try:
            if task.task_type == "chat":
                answer = self.ollama("/api/chat", {
                    "model": model, "messages": [{"role": "user", "content": task.prompt}],
                    **options})["message"]["content"]
            else:
                prompt = task.prompt
                if task.task_type == "summarize":
                    prompt = SUMMARIZE_PROMPT + prompt
                answer = self.ollama("/api/generate", {"model": model, "prompt": prompt,
                                                       **options})["response"]
        except base.OllamaError as error:
            return base.Outcome("failed", error=str(error))
        except (KeyError, TypeError):
            return base.Outcome("failed", error=f"Ollama at {self.cfg.ollama_host} answered "
                                           "without the expected fields")
        return base.Outcome("done", result=str(answer), answered_model=model)

    def probe(self, task: base.Task) -> base.Outcome:
        model = task.model or self.cfg.ollama_model
        try:
            self.one_token(model, task.prompt)
        except base.OllamaError as error:
            return base.Outcome("failed", error=str(error))
        return base.Outcome("done", result=f"Ollama at {self.cfg.ollama_host} ran {model} "
                                           "for one token", answered_model=model)


def main(argv: list[str] | None = None) -> int:
    return base.main(InferenceWorker, InferConfig, argv)


if __name__ == "__main__":
    sys.exit(main())
