"""Pure parts of the Coordinator: configuration, validation, routing choice, state-machine
SQL, Reaper decisions. No servers needed."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import coordinator_contract as contract
import jsonschema
import pytest
import redis.exceptions
from coordinator_contract import INFERENCE_TYPES
from fastapi import APIRouter

from coordinator import __version__
from coordinator import app as app_module
from coordinator import statemachine as sm
from coordinator.access import METRICS, OPERATOR, WORKER, Keys
from coordinator.api_models import RegisterBody
from coordinator.app import create_app, validation_message
from coordinator.config import ConfigError, load_config
from coordinator.errors import redis_message
from coordinator.reaper import (
    Fail,
    InstanceView,
    Requeue,
    TaskView,
    WorkerView,
    find_duplicates,
    find_orphans,
    plan_inference,
    plan_shared,
)
from coordinator.registry import KnownWorker, Registry
from coordinator.routing import (
    ROUTES,
    Candidate,
    RequestError,
    choose_worker,
    inference_queue_of,
    parse_route_request,
    registered_queues,
    serves,
)
from coordinator.schema import MIGRATIONS, pending

BASE = {"PG_DSN": "host=db port=5432 dbname=c user=c password=secret", "REDIS_HOST": "r"}


def test_version() -> None:
    assert __version__.count(".") == 2


# -- configuration -------------------------------------------------------------------------


def test_config_defaults() -> None:
    cfg = load_config(BASE)
    assert (cfg.redis_port, cfg.bind, cfg.port, cfg.token) == (6379, "127.0.0.1", 8000, None)
    assert (cfg.heartbeat_ttl, cfg.web_task_deadline, cfg.max_attempts) == (15, 60, 3)
    assert (cfg.task_timeout, cfg.max_prompt_bytes) == (900, 1024 * 1024)
    assert cfg.heartbeat_interval == 5
    assert cfg.pg_address == "db:5432"
    assert "secret" not in cfg.pg_address


def test_config_values() -> None:
    cfg = load_config(BASE | {
        "REDIS_PORT": "6380", "REDIS_PASSWORD": "pw", "REDIS_USERNAME": "coordinator",
        "COORDINATOR_BIND": "0.0.0.0",
        "COORDINATOR_PORT": "9000", "COORDINATOR_TOKEN": "t0k", "COORDINATOR_HEARTBEAT_TTL": "1.5",
        "COORDINATOR_WEB_TASK_DEADLINE": "0", "COORDINATOR_MAX_ATTEMPTS": "5",
        "COORDINATOR_TASK_TIMEOUT": "30", "COORDINATOR_MAX_PROMPT_BYTES": "100",
        "COORDINATOR_LOG_LEVEL": "debug",
    })
    assert cfg.log_level == "DEBUG"
    assert (cfg.redis_port, cfg.redis_password, cfg.bind, cfg.port) == (6380, "pw", "0.0.0.0",
                                                                        9000)
    assert (cfg.redis_username, cfg.redis_user, load_config(BASE).redis_user) == (
        "coordinator", "coordinator", "default")
    assert (cfg.token, cfg.heartbeat_ttl, cfg.web_task_deadline) == ("t0k", 1.5, 0)
    assert (cfg.max_attempts, cfg.task_timeout, cfg.max_prompt_bytes) == (5, 30, 100)


@pytest.mark.parametrize(("env", "name"), [
    ({"REDIS_HOST": "r"}, "PG_DSN"),
    ({"PG_DSN": "host=x"}, "REDIS_HOST"),
    (BASE | {"PG_DSN": "host=x port"}, "PG_DSN"),
    (BASE | {"REDIS_PORT": "abc"}, "REDIS_PORT"),
    (BASE | {"REDIS_PORT": "70000"}, "REDIS_PORT"),
    (BASE | {"COORDINATOR_PORT": "0"}, "COORDINATOR_PORT"),
    (BASE | {"COORDINATOR_HEARTBEAT_TTL": "soon"}, "COORDINATOR_HEARTBEAT_TTL"),
    (BASE | {"COORDINATOR_HEARTBEAT_TTL": "-1"}, "COORDINATOR_HEARTBEAT_TTL"),
    (BASE | {"COORDINATOR_MAX_ATTEMPTS": "0"}, "COORDINATOR_MAX_ATTEMPTS"),
    (BASE | {"COORDINATOR_MAX_ATTEMPTS": "2.5"}, "COORDINATOR_MAX_ATTEMPTS"),
    (BASE | {"COORDINATOR_TASK_TIMEOUT": "nan"}, "COORDINATOR_TASK_TIMEOUT"),
    (BASE | {"COORDINATOR_MAX_PROMPT_BYTES": "1MB"}, "COORDINATOR_MAX_PROMPT_BYTES"),
    (BASE | {"COORDINATOR_WEB_TASK_DEADLINE": "x"}, "COORDINATOR_WEB_TASK_DEADLINE"),
    (BASE | {"COORDINATOR_TOKEN": "a b"}, "COORDINATOR_TOKEN"),
    (BASE | {"COORDINATOR_METRICS_TOKEN": "a\tb"}, "COORDINATOR_METRICS_TOKEN"),
    (BASE | {"COORDINATOR_TOKEN": "same", "COORDINATOR_METRICS_TOKEN": "same"},
     "COORDINATOR_METRICS_TOKEN"),
    (BASE | {"COORDINATOR_METRICS_OPEN": "yes"}, "COORDINATOR_METRICS_OPEN"),
    (BASE | {"COORDINATOR_WORKER_TOKEN_KEY": "k"}, "COORDINATOR_WORKER_TOKEN_KEY"),
    (BASE | {"COORDINATOR_LOG_LEVEL": "chatty"}, "COORDINATOR_LOG_LEVEL"),
    (BASE | {"COORDINATOR_PG_POOL_SIZE": "1"}, "COORDINATOR_PG_POOL_SIZE"),
    (BASE | {"COORDINATOR_REPUSH_GRACE": "-2"}, "COORDINATOR_REPUSH_GRACE"),
])
def test_config_errors_name_the_variable(env: dict, name: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env)
    message = str(err.value)
    assert message.startswith(name), message
    assert "\n" not in message
    assert "secret" not in message


# -- request validation --------------------------------------------------------------------


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_parse_valid_request() -> None:
    req = parse_route_request(body(prompt="hi ü", task_type="chat", model="m", worker="w"), 100)
    assert (req.prompt, req.task_type, req.model, req.worker) == ("hi ü", "chat", "m", "w")
    req = parse_route_request(body(prompt="x", task_type="web_search", model=None), 100)
    assert req.model is None and req.worker is None


@pytest.mark.parametrize(("raw", "status", "words"), [
    (b"", 400, "empty"),
    (b"not json", 400, "not valid JSON"),
    (b"\xff\xfe", 400, "not valid JSON"),
    (b"[1, 2]", 422, "JSON object"),
    (body(task_type="web_search"), 422, "'prompt' is missing"),
    (body(prompt="", task_type="web_search"), 422, "'prompt' is empty"),
    (body(prompt="  \n", task_type="web_search"), 422, "'prompt' is empty"),
    (body(prompt=5, task_type="web_search"), 422, "'prompt' must be a string"),
    (body(prompt=["a"], task_type="web_search"), 422, "'prompt' must be a string"),
    (body(prompt="a"), 422, "'task_type' is missing"),
    (body(prompt="a", task_type="dance"), 422, "unknown task_type 'dance'"),
    (body(prompt="a", task_type=1), 422, "'task_type' must be a string"),
    (body(prompt="a", task_type="chat", extra=1), 422, "unknown field(s) 'extra'"),
    (body(prompt="a", task_type="chat", model=3), 422, "'model' must be a string"),
    (body(prompt="a", task_type="chat", model=""), 422, "'model' is empty"),
    (body(prompt="a", task_type="chat", worker=True), 422, "'worker' must be a string"),
    (body(prompt="a", task_type="web_search", worker="w"), 422, "'worker' can only"),
    (body(prompt="a\u0000b", task_type="chat"), 422, "NUL"),
    (b'{"prompt": "\\ud800", "task_type": "chat"}', 422, "surrogate"),
    (body(prompt="x" * 101, task_type="chat"), 413, "101 bytes"),
    (body(prompt="é" * 51, task_type="chat"), 413, "102 bytes"),
    (body(prompt="a", task_type="chat", options=[1]), 422,
     "'options' must be an object of Ollama options (or left out), got an array"),
    (body(prompt="a", task_type="rag", options={"seed": 1}), 422,
     "'options' are Ollama's and rag tasks ask no model through Ollama: leave 'options' out"),
    (body(prompt="a", task_type="chat", options={"num_ctx": 8192, "mirostat": 1}), 422,
     "unknown option(s) 'mirostat', 'num_ctx': 'options' takes num_predict, seed, "
     "temperature, top_k, top_p, min_p, repeat_penalty, stop"),
    (body(prompt="a", task_type="chat", options={"seed": 1.5}), 422,
     "'options.seed' must be an integer, got a number with a fraction"),
    (body(prompt="a", task_type="chat", options={"seed": None}), 422,
     "'options.seed' must be an integer, got null"),
    (body(prompt="a", task_type="chat", options={"temperature": True}), 422,
     "'options.temperature' must be a number, got a boolean"),
    (body(prompt="a", task_type="chat", options={"temperature": -0.5}), 422,
     "'options.temperature' must be at least 0, got -0.5"),
    (body(prompt="a", task_type="chat", options={"num_predict": 0}), 422,
     "'options.num_predict' must be from 1 to 2147483647, got 0"),
    (body(prompt="a", task_type="chat", options={"top_p": 1.5}), 422,
     "'options.top_p' must be from 0 to 1, got 1.5"),
    (body(prompt="a", task_type="chat", options={"stop": ["\n", ""]}), 422,
     "'options.stop' must be an array of non-empty strings"),
    (b'{"prompt": "a", "task_type": "chat", "options": {"temperature": NaN}}', 422,
     "'options.temperature' must be at least 0, got nan"),
])
def test_parse_rejects_with_a_message(raw: bytes, status: int, words: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_route_request(raw, 100)
    assert err.value.status == status
    assert words in err.value.message
    assert "\n" not in err.value.message


def test_options_are_kept_as_ollama_takes_them() -> None:
    options = {"temperature": 0, "seed": 42.0, "num_predict": 64, "stop": ["\n\n"],
               "top_p": 0.9}
    req = parse_route_request(body(prompt="a", task_type="web_search", options=options), 100)
    # JSON Schema's integer 42.0 is Ollama's 42; the rest as given.
    assert req.options == {**options, "seed": 42}
    assert isinstance(req.options["seed"], int)
    assert parse_route_request(body(prompt="a", task_type="chat", options={}), 100).options is None
    assert parse_route_request(body(prompt="a", task_type="chat", options=None), 100
                               ).options is None


def test_unknown_task_type_lists_the_valid_ones() -> None:
    with pytest.raises(RequestError) as err:
        parse_route_request(body(prompt="a", task_type="dance"), 100)
    for task_type in ROUTES:
        assert task_type in err.value.message


def test_validation_message_is_one_line() -> None:
    msg = validation_message([{"loc": ("body", "pid"), "msg": "Input should be a valid integer",
                               "type": "int_type"}])
    assert msg == "'pid': Input should be a valid integer"
    assert "missing" in validation_message([{"loc": ("body", "host"), "msg": "Field required",
                                             "type": "missing"}])
    assert "not valid JSON" in validation_message([{"loc": ("body", 3), "msg": "bad",
                                                    "type": "json_invalid", "ctx": {}}])
    assert "unknown field 'x'" in validation_message([{"loc": ("body", "x"), "msg": "extra",
                                                       "type": "extra_forbidden"}])


# -- access --------------------------------------------------------------------------------

TOKENS = {"COORDINATOR_TOKEN": "operator-token", "COORDINATOR_METRICS_TOKEN": "scrape-token",
          "COORDINATOR_WORKER_TOKEN_KEY": "worker-token-key"}


def test_each_rule_says_who_it_admits_and_refuses() -> None:
    keys = Keys(load_config(BASE | TOKENS))
    operator, metrics, worker = OPERATOR.dependency, METRICS.dependency, WORKER.dependency
    own = b"Bearer " + contract.worker_token("worker-token-key", "w1").encode()

    def check(rule, given: bytes, path: str = "/x", **params: str) -> int | str:
        try:
            return rule.check(keys, given, "POST", path, params).kind
        except RequestError as refused:
            return refused.status

    assert check(operator, b"Bearer operator-token") == "operator"
    assert [check(operator, given) for given in (b"", b"operator-token", b"Bearer nope",
                                                 b"Bearer scrape-token", own)] == [
        401, 401, 401, 403, 403]
    assert (check(metrics, b"Bearer scrape-token"), check(metrics, own)) == ("metrics", 403)
    assert check(worker, own, worker_id="w1") == "worker"
    assert check(worker, own) == "worker"  # registration: the handler checks the body's id
    assert check(worker, own, worker_id="w2") == 403
    assert check(worker, b"Bearer scrape-token", worker_id="w1") == 403
    # The statuses each can refuse with, as the schema documents them.
    assert [rule.refusals(keys) for rule in (operator, metrics, worker)] == [(401, 403)] * 3
    scrape_only = Keys(load_config(BASE | {"COORDINATOR_TOKEN": "operator-token",
                                           "COORDINATOR_METRICS_TOKEN": "scrape-token"}))
    assert (metrics.refusals(scrape_only), operator.refusals(scrape_only)) == ((401,), (401, 403))
    assert operator.refusals(Keys(load_config(BASE))) == ()
    assert check(operator, b"") == 401
    assert Keys(load_config(BASE)).caller(b"") is not None  # no token: everyone is the operator


def test_an_api_route_without_an_access_rule_stops_the_app_being_made(monkeypatch) -> None:
    unguarded = APIRouter()

    @unguarded.get("/unguarded")
    async def unguarded_route() -> dict:
        return {}

    monkeypatch.setattr(app_module, "ROUTERS", (*app_module.ROUTERS, unguarded))
    with pytest.raises(LookupError, match=r"\['GET'\] /unguarded declares no access rule"):
        create_app(load_config(BASE))


# -- routing choice ------------------------------------------------------------------------


def test_routing_table() -> None:
    assert ROUTES["web_search"].queue == "tasks:web"
    assert ROUTES["rag"].queue == "tasks:rag"
    assert set(INFERENCE_TYPES) == {"generate", "chat", "summarize"}
    assert all(ROUTES[t].queue is None for t in INFERENCE_TYPES)


def test_inference_queue_of() -> None:
    assert inference_queue_of("macbookair", "cpu", []) == "tasks:cpu:macbookair"
    assert inference_queue_of("w", "gpu", ["tasks:web", "tasks:x:w"]) == "tasks:x:w"
    assert inference_queue_of("w", None, []) is None


#: (kind, device, queues) of a registration -> the queues it registers.
REGISTERED = [
    ("web", None, ["tasks:web"], ["tasks:web"]),
    ("web", None, [], []),
    ("rag", None, ["tasks:rag", "tasks:rag"], ["tasks:rag"]),
    ("inference", "cpu", [], ["tasks:cpu:w"]),
]
#: (kind, device, queues) of a registration -> the 422's message.
REFUSED = [
    ("web", None, ["tasks:web", "fuzz-1"],
     "a web worker serves tasks:web only, and 'queues' also names fuzz-1: send [\"tasks:web\"]"),
    ("rag", None, ["tasks:web"],
     "a rag worker serves tasks:rag only, and 'queues' also names tasks:web: send "
     "[\"tasks:rag\"]"),
    # As the schema's rules say: an inference worker sends its device, and no queues, not
    # even its own; its queue follows from the device.
    ("inference", "cpu", ["tasks:cpu:w"],
     "an inference worker sends 'device' and no 'queues' (its queue, tasks:cpu:w, follows "
     "from the device), and 'queues' names tasks:cpu:w: leave 'queues' out"),
    ("inference", "cpu", ["tasks:cpu:other", "tasks:cpu:w"],
     "an inference worker sends 'device' and no 'queues' (its queue, tasks:cpu:w, follows "
     "from the device), and 'queues' names tasks:cpu:other, tasks:cpu:w: leave 'queues' out"),
    ("inference", None, ["tasks:mps:w"],
     "an inference worker must send 'device' (its queue is tasks:<device>:<worker_id>) and "
     "no 'queues'"),
    ("inference", None, [],
     "an inference worker must send 'device' (its queue is tasks:<device>:<worker_id>)"),
]


@pytest.mark.parametrize(("kind", "device", "queues", "registered"), REGISTERED)
def test_registered_queues_are_those_the_routing_table_makes(kind, device, queues,
                                                            registered) -> None:
    assert registered_queues(kind, "w", device, queues) == registered


@pytest.mark.parametrize(("kind", "device", "queues", "message"), REFUSED)
def test_other_queue_names_are_refused_saying_which(kind, device, queues, message) -> None:
    with pytest.raises(RequestError) as refused:
        registered_queues(kind, "w", device, queues)
    assert (refused.value.status, refused.value.message) == (422, message)


@pytest.mark.parametrize(("kind", "device", "queues", "accepted"),
                         [(*case[:3], True) for case in REGISTERED]
                         + [(*case[:3], False) for case in REFUSED])
def test_the_schema_accepts_the_registrations_the_server_does(kind, device, queues,
                                                              accepted) -> None:
    # The OpenAPI schema's rules between fields (RegisterBody's allOf) and the server's check
    # say the same of each registration.
    body = {"worker_id": "w", "host": "h", "kind": kind, "instance_id": str(uuid.uuid4()),
            "queues": queues} | ({"device": device} if device else {})
    errors = list(jsonschema.Draft202012Validator(RegisterBody.model_json_schema())
                  .iter_errors(body))
    assert (not errors) is accepted, [error.message for error in errors]


def test_choose_worker_least_loaded_and_model() -> None:
    a = Candidate("a", "tasks:cpu:a", ("llama",))
    b = Candidate("b", "tasks:gpu:b", ("llama", "qwen"))
    dead = Candidate("c", "tasks:cpu:c", ("qwen",), alive=False)
    assert choose_worker([a, b], None, {}) == a  # tie: smallest id
    assert choose_worker([a, b], None, {"tasks:cpu:a": 2, "tasks:gpu:b": 1}) == b
    assert choose_worker([a, b, dead], "qwen", {}) == b
    assert choose_worker([a, dead], "qwen", {}) is None
    assert choose_worker([a, b], "llama", {}, exclude=["a"]) == b
    assert choose_worker([a], "llama", {}, exclude=["a"]) == a  # nothing else fits
    assert choose_worker([], None, {}) is None


def test_choose_worker_avoids_a_worker_failing_its_probes_while_a_healthy_one_fits() -> None:
    sick = Candidate("a", "tasks:cpu:a", ("llama", "qwen"), healthy=False)
    well = Candidate("b", "tasks:gpu:b", ("llama",))
    busy = {"tasks:gpu:b": 9}
    assert choose_worker([sick, well], "llama", busy) == well  # even the busier one
    assert choose_worker([sick, well], "qwen", busy) == sick  # the only one serving it
    # A worker to avoid (the one a task just left) stays avoided before health counts.
    assert choose_worker([sick, well], "llama", {}, exclude=["b"]) == sick
    assert choose_worker([sick], None, {}) == sick


@pytest.mark.parametrize(("registered", "requested"), [
    ("llama3.2:latest", "llama3.2"),
    ("llama3.2", "llama3.2:latest"),
    ("llama3.2", "library/llama3.2"),
    ("llama3.2:3b", "registry.ollama.ai/library/llama3.2:3b"),
    ("hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M", "hf.co/liquidai/lfm2.5-1.2b-jp-gguf:q4_k_m"),
])
def test_a_worker_serves_a_model_by_any_of_its_names(registered: str, requested: str) -> None:
    # Ollama's rule (coordinator_contract.same_model), not string equality.
    assert contract.same_model(registered, requested)
    worker = Candidate("a", "tasks:cpu:a", (registered,))
    assert serves(worker, requested)
    assert choose_worker([worker], requested, {}) == worker
    reg = Registry()
    reg.replace([KnownWorker("a", "h", "inference", "tasks:cpu:a", (registered,), 1e18)], {})
    assert reg.pick(requested).worker_id == "a"


@pytest.mark.parametrize("requested", ["llama3.2:3b", "llama3", "other/llama3.2", "llama3.2 x"])
def test_another_tag_namespace_or_no_name_is_another_model(requested: str) -> None:
    worker = Candidate("a", "tasks:cpu:a", ("llama3.2:latest",))
    assert not serves(worker, requested)
    assert choose_worker([worker], requested, {}) is None


def test_registry_spreads_a_burst() -> None:
    reg = Registry()
    far = 1e18
    reg.replace([KnownWorker("a", "h", "inference", "tasks:cpu:a", (), far),
                 KnownWorker("b", "h", "inference", "tasks:cpu:b", (), far),
                 KnownWorker("w", "h", "web", None, (), far),
                 KnownWorker("d", "h", "inference", "tasks:cpu:d", (), 0.0)], {})
    picks = [reg.pick(None).worker_id for _ in range(6)]
    assert sorted(picks) == ["a", "a", "a", "b", "b", "b"]
    assert reg.pick("none-serves-this") is None


# -- state machine SQL ---------------------------------------------------------------------


def test_insert_needs_a_row() -> None:
    with pytest.raises(ValueError):
        sm.insert_tasks([])


def test_migrations_are_ordered() -> None:
    versions = [m[0] for m in MIGRATIONS]
    assert versions == sorted(set(versions))
    assert pending(set(versions)) == []
    assert pending(set()) == MIGRATIONS


# -- Reaper decisions ----------------------------------------------------------------------


def worker(wid: str, alive: bool = True, kind: str = "inference", models: tuple = (),
           silent: float = 0.5) -> WorkerView:
    queue = f"tasks:cpu:{wid}" if kind == "inference" else None
    return WorkerView(wid, f"host-{wid}", kind, alive, silent if alive else 30.0, 100, queue,
                      models)


def task(status: str = "running", wid: str | None = "a", **kw: object) -> TaskView:
    fields = {"id": uuid.uuid4(), "task_type": "generate", "status": status,
              "queue": f"tasks:cpu:{wid}" if wid else None, "worker": wid or "default",
              "worker_id": wid if status == "running" else None,
              "worker_host": f"host-{wid}" if status == "running" else None,
              "claim": uuid.uuid4() if status == "running" else None, "attempts":
              1 if status == "running" else 0, "max_attempts": 3, "running_for": 5.0}
    fields.update(kw)
    return TaskView(**fields)


def by_id(*workers: WorkerView) -> dict[str, WorkerView]:
    return {w.worker_id: w for w in workers}


def test_dead_worker_task_goes_to_another_alive_worker() -> None:
    t = task()
    actions = plan_inference([t], by_id(worker("a", alive=False), worker("b")), {}, 15, 900)
    assert actions == [Requeue(t, "tasks:cpu:b", "b", actions[0].reason, "worker_dead")]
    assert "worker 'a' on host 'host-a'" in actions[0].reason
    assert actions[0].old_worker == "a"


def test_dead_worker_task_waits_when_no_worker_is_alive() -> None:
    t = task(status="queued")
    actions = plan_inference([t], by_id(worker("a", alive=False)), {}, 15, 900)
    assert len(actions) == 1 and actions[0].queue is None and actions[0].worker == "default"


def test_attempt_limit_fails_naming_worker_and_host() -> None:
    t = task(attempts=3)
    (action,) = plan_inference([t], by_id(worker("a", alive=False), worker("b")), {}, 15, 900)
    assert isinstance(action, Fail)
    assert "3 attempt" in action.error and "'a'" in action.error and "host-a" in action.error


def test_stuck_task_on_alive_worker_is_redispatched() -> None:
    t = task(running_for=1000.0)
    (action,) = plan_inference([t], by_id(worker("a"), worker("b")), {}, 15, 900)
    assert isinstance(action, Requeue) and action.worker == "b" and action.kind == "stuck"
    assert plan_inference([task(running_for=10.0)], by_id(worker("a")), {}, 15, 900) == []


def test_healthy_tasks_are_left_alone() -> None:
    workers = by_id(worker("a"), worker("b"))
    assert plan_inference([task(), task(status="queued")], workers, {}, 15, 900) == []


def test_waiting_tasks_are_dispatched_least_loaded_and_by_model() -> None:
    t1, t2, t3 = (task(status="queued", wid=None) for _ in range(3))
    t4 = task(status="queued", wid=None, model="qwen")
    workers = by_id(worker("a", models=("llama",)), worker("b", models=("qwen",)))
    load = {"tasks:cpu:a": 0, "tasks:cpu:b": 1}
    actions = plan_inference([t1, t2, t3, t4], workers, load, 15, 900)
    assert [a.worker for a in actions] == ["a", "a", "b", "b"]
    assert all(a.kind == "dispatch" for a in actions)


def test_pinned_tasks_wait_for_their_worker() -> None:
    t = task(status="queued", wid=None, worker="a", requested_worker="a")
    assert plan_inference([t], by_id(worker("a", alive=False), worker("b")), {}, 15, 900) == []
    (action,) = plan_inference([t], by_id(worker("a"), worker("b")), {}, 15, 900)
    assert action.worker == "a"
    running = task(requested_worker="a")
    (action,) = plan_inference([running], by_id(worker("a", alive=False), worker("b")), {},
                               15, 900)
    assert action.queue is None and action.worker == "a"


def test_shared_tasks_fail_only_after_the_deadline() -> None:
    web = task(task_type="web_search", wid="w", queue="tasks:web")
    alive = by_id(worker("w", kind="web"))
    assert plan_shared([web], alive, ttl=15, deadline=60) == []
    dead_shortly = {"w": WorkerView("w", "host-w", "web", False, 40.0)}
    assert plan_shared([web], dead_shortly, ttl=15, deadline=60) == []
    dead_long = {"w": WorkerView("w", "host-w", "web", False, 80.0, pid=7)}
    (fail,) = plan_shared([web], dead_long, ttl=15, deadline=60)
    assert "'w'" in fail.error and "host-w" in fail.error and "never re-run" in fail.error
    # inference tasks are not this function's business
    assert plan_shared([task()], dead_long, ttl=15, deadline=60) == []


def test_duplicates_need_two_live_processes() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def inst(started: float, beat: float, host: str = "h1") -> InstanceView:
        return InstanceView("w", uuid.uuid4(), host, 1, now - timedelta(seconds=started),
                            now - timedelta(seconds=beat))

    both = [inst(100, 1, "h1"), inst(50, 2, "h2")]
    found = find_duplicates(both, now, 15)
    assert list(found) == ["w"] and {i.host for i in found["w"]} == {"h1", "h2"}
    # a restart: the old process stopped before the new one started
    restart = [inst(100, 10), inst(5, 1)]
    assert find_duplicates(restart, now, 15) == {}
    # the old one is long dead
    assert find_duplicates([inst(100, 60), inst(50, 1)], now, 15) == {}


def test_find_orphans() -> None:
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    found = find_orphans([(a, "tasks:web"), (b, "tasks:web"), (c, "tasks:rag")], {str(b)})
    assert found == {"tasks:web": [a], "tasks:rag": [c]}


def test_a_virtual_address_is_optional_and_a_wrong_one_named() -> None:
    assert load_config(BASE).virtual_addresses == ()
    cfg = load_config(BASE | {"COORDINATOR_VIRTUAL_ADDRESS": "192.168.0.50"})
    assert cfg.virtual_addresses == ("192.168.0.50",)
    with pytest.raises(ConfigError) as err:
        load_config(BASE | {"COORDINATOR_VIRTUAL_ADDRESS": "coordinator.lan"})
    assert str(err.value) == ("COORDINATOR_VIRTUAL_ADDRESS='coordinator.lan': 'coordinator.lan' "
                              "is not an IP address: use one or more, separated by commas, "
                              "e.g. 192.168.0.50")


def test_bind_takes_several_addresses_and_names_a_wrong_one() -> None:
    cfg = load_config(BASE | {"COORDINATOR_BIND": "127.0.0.1, 10.0.0.40,::1"})
    assert cfg.bind_addresses == ("127.0.0.1", "10.0.0.40", "::1")
    with pytest.raises(ConfigError) as err:
        load_config(BASE | {"COORDINATOR_BIND": "127.0.0.1,lan"})
    assert str(err.value) == ("COORDINATOR_BIND='127.0.0.1,lan': 'lan' is not an IP address: "
                              "use one or more, separated by commas, e.g. "
                              "127.0.0.1,192.168.0.40")


def test_worker_tokens_name_their_worker_and_need_the_key() -> None:
    token = contract.worker_token("k", "web-worker-mac.lan")
    assert token.startswith("worker.web-worker-mac.lan.")
    assert contract.token_worker("k", token) == "web-worker-mac.lan"
    assert contract.token_worker("other", token) is None
    assert contract.token_worker("k", token.replace("mac.lan", "pc.lan")) is None
    assert contract.token_worker("k", "operator-token") is None
    assert contract.token_worker("k", "worker.é.x") is None


def test_a_refused_redis_login_or_command_names_the_user_and_the_fix() -> None:
    cfg = load_config(BASE | {"REDIS_USERNAME": "coordinator", "REDIS_PORT": "6390"})
    wrong = redis.exceptions.AuthenticationError(
        "invalid username-password pair or user is disabled.")
    assert redis_message(wrong, cfg) == (
        "Redis at r:6390 refused the login of user 'coordinator': invalid username-password "
        "pair or user is disabled. Check REDIS_USERNAME and REDIS_PASSWORD (the redis role's "
        "coordinator user and the password derived for it), or that the user is not disabled")
    refused = redis.exceptions.NoPermissionError(
        "this user has no permissions to run the 'lpush' command")
    assert redis_message(refused, cfg) == (
        "Redis at r:6390 refused a command of user 'coordinator': this user has no "
        "permissions to run the 'lpush' command. Check REDIS_USERNAME names the "
        "Coordinator's user (the redis role's redis_coordinator_user), and run site.yml so "
        "the redis role grants it")
