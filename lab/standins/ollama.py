"""ollama-standin: a STAND-IN for Ollama, not Ollama itself.

Ollama and model weights cannot be installed on the project's test machines, so tests, the
demo and the lab containers run this small server instead. It speaks the part of Ollama's
HTTP API (https://github.com/ollama/ollama/blob/main/docs/api.md) that the workers and the
Ansible module use, closely enough that unchanged clients work against it:

- ``GET /`` (``Ollama is running``), ``GET /api/version``, ``GET /api/tags``,
  ``POST /api/show``, ``DELETE /api/delete``;
- ``POST /api/pull``: NDJSON progress (``pulling manifest``, ``pulling <digest>`` with
  ``total``/``completed``, ``verifying sha256 digest``, ``writing manifest``,
  ``success``), or one ``{"status": "success"}`` with ``"stream": false``; errors come as
  Ollama sends them: ``{"error": ...}`` inside the stream, or 500 when not streamed;
- ``POST /api/generate`` and ``POST /api/chat``, streamed or not, with Ollama's final
  statistics (``done_reason``, ``total_duration``, ``eval_count``, ...):
  - for a model of the **registry** (``--registry``, an index of real GGUF files such as
    lab/inference.py makes), real generation with llama.cpp (llama-cpp-python, imported
    only then): the model loads at its first request and stays loaded for ``keep_alive``;
    the model's chat template, Ollama's default options and ``options`` (``num_predict``,
    ``temperature``, ``seed``, ``stop``, ``num_ctx``, ...); the counts and durations are
    llama.cpp's own; a file llama.cpp cannot load fails as Ollama's runner does. Its
    digest is the manifest of the real file, so two hosts serving one file agree;
  - for any other model, a short, deterministic made-up "summary" quoting the start of the
    prompt (Japanese is fine), spread over the configured latency and cut at
    ``options.num_predict`` pieces (``done_reason`` ``length``, in that share of the
    latency): what the unit tests need, fast.

Unknown paths answer ``404 page not found`` as Ollama does. ``--state-file`` keeps the
models present across restarts. Settings, the control endpoint and how to run it:
standin_core (``python3 ollama.py --port 11434``); every setting: lab/standins/README.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import SplitResult

from coordinator_contract import (
    DEFAULT_NAMESPACE,
    DEFAULT_REGISTRY,
    canonical_model_name,
    model_name_parts,
    same_model,
)

if __package__:
    from . import standin_core as core
else:  # copied onto a host: the files it imports lie beside it
    import standin_core as core  # type: ignore[no-redef]


NAME = "ollama-standin"
DEFAULT_PORT = 11434
DEFAULT_MODEL = "hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M"
# What Ollama answers when the registry has no such model.
NO_MANIFEST = "pull model manifest: file does not exist"
PARAMETER_COUNT = re.compile(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")
QUANTIZATION = re.compile(r"(?i)q\d\w*|f16|f32|bf16|fp16")
FAMILIES = (("lfm", "lfm2"), ("qwen", "qwen2"), ("gemma", "gemma3"), ("phi", "phi3"))
# Answer pieces as streamed: up to 8 characters and the spaces after them, so Japanese
# (no spaces) and English both arrive in several chunks and join back to the exact text.
PIECES = re.compile(r"\S{1,8}\s*|\s+")


def display_name(name: str) -> str:
    """How Ollama lists a model (types/model/name.go, DisplayShortest): without the default
    host and namespace, always with the tag (``latest`` when none was given). Names are
    compared with same_model, the rule every part of the cluster uses."""
    host, namespace, model, tag = model_name_parts(name)
    if host.lower() != DEFAULT_REGISTRY:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace.lower() != DEFAULT_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def is_model_name(value: object) -> bool:
    try:
        return isinstance(value, str) and bool(model_name_parts(value))
    except ValueError:
        return False


def as_model_names(value: object) -> list[str]:
    """Coerce a list of model names (JSON list, or comma-separated text), canonical, unique."""
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, list) or not all(is_model_name(name) for name in value):
        raise core.BadSetting("expected a list of model names (or comma-separated text), "
                              f"got {value!r}")
    names: list[str] = []
    for name in map(display_name, value):
        if not any(same_model(name, known) for known in names):
            names.append(name)
    return names


def as_pullable(value: object) -> str | list[str]:
    """Coerce ``"*"`` (any name can be pulled) or a list of the names that can."""
    if isinstance(value, str) and value.strip() == "*":
        return "*"
    try:
        return as_model_names(value)
    except core.BadSetting:
        raise core.BadSetting(
            f'expected "*" (any model) or a list of model names, got {value!r}'
        ) from None


def is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def is_seconds(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and 0 <= value < float("inf"))


def as_model_map(what: str, example: object,
                 valid: Callable[[object], bool] = is_text) -> Callable[[object], dict[str, Any]]:
    """A coercion of a map from model name to ``what`` (JSON text or an object), keyed by
    canonical name; ``valid`` accepts a value, ``example`` is one shown in its error."""

    def coerce(value: object) -> dict[str, Any]:
        value = core.json_object(value)
        if not isinstance(value, dict) or not all(
            is_model_name(name) and valid(entry) for name, entry in value.items()
        ):
            raise core.BadSetting(
                f"expected a JSON object from model name to {what}, e.g. "
                f"{json.dumps({'llama3.2': example})}, got {value!r}"
            )
        return {display_name(name): entry for name, entry in value.items()}
    return coerce


def as_text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise core.BadSetting(f"expected a non-empty string, got {value!r}")
    return value


REGISTRY_FIELDS = {"file": str, "sha256": str, "size": int, "family": str,
                   "parameter_count": int, "parameter_size": str, "quantization_level": str}


def load_registry(path: str) -> dict[str, dict[str, Any]]:
    """The real models of a registry index (lab/inference.py writes it): canonical name ->
    its entry, ``path`` the GGUF file's absolute path; BadSetting when it cannot be used."""
    index = Path(path)
    try:
        entries = json.loads(index.read_text(encoding="utf-8"))["models"]
        registry = {}
        for name, entry in entries.items():
            if not is_model_name(name) or not all(
                    isinstance(entry.get(key), kind) for key, kind in REGISTRY_FIELDS.items()):
                raise ValueError(f"entry {name!r} needs {', '.join(REGISTRY_FIELDS)}")
            registry[display_name(name)] = {**entry, "path": str(index.parent / entry["file"])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise core.BadSetting(f"registry {path} cannot be read ({type(exc).__name__}: {exc})"
                              ) from None
    return registry


def as_registry(value: object) -> str | None:
    """The path of a registry index that can be read, or None (no real models)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in core.OFF_WORDS):
        return None
    if not isinstance(value, str):
        raise core.BadSetting(f"expected the path of a registry index, got {value!r}")
    load_registry(value)
    return value


SCHEMA = (
    core.Setting("models", [DEFAULT_MODEL], as_model_names, "models present (comma-separated)"),
    core.Setting(
        "registry",
        None,
        as_registry,
        "JSON index of real GGUF models (lab/inference.py): pulled, described and run for "
        "real with llama.cpp",
    ),
    core.Setting("pullable", "*", as_pullable, 'models /api/pull can fetch: "*" (any) or a list'),
    core.Setting(
        "pull_errors",
        {},
        as_model_map("error text", "pull model manifest: 412: ..."),
        "JSON object: model name -> the error Ollama gives when pulling it",
    ),
    core.Setting(
        "weights",
        {},
        as_model_map("a weights label", "retrained"),
        "JSON object: model name -> label of other weights under that name (another digest)",
    ),
    core.Setting("pull_seconds", 1.0, core.as_float(0), "how long pulling an absent model takes"),
    core.Setting("latency", 0.0, core.as_float(0), "seconds each generate/chat call takes"),
    core.Setting(
        "model_latency",
        {},
        as_model_map("seconds", 2.5, is_seconds),
        "JSON object: model name -> seconds its generate/chat calls take (instead of latency)",
    ),
    core.Setting(
        "load_errors",
        {},
        as_model_map("error text", "llama runner process has terminated: exit status 2"),
        "JSON object: model name -> the error Ollama gives when that model fails to load",
    ),
    core.Setting(
        "fail",
        None,
        core.as_fail(("error", "timeout")),
        'injected failure: "error" = 500 {"error": fail_message}, '
        '"timeout" = no answer for hang_seconds',
    ),
    core.Setting(
        "fail_generate_only",
        False,
        core.as_bool,
        "the injected failure hits only /api/generate and /api/chat (tags etc. still work)",
    ),
    core.Setting(
        "fail_message",
        "llama runner process has terminated: exit status 2",
        as_text,
        'the error text of fail="error"',
    ),
    core.Setting("hang_seconds", 600.0, core.as_float(0), 'how long fail="timeout" stays silent'),
    core.Setting("ollama_version", "0.13.0", as_text, "the version /api/version reports"),
)


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# Ollama keeps a model loaded for 5 minutes after its last request unless told otherwise.
DEFAULT_KEEP_ALIVE = 300.0
DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ms|s|m|h)?")
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
# A negative keep_alive keeps the model loaded until it is unloaded or deleted.
FOREVER = datetime(2318, 1, 1, tzinfo=UTC)


def keep_alive_seconds(value: object) -> float | None:
    """Seconds a request's ``keep_alive`` keeps its model loaded (a number of seconds or a Go
    duration such as ``"10m"``; negative: for ever), or None when it is not one."""
    if value is None:
        return DEFAULT_KEEP_ALIVE
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    match = DURATION.fullmatch(value.strip()) if isinstance(value, str) else None
    return float(match.group(1)) * DURATION_UNITS[match.group(2)] if match else None


def json_line(document: object) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode() + b"\n"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def billions_of(name: str) -> float:
    match = PARAMETER_COUNT.search(name.rsplit("/", 1)[-1])
    return float(match.group(1)) if match else 3.0


def blobs(name: str, weights: str = "", real: dict[str, Any] | None = None
          ) -> list[dict[str, Any]]:
    """The blobs of a model's manifest, config first: made up from the model (any spelling of
    its name) and ``weights``, the label of other weights under the same name; for a model of
    the registry (``real``), the weights blob is its GGUF file, and the rest follows from that
    file, so every host serving the same file lists the same digest."""
    model = canonical_model_name(name) + (f"\n{weights}" if weights else "")
    # Weights of about 4.8 bits each, as Q4_K_M files weigh.
    weights_blob = ("sha256:" + sha256_hex(f"weights\n{model}"), int(billions_of(name) * 0.6e9))
    if real is not None:
        model = real["sha256"]
        weights_blob = ("sha256:" + real["sha256"], real["size"])
    kinds = (
        ("application/vnd.docker.container.image.v1+json", "config", 480),
        ("application/vnd.ollama.image.template", "template", 1024),
        ("application/vnd.ollama.image.params", "params", 96),
    )
    config, template, params = ({"mediaType": media, "digest": "sha256:" + sha256_hex(
        f"{kind}\n{model}"), "size": size} for media, kind, size in kinds)
    weights_layer = {"mediaType": "application/vnd.ollama.image.model",
                     "digest": weights_blob[0], "size": weights_blob[1]}
    return [config, weights_layer, template, params]


def manifest(name: str, weights: str = "", real: dict[str, Any] | None = None) -> bytes:
    """The manifest file of a model, as Ollama writes it (manifest/manifest.go): its sha256 is
    the digest Ollama lists, the same for every spelling of the name."""
    config, *layers = blobs(name, weights, real)
    document = {"schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": config, "layers": layers}
    return json.dumps(document, separators=(",", ":")).encode() + b"\n"


def describe(name: str, weights: str = "", real: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """A model's digest, size and details: a registry model's (``real``) from its file,
    others plausible and deterministic, guessed from the name; ``weights`` labels other
    weights under the same name, which change its blobs and so its digest, as a moved tag
    does."""
    billions = billions_of(name)
    tag = model_name_parts(name)[3]
    family = next((fam for key, fam in FAMILIES if key in name.lower()), "llama")
    details = {
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": f"{billions:g}B",
        "quantization_level": tag.upper() if QUANTIZATION.fullmatch(tag) else "Q4_K_M",
    }
    if real is not None:
        details.update(family=real["family"], families=[real["family"]],
                       parameter_size=real["parameter_size"],
                       quantization_level=real["quantization_level"])
    return {
        "digest": hashlib.sha256(manifest(name, weights, real)).hexdigest(),
        # The manifest's blobs together (manifest.go, Size).
        "size": sum(blob["size"] for blob in blobs(name, weights, real)),
        "parameter_count": real["parameter_count"] if real else int(billions * 1e9),
        "details": details,
    }


def layers_for(name: str, weights: str = "", real: dict[str, Any] | None = None
               ) -> list[tuple[str, int]]:
    """The blobs a pull of ``name`` fetches, as (digest, size): the manifest's layers (weights,
    template, parameters), then its config (server/images.go, PullModel)."""
    config, *layers = blobs(name, weights, real)
    return [(blob["digest"], blob["size"]) for blob in [*layers, config]]


def predict_limit(request: dict[str, Any]) -> int | None:
    """The cap ``options.num_predict`` puts on the answer's tokens, or None: Ollama's runner
    caps only at a positive value (-1, its default, and 0 generate until the model stops)."""
    limit = request_options(request).get("num_predict")
    if isinstance(limit, bool) or not isinstance(limit, int | float) or limit != int(limit):
        return None
    return int(limit) if limit > 0 else None


def compose_answer(prompt: str, model: str) -> str:
    """The stand-in's "summary": deterministic, quoting the start of the prompt."""
    flat = " ".join(prompt.split())
    excerpt = flat if len(flat) <= 80 else flat[:80] + "…"
    return (
        f"要約: 「{excerpt}」に関する内容です。"
        f"（{NAME} が {model} の代わりに生成、入力 {len(prompt)} 文字）"
    )


class LoadError(RuntimeError):
    """llama.cpp could not load a model's file; the message is Ollama's."""


# Ollama's defaults for what a request's options leave out (api/types.go, DefaultOptions;
# envconfig.go: OLLAMA_CONTEXT_LENGTH 4096), as llama-cpp-python's create_chat_completion
# names them.
SAMPLING_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0,
                     "typical_p": 1.0, "repeat_penalty": 1.1, "presence_penalty": 0.0,
                     "frequency_penalty": 0.0}
DEFAULT_NUM_CTX = 4096
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cpu_quotas() -> Iterator[float]:
    """The CPU quotas (in CPUs) of this process's cgroup and those above it: cgroup v2's
    cpu.max, or v1's cpu.cfs_quota_us over cpu.cfs_period_us (a host with the hybrid
    hierarchy runs its containers on v1)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controllers == "":
            root, files = CGROUP_ROOT, ("cpu.max",)
        elif "cpu" in controllers.split(","):
            root, files = CGROUP_ROOT / controllers, ("cpu.cfs_quota_us", "cpu.cfs_period_us")
            if not root.exists():
                root = CGROUP_ROOT / "cpu"
        else:
            continue
        group = root / path.strip().lstrip("/")
        for directory in (group, *group.parents):
            if not directory.is_relative_to(root):
                break
            try:
                values = " ".join((directory / name).read_text() for name in files).split()
            except OSError:
                continue
            if values[0] not in ("max", "-1"):
                yield int(values[0]) / int(values[1])


def default_threads() -> int:
    """Threads for generation when ``options.num_thread`` is not given: the CPUs this
    process may use, and no more than the CPU quota of its cgroup or any above it (systemd's
    CPUQuota, ``podman --cpus``), as a virtual machine with that many CPUs would have; more
    threads than the quota only wait on one another in llama.cpp's barriers."""
    cpus = len(os.sched_getaffinity(0))
    for quota in cpu_quotas():
        cpus = min(cpus, max(1, math.floor(quota)))
    return cpus


def request_options(request: dict[str, Any]) -> dict[str, Any]:
    """A request's ``options``, or none when it gave no object."""
    options = request.get("options")
    return options if isinstance(options, dict) else {}


def number_option(options: dict[str, Any], key: str, default: float) -> Any:
    """``options[key]`` as the type of ``default``, or ``default`` when it is not a number."""
    value = options.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return type(default)(value)


class Engine:
    """Real generation for the registry's models with llama.cpp, through llama-cpp-python
    (imported at the first such request, so the stand-in itself needs only the standard
    library). A model loads at its first request and stays loaded until unloaded; one
    request runs at a time per model, as with Ollama's default OLLAMA_NUM_PARALLEL of 1."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # name -> the loaded model, the lock of its one request at a time, its num_ctx
        self.models: dict[str, tuple[Any, threading.Lock, int]] = {}

    def unload(self, name: str) -> None:
        with self.lock:
            self.models.pop(name, None)

    def load(self, name: str, path: str,
             options: dict[str, Any]) -> tuple[Any, threading.Lock, int]:
        """The loaded model (loaded now, or again when ``num_ctx`` changed, as Ollama reloads
        a runner) and the nanoseconds its load took (0 when it was loaded)."""
        # Imported here: only real models need llama.cpp.
        import llama_cpp

        num_ctx = number_option(options, "num_ctx", DEFAULT_NUM_CTX)
        with self.lock:
            loaded = self.models.get(name)
            if loaded is not None and loaded[2] == num_ctx:
                return loaded[0], loaded[1], 0
            started = time.monotonic_ns()
            # One thread count for the prompt and the generation, as Ollama's num_thread
            # (llama-cpp-python would give the prompt one per CPU of the machine, which a
            # quota of fewer makes wait on each other).
            threads = number_option(options, "num_thread", default_threads())
            try:
                model = llama_cpp.Llama(path, n_ctx=num_ctx, verbose=False, n_threads=threads,
                                        n_threads_batch=threads)
            except (ValueError, OSError) as exc:
                # Ollama's words when its runner cannot load a model (llm/server.go).
                raise LoadError(f"llama runner process has terminated: error loading model: "
                                f"{exc}") from None
            self.models[name] = (model, threading.Lock(), num_ctx)
            return model, self.models[name][1], time.monotonic_ns() - started

    def generate(self, name: str, path: str, request: dict[str, Any], chat: bool,
                 emit: Callable[[str], None]) -> dict[str, Any]:
        """Generate the answer to ``request`` (its model loaded first, LoadError when it
        cannot be), passing each piece to ``emit``; Ollama's final statistics but the load's
        (``done_reason`` and the counts and durations, from llama.cpp's own performance
        counters)."""
        import llama_cpp

        options = request_options(request)
        model, model_lock, _load_ns = self.load(name, path, options)
        limit = predict_limit(request)
        stop = options.get("stop")
        seed = number_option(options, "seed", -1)
        sampling = {key: number_option(options, key, default)
                    for key, default in SAMPLING_DEFAULTS.items()}
        fmt = request.get("format")
        response_format = ({"type": "json_object"} if fmt == "json" else
                           {"type": "json_object", "schema": fmt} if isinstance(fmt, dict)
                           else None)
        sampled = 0

        def count(_tokens: Any, logits: Any) -> Any:
            """Called once for each token sampled, the end-of-generation one included."""
            nonlocal sampled
            sampled += 1
            return logits

        def past_limit() -> bool:
            """Whether a token past num_predict was sampled. llama-cpp-python checks its
            max_tokens only on whole characters: a num_predict-th token in the middle of a
            multi-byte character (Japanese) gets one or more tokens more, and the piece they
            finish. Ollama's runner stops at num_predict tokens and drops the unfinished
            character's bytes (runner.go, flushPending): that piece is not emitted here."""
            return limit is not None and sampled > limit

        with model_lock:
            llama_cpp.llama_perf_context_reset(model.ctx)
            # Ollama's seed -1 (its default) is llama.cpp's LLAMA_DEFAULT_SEED: a random seed
            # at each request; llama-cpp-python would reuse one fixed seed instead.
            common = {"stream": True, "max_tokens": limit,
                      "seed": random.getrandbits(31) if seed < 0 else seed,
                      "stop": stop if isinstance(stop, list) else [],
                      "logits_processor": llama_cpp.LogitsProcessorList([count]), **sampling}
            if not chat and request.get("raw"):
                chunks = model.create_completion(str(request.get("prompt") or ""), **common)
            else:
                chunks = model.create_chat_completion(
                    messages=chat_messages(request, chat), response_format=response_format,
                    **common)
            finish = None
            for chunk in chunks:
                if past_limit():
                    break
                # A completion's piece is its text, a chat's its delta's content.
                choice = chunk["choices"][0]
                text = choice.get("text") or choice.get("delta", {}).get("content")
                if text:
                    emit(text)
                finish = choice.get("finish_reason") or finish
            perf = llama_cpp.llama_perf_context(model.ctx)
        cut = past_limit()
        return {
            # llama-cpp-python says "length" when its max_tokens or the context ended it.
            "done_reason": "length" if finish == "length" or cut else "stop",
            "prompt_eval_count": perf.n_p_eval,
            "prompt_eval_duration": int(perf.t_p_eval_ms * 1e6),
            # The tokens generated, as Ollama counts them: not the end-of-generation token,
            # nor the one sampled past num_predict. (llama.cpp's own count is of the tokens
            # it decoded, which the prompt cache and the last token sampled make differ.)
            "eval_count": limit if cut else sampled - int(finish == "stop"),
            "eval_duration": int(perf.t_eval_ms * 1e6),
        }


def chat_messages(request: dict[str, Any], chat: bool) -> list[dict[str, str]]:
    """The conversation the model's template formats: a chat's messages, or a generate's
    ``system`` and ``prompt`` as Ollama's template gets them."""
    if chat:
        return [{"role": str(m.get("role") or "user"), "content": str(m.get("content") or "")}
                for m in request.get("messages") or []]
    messages = []
    if request.get("system"):
        messages.append({"role": "system", "content": str(request["system"])})
    messages.append({"role": "user", "content": str(request.get("prompt") or "")})
    return messages


class StateFileError(ValueError):
    """The state file exists but cannot be read back."""


def load_state(path: Path) -> dict[str, str] | None:
    """Models present (name -> modified_at) saved by an earlier run, or None without a file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        entries = document["models"]
        models = {display_name(entry["name"]): str(entry["modified_at"]) for entry in entries}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StateFileError(
            f"state file {path} cannot be read ({type(exc).__name__}: {exc}); "
            "fix it or delete it to start from --models"
        ) from None
    return models


def save_state(path: Path, models: dict[str, str]) -> None:
    """Write atomically, so a restart never finds half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "standin": NAME,
        "models": [{"name": name, "modified_at": when} for name, when in models.items()],
    }
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, ensure_ascii=False, indent=2) + "\n", "utf-8")
    os.replace(temporary, path)


class OllamaStore(core.Store):
    """Settings plus when each present model was pulled; persisted to the state file."""

    def __init__(
        self,
        values: dict[str, Any],
        state_file: Path | None,
        modified: dict[str, str],
    ) -> None:
        super().__init__(NAME, SCHEMA, values)
        self.state_file = state_file
        self.modified = modified
        # Loaded models and when each is unloaded (UTC); in memory, as in Ollama.
        self.loaded: dict[str, datetime] = {}
        self.registry: dict[str, dict[str, Any]] = {}
        self.engine = Engine()
        self.applied({"models": values["models"], "registry": values["registry"]})

    def applied(self, changes: dict[str, Any]) -> None:
        if "registry" in changes:
            path = changes["registry"]
            self.registry = load_registry(path) if path else {}
        if "models" in changes:
            stamp = now_text()
            self.modified = {name: self.modified.get(name, stamp) for name in changes["models"]}
            if self.state_file is not None:
                save_state(self.state_file, self.modified)

    def find(self, requested: str) -> str | None:
        """The present model a request names, by Ollama's matching (same_model)."""
        with self.lock:
            return next((name for name in self.modified if same_model(name, requested)), None)

    def spelt_as_present(self, requested: str) -> str:
        """The name a pull of ``requested`` stores: each part spelt as a present model spells
        it (server/routes.go, getExistingName), listed as Ollama lists names."""
        parts = list(model_name_parts(requested))
        with self.lock:
            for name in self.modified:
                for index, part in enumerate(model_name_parts(name)):
                    if part.lower() == parts[index].lower():
                        parts[index] = part
        host, namespace, model, tag = parts
        return display_name(f"{host}/{namespace}/{model}:{tag}")

    def add_model(self, name: str) -> None:
        with self.lock:
            if self.find(name) is None:
                self.update({"models": [*self.values["models"], name]})

    def remove_model(self, requested: str) -> bool:
        with self.lock:
            name = self.find(requested)
            if name is None:
                return False
            self.update({"models": [known for known in self.values["models"] if known != name]})
            self.loaded.pop(name, None)
            return True

    def real(self, name: str) -> dict[str, Any] | None:
        """The registry's entry for ``name`` (any spelling), or None: a made-up model."""
        with self.lock:
            return next((entry for known, entry in self.registry.items()
                         if same_model(known, name)), None)

    def for_model(self, setting: str, name: str) -> Any:
        """The entry for ``name`` of a setting keyed by model name, or None."""
        with self.lock:
            return next((value for known, value in self.values[setting].items()
                         if same_model(known, name)), None)

    def weights(self, name: str) -> str:
        """The label of the weights served under ``name`` ("" for the usual ones)."""
        return self.for_model("weights", name) or ""

    def describe(self, name: str) -> dict[str, Any]:
        return describe(name, self.weights(name), self.real(name))

    def keep_loaded(self, name: str, seconds: float) -> None:
        """A request for ``name`` loads it for ``seconds`` (0 unloads it, negative: for ever)."""
        with self.lock:
            if seconds == 0:
                self.loaded.pop(name, None)
                self.engine.unload(name)
            else:
                self.loaded[name] = (FOREVER if seconds < 0
                                     else datetime.now(UTC) + timedelta(seconds=seconds))

    def expire(self) -> None:
        """Unload the models whose keep_alive has passed, as Ollama's scheduler does."""
        with self.lock:
            now = datetime.now(UTC)
            for name in [name for name, until in self.loaded.items() if until <= now]:
                del self.loaded[name]
                self.engine.unload(name)

    def running(self) -> list[dict[str, Any]]:
        """``/api/ps``: the loaded models, the one unloaded last first; expired ones dropped."""
        self.expire()
        with self.lock:
            loaded = sorted(self.loaded.items(), key=lambda item: item[1], reverse=True)
        models = []
        for name, until in loaded:
            info = self.describe(name)
            models.append({
                "name": name, "model": name, "size": info["size"], "digest": info["digest"],
                "details": info["details"],
                "expires_at": until.isoformat(timespec="microseconds").replace("+00:00", "Z"),
                # Everything on the GPU, as on Apple silicon with unified memory.
                "size_vram": info["size"], "context_length": DEFAULT_NUM_CTX,
            })
        return models

    def pull_error(self, name: str) -> str | None:
        """The error pulling ``name`` gives, or None when the pull succeeds."""
        with self.lock:
            error = self.for_model("pull_errors", name)
            if error is not None:
                return error
            pullable = self.values["pullable"]
            if pullable == "*" or self.find(name) is not None or self.real(name) is not None:
                return None
            return None if any(same_model(known, name) for known in pullable) else NO_MANIFEST

    def listing(self) -> list[dict[str, Any]]:
        with self.lock:
            present = sorted(self.modified.items(), key=lambda item: item[1], reverse=True)
        models = []
        for name, modified_at in present:
            info = self.describe(name)
            models.append(
                {
                    "name": name,
                    "model": name,
                    "modified_at": modified_at,
                    "size": info["size"],
                    "digest": info["digest"],
                    "details": info["details"],
                }
            )
        return models


class OllamaHandler(core.StandinHandler):
    standin_name = NAME
    store: ClassVar[OllamaStore]
    routes: ClassVar[dict[str, dict[str, str]]] = {
        "/": {"GET": "root", "HEAD": "root"},
        "/api/version": {"GET": "version", "HEAD": "version"},
        "/api/tags": {"GET": "tags", "HEAD": "tags"},
        "/api/ps": {"GET": "ps"},
        "/api/show": {"POST": "show"},
        "/api/pull": {"POST": "pull"},
        "/api/delete": {"DELETE": "delete"},
        "/api/generate": {"POST": "generate"},
        "/api/chat": {"POST": "chat"},
    }

    # Ollama (gin) answers these in plain text.
    def not_found(self) -> None:
        self.send_body(404, b"404 page not found", "text/plain")

    def method_not_allowed(self, allowed: list[str]) -> None:
        self.send_body(405, b"405 method not allowed", "text/plain")

    def model_request(self, invalid: str) -> tuple[dict[str, Any], str] | None:
        """The JSON body and the model it names (``model``, else ``name``), or None once
        answered: 400 ``invalid`` (``{name}`` in it: the name given, as JSON) for a missing
        or malformed name, or an injected failure."""
        request = self.read_request()
        if request is None:
            return None
        requested = request.get("model") or request.get("name") or ""
        if not is_model_name(requested):
            self.send_json(400, {"error": invalid.format(name=json.dumps(requested))})
            return None
        if self.injected_failure(generation=False):
            return None
        return request, requested

    def read_request(self) -> dict[str, Any] | None:
        """The JSON body, or None once a 400 has been answered as Ollama words it."""
        body = self.read_body()
        if not body.strip():
            self.send_json(400, {"error": "missing request body"})
            return None
        try:
            request = json.loads(body)
        except ValueError as exc:
            self.send_json(400, {"error": f"invalid JSON in the request body: {exc}"})
            return None
        if not isinstance(request, dict):
            self.send_json(400, {"error": "the request body must be a JSON object"})
            return None
        return request

    def injected_failure(self, generation: bool) -> bool:
        """Answer the injected failure if it applies here; True when it did."""
        fail = self.store.get("fail")
        if fail is None or (self.store.get("fail_generate_only") and not generation):
            return False
        if fail == "timeout":
            self.hang()
        self.send_json(500, {"error": self.store.get("fail_message")})
        return True

    def root(self, url: SplitResult) -> None:
        if not self.injected_failure(generation=False):
            self.send_body(200, b"Ollama is running", "text/plain; charset=utf-8")

    def version(self, url: SplitResult) -> None:
        if not self.injected_failure(generation=False):
            self.send_json(200, {"version": self.store.get("ollama_version")})

    def tags(self, url: SplitResult) -> None:
        if not self.injected_failure(generation=False):
            self.send_json(200, {"models": self.store.listing()})

    def ps(self, url: SplitResult) -> None:
        self.send_json(200, {"models": self.store.running()})

    def show(self, url: SplitResult) -> None:
        named = self.model_request("model is required")
        if named is None:
            return
        _request, requested = named
        name = self.store.find(requested)
        if name is None:
            self.send_json(404, {"error": f"model '{requested}' not found"})
            return
        info = self.store.describe(name)
        self.send_json(
            200,
            {
                "license": "",
                "modelfile": '# Modelfile generated by "ollama show"\n'
                "# To build a new Modelfile based on this, replace FROM with:\n"
                f"# FROM {name}\n\nFROM {name}\n"
                'TEMPLATE "{{ .Prompt }}"\n',
                "parameters": "",
                "template": "{{ .Prompt }}",
                "details": info["details"],
                "model_info": {
                    "general.architecture": info["details"]["family"],
                    "general.parameter_count": info["parameter_count"],
                },
                "capabilities": ["completion"],
                "modified_at": self.store.modified.get(name, now_text()),
            },
        )

    def delete(self, url: SplitResult) -> None:
        named = self.model_request("name {name} is invalid")
        if named is None:
            return
        _request, requested = named
        if not self.store.remove_model(requested):
            self.send_json(404, {"error": f"model '{requested}' not found"})
            return
        self.send_body(200, b"", "text/plain; charset=utf-8")

    def pull(self, url: SplitResult) -> None:
        named = self.model_request("invalid model name")
        if named is None:
            return
        request, requested = named
        events = self.pull_events(self.store.spelt_as_present(requested))
        if request.get("stream", True) is not False:
            self.start_stream("application/x-ndjson")
            for event in events:
                self.stream_chunk(json_line(event))
            self.end_stream()
            return
        last: dict[str, Any] = {}
        for event in events:
            if "error" in event:
                self.send_json(500, event)
                return
            last = event
        self.send_json(200, last)

    def pull_events(self, name: str) -> Iterator[dict[str, Any]]:
        """Ollama's progress messages, paced over ``pull_seconds``; the model lands at the end."""
        yield {"status": "pulling manifest"}
        error = self.store.pull_error(name)
        if error is not None:
            yield {"error": error}
            return
        # A model already present has its blobs: the pull only re-checks them.
        seconds = 0.0 if self.store.find(name) else self.store.get("pull_seconds")
        steps = 4
        layers = layers_for(name, self.store.weights(name), self.store.real(name))
        for index, (digest, total) in enumerate(layers):
            status = f"pulling {digest[7:19]}"
            if index > 0:
                yield {"status": status, "digest": digest, "total": total, "completed": total}
                continue
            yield {"status": status, "digest": digest, "total": total}
            for step in range(1, steps + 1):
                time.sleep(seconds / steps)
                completed = total * step // steps
                yield {"status": status, "digest": digest, "total": total, "completed": completed}
        yield {"status": "verifying sha256 digest"}
        yield {"status": "writing manifest"}
        self.store.add_model(name)
        yield {"status": "success"}

    def generate(self, url: SplitResult) -> None:
        request = self.read_request()
        if request is not None:
            self.answer(request, chat=False)

    def chat(self, url: SplitResult) -> None:
        request = self.read_request()
        if request is not None:
            self.answer(request, chat=True)

    def answer(self, request: dict[str, Any], chat: bool) -> None:
        started = time.monotonic_ns()
        requested = request.get("model")
        if not is_model_name(requested):
            self.send_json(400, {"error": "model is required"})
            return
        name = self.store.find(requested)
        if name is None:
            self.send_json(404, {"error": f"model '{requested}' not found"})
            return
        keep_alive = keep_alive_seconds(request.get("keep_alive"))
        if keep_alive is None:
            self.send_json(400, {"error": "time: invalid duration "
                                          f"{json.dumps(str(request.get('keep_alive')))}"})
            return
        if self.injected_failure(generation=True):
            return
        self.store.expire()
        load_error = self.store.for_model("load_errors", name)
        if load_error is not None:
            self.send_json(500, {"error": load_error})
            return
        self.store.keep_loaded(name, keep_alive)
        if chat:
            messages = request.get("messages") or []
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                self.send_json(400, {"error": "messages must be a list of {role, content}"})
                return
            users = [m for m in messages if m.get("role") == "user"] or messages
            prompt = str(users[-1].get("content") or "") if users else ""
            nothing_asked = not messages
        else:
            prompt = str(request.get("prompt") or "")
            nothing_asked = not prompt

        def reply(content: str, done: bool) -> dict[str, Any]:
            message: dict[str, Any] = {"model": requested, "created_at": now_text()}
            if chat:
                message["message"] = {"role": "assistant", "content": content}
            else:
                message["response"] = content
            message["done"] = done
            return message

        real = self.store.real(name)
        if nothing_asked:
            # Ollama loads (or, with keep_alive 0, unloads) the model and answers at once.
            unload = keep_alive == 0
            if real is not None and not unload and self.load_for_real(name, real, request) is None:
                return
            self.send_json(200, {**reply("", True), "done_reason": "unload" if unload else "load"})
            return
        if real is not None:
            self.answer_for_real(name, real, request, chat, reply, started)
            return
        text = compose_answer(prompt, name)
        if request.get("format") == "json" or isinstance(request.get("format"), dict):
            text = json.dumps({"summary": text}, ensure_ascii=False)
        pieces = PIECES.findall(text)
        latency = self.store.for_model("model_latency", name)
        if latency is None:
            latency = self.store.get("latency")
        # The latency is a whole answer's. options.num_predict caps the tokens generated:
        # Ollama's runner ends the sequence there with done_reason "length"
        # (runner/ollamarunner/runner.go; llm/server.go, DoneReasonLength), so a capped answer,
        # such as the one-token generation that proves a model loads, takes its share.
        done_reason = "stop"
        limit = predict_limit(request)
        if limit is not None and limit < len(pieces):
            latency *= limit / len(pieces)
            pieces, done_reason = pieces[:limit], "length"
            text = "".join(pieces)

        def final(content: str) -> dict[str, Any]:
            total = time.monotonic_ns() - started
            load, prompt_eval = min(total // 10, 5_000_000), min(total // 10, 20_000_000)
            return {
                **reply(content, True),
                "done_reason": done_reason,
                "total_duration": total,
                "load_duration": load,
                "prompt_eval_count": len(prompt) // 2 + 1,
                "prompt_eval_duration": prompt_eval,
                "eval_count": len(pieces),
                "eval_duration": max(total - load - prompt_eval, 0),
            }

        if request.get("stream", True) is False:
            time.sleep(latency)
            self.send_json(200, final(text))
            return
        self.start_stream("application/x-ndjson")
        for piece in pieces:
            time.sleep(latency / len(pieces))
            self.stream_chunk(json_line(reply(piece, False)))
        self.stream_chunk(json_line(final("")))
        self.end_stream()

    def load_for_real(self, name: str, real: dict[str, Any],
                      request: dict[str, Any]) -> int | None:
        """Load a registry model (once): the nanoseconds it took, or None once its load
        failure has been answered."""
        started = time.monotonic_ns()
        try:
            _model, _lock, load_ns = self.store.engine.load(name, real["path"],
                                                            request_options(request))
        except LoadError as exc:
            self.store.keep_loaded(name, 0)
            self.send_json(500, {"error": str(exc)})
            return None
        return load_ns or time.monotonic_ns() - started

    def answer_for_real(self, name: str, real: dict[str, Any], request: dict[str, Any],
                        chat: bool, reply: Callable[[str, bool], dict[str, Any]],
                        started: int) -> None:
        """The answer of the model itself: streamed as llama.cpp generates it, or whole."""
        load_ns = self.load_for_real(name, real, request)
        if load_ns is None:
            return
        streamed = request.get("stream", True) is not False
        collected: list[str] = []
        if streamed:
            self.start_stream("application/x-ndjson")

        def emit(piece: str) -> None:
            if streamed:
                self.stream_chunk(json_line(reply(piece, False)))
            else:
                collected.append(piece)

        statistics = self.store.engine.generate(name, real["path"], request, chat, emit)
        final = {**reply("" if streamed else "".join(collected), True),
                 "done_reason": statistics.pop("done_reason"),
                 "total_duration": time.monotonic_ns() - started, "load_duration": load_ns,
                 **statistics}
        if streamed:
            self.stream_chunk(json_line(final))
            self.end_stream()
        else:
            self.send_json(200, final)


def main(argv: Sequence[str] | None = None) -> None:
    parser = core.command_line_parser(
        NAME, "Ollama", "its HTTP API with made-up, deterministic answers")
    parser.add_argument(
        "--state-file",
        type=Path,
        default=os.environ.get("STANDIN_STATE_FILE") or None,
        help="JSON file keeping the models present across restarts; when it exists it "
        "wins over --models (env STANDIN_STATE_FILE)",
    )
    args, values = core.parse_command_line(parser, SCHEMA, DEFAULT_PORT, argv)
    modified: dict[str, str] = {}
    if args.state_file is not None:
        try:
            saved = load_state(args.state_file)
        except StateFileError as exc:
            parser.error(str(exc))
        if saved is not None:
            values["models"], modified = list(saved), saved
    store = OllamaStore(values, args.state_file, modified)
    core.serve(OllamaHandler, store, args.bind, args.port, "Ollama")


if __name__ == "__main__":
    main()
